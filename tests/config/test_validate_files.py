"""Sequence state, warmup, label files, model files and layout findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.validate_helpers import IO, make_model, python_config, rules, validate_one


def _state(initial: str, dims: str = "[ 2 ]") -> str:
    return python_config(
        "max_batch_size: 2 sequence_batching { state [ { input_name: \"S\" output_name: \"SO\" "
        f"data_type: TYPE_FP32 dims: {dims} initial_state [ {{ {initial} }} ] }} ] }}")


@pytest.mark.parametrize(
    ("config", "files", "expected"),
    [
        (_state('name: "i" data_type: TYPE_INT8 dims: [ 2 ] zero_data: true'), {},
         "initial-state-data-type"),
        (_state('data_type: TYPE_FP32 dims: [ 2 ] zero_data: true'), {},
         "initial-state-name-missing"),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ 2, 2 ] zero_data: true'), {},
         "initial-state-dims-rank"),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ -1 ] zero_data: true', "[ -1 ]"), {},
         "initial-state-dims-variable"),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ 5 ] zero_data: true'), {},
         "initial-state-dims-mismatch"),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ 2 ]'), {}, "initial-state-data-missing"),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ 2 ] data_file: "d"'), {},
         "initial-state-file-missing"),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ 2 ] data_file: "d"'),
         {"initial_state/d": b"1234567"}, "initial-state-file-too-small"),
    ],
)
def test_sequence_state(
    tmp_path: Path, config: str, files: dict[str, bytes], expected: str
) -> None:
    make_model(tmp_path, config=config, files=dict(files))
    assert rules(validate_one(tmp_path), errors_only=True) == [expected]


def test_initial_state_file_large_enough(tmp_path: Path) -> None:
    make_model(tmp_path, config=_state('name: "i" data_type: TYPE_FP32 dims: [ 2 ] data_file: '
                                       '"d"'), files={"initial_state/d": b"12345678"})
    assert validate_one(tmp_path).ok


def _warm(inputs: str, batch: int = 1, mbs: int = 0) -> str:
    return python_config(f"max_batch_size: {mbs} model_warmup [ {{ name: \"w\" batch_size: "
                         f"{batch} inputs {inputs} }} ]")


def _inp(value: str, key: str = "IN") -> str:
    return f'{{ key: "{key}" value {{ {value} }} }}'


@pytest.mark.parametrize(
    ("config", "files", "expected"),
    [
        (_warm(_inp("data_type: TYPE_FP32 dims: [ -1 ] zero_data: true")), {},
         ["warmup-dims-variable"]),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 4 ]")), {}, ["warmup-data-missing"]),
        (_warm(_inp('data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "f"')), {},
         ["warmup-file-missing"]),
        (_warm(_inp('data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "f"')),
         {"warmup/f": b"x" * 15}, ["warmup-file-too-small"]),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 4 ] zero_data: true", "OTHER")), {},
         ["warmup-input-missing"]),
        (_warm(_inp("data_type: TYPE_FP64 dims: [ 4 ] random_data: true")), {},
         ["warmup-data-type-mismatch"]),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 1, 4 ] zero_data: true")), {},
         ["warmup-shape-mismatch"]),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 4 ] zero_data: true"), batch=2), {},
         ["warmup-batch-size-too-large"]),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 4 ] zero_data: true"), batch=4, mbs=4), {},
         []),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ -1 ]"), batch=0), {}, []),
        (_warm(_inp('data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "f"')),
         {"warmup/f": b"x" * 16}, []),
    ],
)
def test_warmup(
    tmp_path: Path, config: str, files: dict[str, bytes], expected: list[str]
) -> None:
    make_model(tmp_path, config=config, files=dict(files))
    assert rules(validate_one(tmp_path), errors_only=True) == expected


def test_label_files(tmp_path: Path) -> None:
    out = ('output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "l.txt" }'
           ' ]\n')
    config = 'backend: "python"\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    make_model(tmp_path, config=config + out)
    assert rules(validate_one(tmp_path)) == ["label-file-missing"]
    (tmp_path / "m" / "l.txt").write_text("a\nb\n")
    assert validate_one(tmp_path).ok


def test_model_file_checks(tmp_path: Path) -> None:
    make_model(tmp_path, config=python_config('default_model_filename: "other.py"'))
    report = validate_one(tmp_path)
    assert rules(report) == ["model-file-missing"]
    assert report.diagnostics[0].file == "m/1/other.py"
    (tmp_path / "m" / "1" / "other.py").mkdir()
    assert rules(validate_one(tmp_path)) == ["model-file-wrong-kind"]


def test_savedmodel_must_be_a_directory(tmp_path: Path) -> None:
    make_model(tmp_path, config=f'platform: "tensorflow_savedmodel"\n{IO}', versions=(),
               files={"1/model.savedmodel": "file"})
    assert rules(validate_one(tmp_path)) == ["model-file-wrong-kind"]


def test_prefix_parsed_version_is_looked_up_by_number(tmp_path: Path) -> None:
    make_model(tmp_path, versions=("2abc",))
    report = validate_one(tmp_path)
    assert rules(report) == ["version-dir-prefix-parsed", "model-file-missing"]
    assert report.versions == [2]


def test_layout_warnings(tmp_path: Path) -> None:
    make_model(tmp_path, versions=("1", "01", "v2"))
    report = validate_one(tmp_path)
    assert report.ok
    assert sorted(rules(report)) == ["version-dir-leading-zeros", "version-dir-not-numeric"]


def test_no_version_and_hidden_dir(tmp_path: Path) -> None:
    make_model(tmp_path, name=".cache", versions=())
    assert rules(validate_one(tmp_path, ".cache")) == ["model-dir-hidden", "no-version-available"]


def test_specific_version_missing(tmp_path: Path) -> None:
    make_model(tmp_path, config=python_config("version_policy { specific { versions: [ 1, 5 ] } }"))
    report = validate_one(tmp_path)
    assert report.ok and rules(report) == ["version-not-present"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { string_value: "/no/x.so" } }',
         "batch-strategy-path-missing"),
        ('sequence_batching {} parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { '
         'string_value: "/no/x.so" } }', "batch-strategy-with-sequence"),
    ],
)
def test_batch_strategy(tmp_path: Path, body: str, expected: str) -> None:
    make_model(tmp_path, config=python_config(body))
    assert rules(validate_one(tmp_path)) == [expected]
