"""Sequence state, warmup, label files, model files and layout findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.validate_helpers import IO, make_model, python_config, rules, validate_one


def _state(initial: str, dims: str = "[ 2 ]") -> str:
    return python_config(
        'max_batch_size: 2 sequence_batching { state [ { input_name: "S" output_name: "SO" '
        f"data_type: TYPE_FP32 dims: {dims} initial_state [ {{ {initial} }} ] }} ] }}"
    )


@pytest.mark.parametrize(
    ("config", "files", "expected"),
    [
        (
            _state('name: "i" data_type: TYPE_INT8 dims: [ 2 ] zero_data: true'),
            {},
            "initial-state-data-type",
        ),
        (
            _state("data_type: TYPE_FP32 dims: [ 2 ] zero_data: true"),
            {},
            "initial-state-name-missing",
        ),
        (
            _state('name: "i" data_type: TYPE_FP32 dims: [ 2, 2 ] zero_data: true'),
            {},
            "initial-state-dims-rank",
        ),
        (
            _state('name: "i" data_type: TYPE_FP32 dims: [ -1 ] zero_data: true', "[ -1 ]"),
            {},
            "initial-state-dims-variable",
        ),
        (
            _state('name: "i" data_type: TYPE_FP32 dims: [ 5 ] zero_data: true'),
            {},
            "initial-state-dims-mismatch",
        ),
        (_state('name: "i" data_type: TYPE_FP32 dims: [ 2 ]'), {}, "initial-state-data-missing"),
        (
            _state('name: "i" data_type: TYPE_FP32 dims: [ 2 ] data_file: "d"'),
            {},
            "initial-state-file-missing",
        ),
        (
            _state('name: "i" data_type: TYPE_FP32 dims: [ 2 ] data_file: "d"'),
            {"initial_state/d": b"1234567"},
            "initial-state-file-too-small",
        ),
    ],
)
def test_sequence_state(
    tmp_path: Path, config: str, files: dict[str, bytes], expected: str
) -> None:
    make_model(tmp_path, config=config, files=dict(files))
    assert rules(validate_one(tmp_path), errors_only=True) == [expected]


def test_initial_state_file_large_enough(tmp_path: Path) -> None:
    make_model(
        tmp_path,
        config=_state('name: "i" data_type: TYPE_FP32 dims: [ 2 ] data_file: "d"'),
        files={"initial_state/d": b"12345678"},
    )
    assert validate_one(tmp_path).ok


def _warm(inputs: str, batch: int = 1, mbs: int = 0) -> str:
    return python_config(
        f'max_batch_size: {mbs} model_warmup [ {{ name: "w" batch_size: '
        f"{batch} inputs {inputs} }} ]"
    )


def _inp(value: str, key: str = "IN") -> str:
    return f'{{ key: "{key}" value {{ {value} }} }}'


@pytest.mark.parametrize(
    ("config", "files", "expected"),
    [
        (
            _warm(_inp("data_type: TYPE_FP32 dims: [ -1 ] zero_data: true")),
            {},
            ["warmup-dims-variable"],
        ),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 4 ]")), {}, ["warmup-data-missing"]),
        (
            _warm(_inp('data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "f"')),
            {},
            ["warmup-file-missing"],
        ),
        (
            _warm(_inp('data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "f"')),
            {"warmup/f": b"x" * 15},
            ["warmup-file-too-small"],
        ),
        (
            _warm(_inp("data_type: TYPE_FP32 dims: [ 4 ] zero_data: true", "OTHER")),
            {},
            ["warmup-input-missing"],
        ),
        (
            _warm(_inp("data_type: TYPE_FP64 dims: [ 4 ] random_data: true")),
            {},
            ["warmup-data-type-mismatch"],
        ),
        (
            _warm(_inp("data_type: TYPE_FP32 dims: [ 1, 4 ] zero_data: true")),
            {},
            ["warmup-shape-mismatch"],
        ),
        (
            _warm(_inp("data_type: TYPE_FP32 dims: [ 4 ] zero_data: true"), batch=2),
            {},
            ["warmup-batch-size-too-large"],
        ),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ 4 ] zero_data: true"), batch=4, mbs=4), {}, []),
        (_warm(_inp("data_type: TYPE_FP32 dims: [ -1 ]"), batch=0), {}, []),
        (
            _warm(_inp('data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "f"')),
            {"warmup/f": b"x" * 16},
            [],
        ),
    ],
)
def test_warmup(tmp_path: Path, config: str, files: dict[str, bytes], expected: list[str]) -> None:
    make_model(tmp_path, config=config, files=dict(files))
    assert rules(validate_one(tmp_path), errors_only=True) == expected


def test_label_files(tmp_path: Path) -> None:
    out = 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "l.txt" } ]\n'
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
    make_model(
        tmp_path,
        config=f'platform: "tensorflow_savedmodel"\n{IO}',
        versions=(),
        files={"1/model.savedmodel": "file"},
    )
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
        (
            'parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { string_value: "/no/x.so" } }',
            "batch-strategy-path-missing",
        ),
        (
            'sequence_batching {} parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { '
            'string_value: "/no/x.so" } }',
            "batch-strategy-with-sequence",
        ),
    ],
)
def test_batch_strategy(tmp_path: Path, body: str, expected: str) -> None:
    make_model(tmp_path, config=python_config(body))
    assert rules(validate_one(tmp_path)) == [expected]


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        (b"", False),
        (b"\x01\x00\x00\x00a\x02\x00\x00\x00bc", True),
        (b"\x01\x00\x00\x00a", False),
        (b"\x01\x00\x00\x00a\x01\x00", False),
        (b"\x01\x00\x00\x00a\x01\x00\x00\x00b\x00\x00\x00\x00", False),
    ],
)
def test_warmup_string_file_must_be_a_bytes_tensor(tmp_path: Path, data: bytes, ok: bool) -> None:
    io = (
        'input [ { name: "IN" data_type: TYPE_STRING dims: [ 2 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    config = python_config(
        'model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value '
        '{ data_type: TYPE_STRING dims: [ 2 ] input_data_file: "s" } } } ]',
        io,
    )
    make_model(tmp_path, config=config, files={"warmup/s": data})
    report = validate_one(tmp_path)
    assert report.ok is ok
    if not ok:
        assert rules(report) == ["warmup-string-data-invalid"]


WARM = (
    'model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value { data_type: '
    "TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]"
)
RETURNS_LIST = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
RETURNS_NONE = (
    "class TritonPythonModel:\n    def execute(self, requests):\n"
    "        def helper():\n            return 1\n        return None\n"
)


@pytest.mark.parametrize(
    ("decoupled", "source", "ok"),
    [
        (True, RETURNS_LIST, False),
        (True, RETURNS_NONE, True),
        (False, RETURNS_NONE, False),
        (False, RETURNS_LIST, True),
    ],
)
def test_warmup_runs_execute(tmp_path: Path, decoupled: bool, source: str, ok: bool) -> None:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    make_model(tmp_path, config=python_config(f"{WARM} {policy}"), files={"1/model.py": source})
    report = validate_one(tmp_path)
    assert report.ok is ok
    if not ok:
        assert rules(report) == ["warmup-execute-return"]


@pytest.mark.parametrize(
    ("source", "rule"),
    [("def broken(:\n", "python-model-syntax-error"), ("x = 1\n", "python-model-class-missing")],
)
def test_python_sources(tmp_path: Path, source: str, rule: str) -> None:
    make_model(tmp_path, files={"1/model.py": source})
    report = validate_one(tmp_path)
    assert rules(report) == [rule]
    assert report.diagnostics[0].file == "m/1/model.py"


@pytest.mark.parametrize(
    "source",
    [
        "from impl import TritonPythonModel\n",
        "from impl import *\n",
        "TritonPythonModel = object\n",
        "try:\n    class TritonPythonModel: ...\nexcept E:\n    pass\n",
    ],
)
def test_model_class_bound_other_ways(tmp_path: Path, source: str) -> None:
    make_model(tmp_path, files={"1/model.py": source})
    assert validate_one(tmp_path).ok


def test_python_model_filename_and_env(tmp_path: Path) -> None:
    make_model(
        tmp_path,
        config=python_config('default_model_filename: "model.onnx"'),
        files={"1/model.onnx": "x"},
    )
    assert rules(validate_one(tmp_path)) == ["python-model-filename-invalid"]
    env = (
        'parameters { key: "EXECUTION_ENV_PATH" value { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/e.tgz" } }'
    )
    make_model(tmp_path, "n", config=python_config(env))
    assert rules(validate_one(tmp_path, "n")) == ["python-execution-env-missing"]
    (tmp_path / "n" / "e.tgz").write_bytes(b"x")
    assert validate_one(tmp_path, "n").ok


def test_empty_repository_agents(tmp_path: Path) -> None:
    make_model(tmp_path, config=python_config("model_repository_agents {}"))
    assert rules(validate_one(tmp_path)) == ["repository-agent-unavailable"]


def test_config_that_is_a_directory(tmp_path: Path) -> None:
    make_model(tmp_path, config=None)
    (tmp_path / "m" / "config.pbtxt").mkdir()
    assert "config-unreadable" in rules(validate_one(tmp_path))


def test_stray_directory(tmp_path: Path) -> None:
    (tmp_path / "notes" / "drafts").mkdir(parents=True)
    report = validate_one(tmp_path, "notes")
    assert not report.ok
    assert rules(report)[0] == "model-dir-stray"
