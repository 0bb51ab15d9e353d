"""validate and lint read the model files by default (``--no-deep`` skips them): ONNX models and
TensorFlow graphdefs against their config, as the backends compare them at load time."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.config.graphdef_io import read_graphdef_signature
from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from repokit.protocol.generated import model_config_pb2 as mc

SIMPLE_CONFIG = """name: "simple"
platform: "{platform}"
max_batch_size: 8
input [
  {{
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ {dims} ]
  }},
  {{
    name: "{input1}"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }},
  {{
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }}
]
"""


def _simple_onnx(path: Path) -> None:
    """Triton's ``simple`` as ONNX: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    tensors = {
        name: helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])
        for name in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
    }
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "simple",
        [tensors["INPUT0"], tensors["INPUT1"]],
        [tensors["OUTPUT0"], tensors["OUTPUT1"]],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


# --- a GraphDef written with the protobuf wire format by hand (independent of the reader) ---


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _attr(key: str, value: bytes) -> bytes:
    return _field(5, _field(1, key.encode()) + _field(2, value))


def _shape(dims: list[int]) -> bytes:
    return b"".join(_field(2, _int_field(1, d)) for d in dims)


def _node(name: str, op: str, inputs: list[str], attrs: bytes) -> bytes:
    body = _field(1, name.encode()) + _field(2, op.encode())
    body += b"".join(_field(3, i.encode()) for i in inputs)
    return _field(1, body + attrs)


def _simple_graphdef(path: Path) -> None:
    """Triton's ``simple`` as a graphdef: placeholders INPUT0/1 (DT_INT32 = 3, shape [-1,16]),
    ADD and SUB, Identity outputs OUTPUT0/1."""
    int32 = _int_field(6, 3)  # AttrValue.type
    placeholder = _attr("dtype", int32) + _attr("shape", _field(7, _shape([-1, 16])))
    graph = _node("INPUT0", "Placeholder", [], placeholder)
    graph += _node("INPUT1", "Placeholder", [], placeholder)
    graph += _node("ADD", "Add", ["INPUT0", "INPUT1"], _attr("T", int32))
    graph += _node("SUB", "Sub", ["INPUT0", "INPUT1"], _attr("T", int32))
    graph += _node("OUTPUT0", "Identity", ["ADD"], _attr("T", int32))
    graph += _node("OUTPUT1", "Identity", ["SUB"], _attr("T", int32))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(graph)


def _repo(tmp_path: Path, kind: str, dims: str = "16", input1: str = "INPUT1") -> Path:
    repo = tmp_path / "repo"
    if kind == "onnx":
        _simple_onnx(repo / "simple" / "1" / "model.onnx")
        platform = "onnxruntime_onnx"
    else:
        _simple_graphdef(repo / "simple" / "1" / "model.graphdef")
        platform = "tensorflow_graphdef"
    text = SIMPLE_CONFIG.format(platform=platform, dims=dims, input1=input1)
    (repo / "simple" / "config.pbtxt").write_text(text)
    return repo


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(), list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.output


def test_graphdef_reader_sees_placeholders_and_nodes(tmp_path: Path) -> None:
    _simple_graphdef(tmp_path / "model.graphdef")
    signature = read_graphdef_signature(tmp_path / "model.graphdef")
    assert [(t.name, t.data_type, t.dims) for t in signature.inputs] == [
        ("INPUT0", mc.TYPE_INT32, (-1, 16)),
        ("INPUT1", mc.TYPE_INT32, (-1, 16)),
    ]
    output = signature.output("OUTPUT0")
    assert output is not None and output.data_type == mc.TYPE_INT32 and not output.rank_known
    assert signature.output("NOPE") is None


@pytest.mark.parametrize("kind", ["onnx", "graphdef"])
def test_matching_config_passes(tmp_path: Path, kind: str) -> None:
    code, out = _invoke("validate", str(_repo(tmp_path, kind)))
    assert code == 0, out


@pytest.mark.parametrize(("kind", "prefix"), [("onnx", "onnx"), ("graphdef", "tensorflow")])
def test_dims_16_to_8_fails_validate_and_lint_unless_no_deep(
    tmp_path: Path, kind: str, prefix: str
) -> None:
    repo = str(_repo(tmp_path, kind, dims="8"))
    for command in ("validate", "lint"):
        code, out = _invoke(command, repo, "--format", "json")
        assert code == 1, out
        diagnostics = json.loads(out)["models"]["simple"]["diagnostics"]
        [finding] = [d for d in diagnostics if d["severity"] == "error"]
        assert finding["rule"] == f"{prefix}-input-dims-mismatch"
        assert finding["path"] == "input[0].dims[0]" and finding["file"] == "simple/config.pbtxt"
        if kind == "onnx":  # Triton's onnxruntime backend's words
            assert (
                "model 'simple', tensor 'INPUT0': the model expects 2 dimensions (shape "
                "[-1,16]) but the model configuration specifies 2 dimensions (an initial batch "
                "dimension because max_batch_size > 0 followed by the explicit tensor shape, "
                "making complete shape [-1,8])"
            ) in finding["message"]
        else:
            assert "config 8, model 16" in finding["message"]
        assert (
            f"(model file simple/1/model.{'onnx' if kind == 'onnx' else 'graphdef'})"
            in (finding["message"])
        )
        code, out = _invoke(command, repo, "--no-deep")
        assert code == 0, out


@pytest.mark.parametrize(("kind", "prefix"), [("onnx", "onnx"), ("graphdef", "tensorflow")])
def test_misnamed_input_says_what_differs(tmp_path: Path, kind: str, prefix: str) -> None:
    repo = _repo(tmp_path, kind, input1="INPUT_1")
    report = validate_repository(repo, ValidateOptions(deep=True))
    findings = {d.rule: d.message for d in report.models["simple"].diagnostics}
    unknown = findings[f"{prefix}-input-unknown"]
    if kind == "graphdef":
        assert "input 'INPUT_1' does not exist in the model (did you mean 'INPUT1'?)" in unknown
    else:  # Triton's onnxruntime backend's words
        assert (
            "unexpected inference input 'INPUT_1', allowed inputs are: INPUT0, INPUT1 "
            "(did you mean 'INPUT1'?)"
        ) in unknown
        missing = findings["onnx-input-missing"]  # it also refuses a model input not fed
        assert "the model has input 'INPUT1'" in missing
        assert "the config lists 'INPUT_1' instead, which the model does not have" in missing
        assert "inputs, model provides" not in missing  # the counts are equal


def test_missing_model_input_counts_only_when_nothing_is_misnamed(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "onnx")
    config = repo / "simple" / "config.pbtxt"
    text = config.read_text()
    start = text.index('  {\n    name: "INPUT1"')
    config.write_text(text[: start - 2] + "\n]" + text[text.index("]\noutput") + 1 :])
    report = validate_repository(repo, ValidateOptions(deep=True))
    [finding] = report.models["simple"].diagnostics
    assert finding.rule == "onnx-input-missing"
    assert finding.message.startswith(  # Triton's onnxruntime backend's words, and which
        "unable to load model 'simple', configuration expects 1 inputs, model provides 2 "
        "(the config does not feed 'INPUT1')"
    )


def test_unreadable_model_file_is_an_error(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "graphdef")
    (repo / "simple" / "1" / "model.graphdef").write_bytes(b"\xff\xff\xff")
    report = validate_repository(repo, ValidateOptions(deep=True))
    [finding] = report.models["simple"].diagnostics
    assert finding.rule == "tensorflow-model-unreadable"
    assert "is not a TensorFlow GraphDef" in finding.message


def test_strict_does_not_autocomplete_before_comparing(tmp_path: Path) -> None:
    """With --strict (autofill off) an ONNX config is compared as written."""
    repo = _repo(tmp_path, "onnx")
    report = validate_repository(repo, ValidateOptions(deep=True, strict=True))
    assert report.models["simple"].ok


def test_python_sources_are_read_unless_no_deep(tmp_path: Path) -> None:
    model = tmp_path / "repo" / "py"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text("class NotTheModel:\n    pass\n")
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    for command in ("validate", "lint"):
        code, out = _invoke(command, str(tmp_path / "repo"), "--format", "json")
        assert code == 1
        rules = [d["rule"] for d in json.loads(out)["models"]["py"]["diagnostics"]]
        assert "python-model-class-missing" in rules
        code, out = _invoke(command, str(tmp_path / "repo"), "--no-deep")
        assert code == 0, out
