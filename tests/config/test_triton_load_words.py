"""The load errors ``repokit serve`` takes from the rules are Triton 2.51's texts (measured
through its load API: tests/differential/test_load_log_vs_triton.py), while ``repokit
validate`` keeps its own message saying what to fix: file paths as Triton joins them, the
request id prefix of its request checks on warmup samples, the python stub's exception texts,
the ensemble checks without the advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from repokit.config.rules.triton_words import join_path, unreadable_file
from repokit.core.model_source import ModelLoadError, read_model

ECHO = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _config(
    max_batch_size: int = 0, output: str = "", warmup: str = "", inputs: str = "", extra: str = ""
) -> str:
    inputs = inputs or '{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }'
    sample = f'model_warmup [ {{ name: "w" {warmup} }} ]\n' if warmup else ""
    return (
        f'backend: "python"\nmax_batch_size: {max_batch_size}\ninput [ {inputs} ]\n'
        f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] {output} }} ]\n{sample}{extra}'
    )


def _sample(batch_size: int = 1, dims: str = "4", data: str = "zero_data: true") -> str:
    return (
        f'batch_size: {batch_size} inputs {{ key: "X" value: {{ data_type: TYPE_FP32 '
        f"dims: [ {dims} ] {data} }} }}"
    )


def _refusal(root: Path, config: str, source: str = ECHO, filename: str = "model.py") -> str:
    model = root / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / filename).write_text(source)
    (model / "config.pbtxt").write_text(config)
    with pytest.raises(ModelLoadError) as refused:
        read_model("m", model)
    return refused.value.reason


def test_join_path_appends_absolute_segments_and_normalises_nothing() -> None:
    assert join_path("/r/m", "labels.txt") == "/r/m/labels.txt"
    assert join_path("/r/m", "/abs/l.txt") == "/r/m/abs/l.txt"
    assert join_path("/r/m/", "/abs/l.txt") == "/r/m/abs/l.txt"
    assert join_path("/r/m", "sub/../l.txt") == "/r/m/sub/../l.txt"
    assert join_path("/r/m", "warmup", "in.bin") == "/r/m/warmup/in.bin"


def test_unreadable_file_says_why_as_triton(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.txt"
    assert unreadable_file(str(missing)) == (
        f"failed to open text file for read {missing}: No such file or directory"
    )
    assert unreadable_file(str(tmp_path)) == (
        f"failed to open text file for read {tmp_path}: Is a directory"
    )


@pytest.mark.parametrize(
    ("label", "shown"),
    [("labels.txt", "labels.txt"), ("/abs/l.txt", "abs/l.txt"), ("s/../l.txt", "s/../l.txt")],
)
def test_a_missing_label_file_is_named_by_triton_s_path(
    tmp_path: Path, label: str, shown: str
) -> None:
    reason = _refusal(tmp_path, _config(output=f'label_filename: "{label}"'))
    assert reason == (
        f"failed to open text file for read {tmp_path / 'm'}/{shown}: No such file or directory"
    )


def _warmup_refusal(tmp_path: Path, **config: str | int) -> str:
    return _refusal(tmp_path, _config(**config))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (
            {"warmup": _sample(dims="-1")},
            "warmup setting expects all variable-size dimensions are specified for input 'X'",
        ),
        (
            {"warmup": 'batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
             "dims: [ 4 ] } }"},
            "[request id: <id_unknown>] warmup setting expects input 'X' to have "
            "input_data_type set",
        ),
        (
            {"warmup": _sample().replace("TYPE_FP32", "TYPE_INT32")},
            "[request id: <id_unknown>] inference input 'X' data-type is 'INT32', but model "
            "'m' expects 'FP32'",
        ),
        (
            {"warmup": _sample(dims="5")},
            "[request id: <id_unknown>] unexpected shape for input 'X' for model 'm'. "
            "Expected [4], got [5]. ",
        ),
        (
            {"max_batch_size": 4, "warmup": _sample(dims="5")},
            "[request id: <id_unknown>] unexpected shape for input 'X' for model 'm'. "
            f"Expected [-1,4], got [1,5]. {NOTE}",
        ),
        (
            {
                "warmup": _sample(),
                "inputs": '{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }, '
                '{ name: "Z" data_type: TYPE_FP32 dims: [ 4 ] }',
            },
            "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'm'. Got "
            "input(s) ['X'], but missing required input(s) ['Z']. Please provide all required "
            "input(s).",
        ),
        (
            {"warmup": _sample(batch_size=2)},
            "failed to run warmup sample 'w': batch size 2 for 'm_0', max allowed is 0; "
            "batch size 2 for 'm_0', max allowed is 0; ",
        ),
        (
            {
                "max_batch_size": 1,
                "warmup": _sample(batch_size=2),
                "extra": 'instance_group [ { name: "g" count: 2 kind: KIND_CPU } ]\n',
            },
            "failed to run warmup sample 'w': batch size 2 for 'g_0', max allowed is 1; "
            "batch size 2 for 'g_0', max allowed is 1; ",
        ),
    ],
    ids=["dims", "data", "type", "shape", "batched-shape", "inputs", "batch", "group-batch"],
)  # fmt: skip
def test_warmup_samples_fail_as_triton_s_requests(
    tmp_path: Path, config: dict[str, str | int], reason: str
) -> None:
    assert _warmup_refusal(tmp_path, **config) == reason


def test_warmup_files_fail_as_triton_reads_them(tmp_path: Path) -> None:
    missing = _warmup_refusal(tmp_path / "a", warmup=_sample(data='input_data_file: "in.bin"'))
    assert missing == (
        f"failed to open text file for read {tmp_path / 'a' / 'm'}/warmup/in.bin: "
        "No such file or directory"
    )
    root = tmp_path / "b"
    (root / "m" / "warmup").mkdir(parents=True)
    (root / "m" / "warmup" / "in.bin").write_bytes(b"\0" * 15)
    short = _warmup_refusal(root, warmup=_sample(data='input_data_file: "in.bin"'))
    assert short == (
        "[request id: <id_unknown>] warmup setting expects 16 bytes, but the data provided "
        "from in.binonly has 15 bytes"
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (
            b"\1\0",
            "incomplete string length indicator for inference input 'X' for model 'm', "
            "expecting 4 bytes but only 2 bytes available. Please make sure the string length "
            "indicator is in one buffer.",
        ),
        (
            b"\1\0\0\0a\1\0\0\0b",
            "unexpected number of string elements 2 for inference input 'X' for model 'm', "
            "expecting 1",
        ),
    ],
)
def test_string_warmup_data_fails_as_triton_s_request_check(
    tmp_path: Path, data: bytes, reason: str
) -> None:
    (tmp_path / "m" / "warmup").mkdir(parents=True)
    (tmp_path / "m" / "warmup" / "s.bin").write_bytes(data)
    sample = (
        'batch_size: 1 inputs { key: "X" value: { data_type: TYPE_STRING dims: [ 1 ] '
        'input_data_file: "s.bin" } }'
    )
    config = (
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        f'model_warmup [ {{ name: "w" {sample} }} ]\n'
    )
    assert _refusal(tmp_path, config) == f"[request id: <id_unknown>] {reason}"


def test_python_sources_fail_with_the_stub_s_exception(tmp_path: Path) -> None:
    source = "class TritonPythonModel:\n    def execute(self, requests)\n        return []\n"
    assert _refusal(tmp_path / "a", _config(), source) == (
        "SyntaxError: expected ':' (model.py, line 2)"
    )
    custom = _config(extra='default_model_filename: "m.py"\n')
    assert _refusal(tmp_path / "b", custom, "x = 1\n", filename="m.py") == (
        "AttributeError: module '1.m' has no attribute 'TritonPythonModel'"
    )


def test_validate_keeps_its_own_message(tmp_path: Path) -> None:
    from repokit.config.report import ValidateOptions
    from repokit.config.validate import validate_model
    from repokit.repository.layout import scan_model_dir

    _refusal(tmp_path, _config(output='label_filename: "labels.txt"'))
    model = scan_model_dir(tmp_path / "m", "m")
    report = validate_model(model, ValidateOptions(target="cpu"), tmp_path)
    [finding] = [d for d in report.diagnostics if d.rule == "label-file-missing"]
    assert "resolved relative to the model directory" in finding.message
    assert finding.load_error.endswith("labels.txt: No such file or directory")
    assert "triton" not in finding.to_dict()
