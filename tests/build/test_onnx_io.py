"""ONNX signatures, Triton's onnxruntime autocomplete, and config contradictions (--deep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from repokit.config.onnx_io import (
    OnnxModelError,
    autocomplete_onnx_config,
    check_onnx_config,
    read_onnx_signature,
)
from repokit.config.parse import parse_text
from repokit.protocol.generated import model_config_pb2 as mc
from tests.build import models


def _config(text: str) -> mc.ModelConfig:
    return parse_text(text)


def test_signature_reads_names_types_dims_and_skips_initializers(tmp_path: Path) -> None:
    path = models.sequence_bias(tmp_path / "m.onnx")
    signature = read_onnx_signature(path)
    assert [(t.name, t.data_type, t.dims) for t in signature.inputs] == [
        ("x", mc.TYPE_FP32, (-1, -1, 8)),
        ("bias", mc.TYPE_FP32, (-1, 8)),
    ]
    assert [t.name for t in signature.outputs] == ["y"]
    assert signature.can_batch


def test_signature_marks_shape_operands(tmp_path: Path) -> None:
    signature = read_onnx_signature(models.reshape_by_input(tmp_path / "m.onnx"))
    by_name = {t.name: t for t in signature.inputs}
    assert by_name["new_shape"].shape_operand
    assert not by_name["data"].shape_operand
    assert not signature.can_batch  # new_shape has a fixed first dimension


def test_signature_of_a_directory_and_of_garbage(tmp_path: Path) -> None:
    models.add_sub(tmp_path / "dir" / "model.onnx")
    assert len(read_onnx_signature(tmp_path / "dir").inputs) == 2
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all \xff\xfe")
    with pytest.raises(OnnxModelError, match="not a readable ONNX model"):
        read_onnx_signature(bad)
    with pytest.raises(OnnxModelError, match="does not exist"):
        read_onnx_signature(tmp_path / "missing.onnx")


def test_autocomplete_batching_model_gets_default_max_batch_and_dynamic_batching(
    tmp_path: Path,
) -> None:
    signature = read_onnx_signature(models.sequence_bias(tmp_path / "m.onnx"))
    config = _config('name: "seq" platform: "onnxruntime_onnx"')
    filled, failure = autocomplete_onnx_config(config, signature)
    assert failure == ""
    assert filled == ["max_batch_size", "dynamic_batching", "input", "output"]
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in config.input] == [("x", [-1, 8]), ("bias", [8])]
    assert [(o.name, list(o.dims), o.data_type) for o in config.output] == [
        ("y", [-1, 8], mc.TYPE_FP32)
    ]


def test_autocomplete_keeps_given_max_batch_size_and_scheduler(tmp_path: Path) -> None:
    signature = read_onnx_signature(models.sequence_bias(tmp_path / "m.onnx"))
    config = _config('name: "seq" max_batch_size: 16 sequence_batching { }')
    filled, _ = autocomplete_onnx_config(config, signature)
    assert config.max_batch_size == 16
    assert not config.HasField("dynamic_batching")
    assert filled == ["input", "output"]


def test_autocomplete_non_batching_model(tmp_path: Path) -> None:
    signature = read_onnx_signature(models.fixed_scale(tmp_path / "m.onnx"))
    config = _config('name: "fixed"')
    filled, failure = autocomplete_onnx_config(config, signature)
    assert failure == "" and config.max_batch_size == 0
    assert [(i.name, list(i.dims)) for i in config.input] == [("x", [2, 3]), ("counter", [1])]
    assert "max_batch_size" not in filled


def test_autocomplete_refuses_batching_for_a_model_that_cannot(tmp_path: Path) -> None:
    signature = read_onnx_signature(models.fixed_scale(tmp_path / "m.onnx"))
    config = _config('name: "fixed" max_batch_size: 8')
    _, failure = autocomplete_onnx_config(config, signature)
    assert "model does not support batching while non-zero max_batch_size" in failure


def test_autocomplete_is_skipped_when_io_is_given(tmp_path: Path) -> None:
    signature = read_onnx_signature(models.add_sub(tmp_path / "m.onnx"))
    config = _config(
        'name: "a" input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }] '
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }]'
    )
    filled, failure = autocomplete_onnx_config(config, signature)
    assert filled == [] and failure == "" and config.max_batch_size == 0


ADD_SUB_IO = """
name: "add_sub_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: %s dims: %s },
  { name: "%s" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _rules(config_text: str, model: Path) -> list[tuple[str, str]]:
    return [(d.rule, d.path) for d in check_onnx_config(_config(config_text), model)]


def test_check_clean_config_has_no_findings(tmp_path: Path) -> None:
    model = models.add_sub(tmp_path / "m.onnx")
    assert _rules(ADD_SUB_IO % ("TYPE_FP32", "[ 16 ]", "INPUT1"), model) == []


@pytest.mark.parametrize(
    ("dtype", "dims", "second", "expected"),
    [
        ("TYPE_INT32", "[ 16 ]", "INPUT1", ("onnx-input-data-type-mismatch", "input[0].data_type")),
        ("TYPE_FP32", "[ 4, 4 ]", "INPUT1", ("onnx-input-rank-mismatch", "input[0].dims")),
        ("TYPE_FP32", "[ 15 ]", "INPUT1", ("onnx-input-dims-mismatch", "input[0].dims[0]")),
        ("TYPE_FP32", "[ 16 ]", "INPUT9", ("onnx-input-unknown", "input[1].name")),
    ],
)
def test_check_reports_each_contradiction(
    tmp_path: Path, dtype: str, dims: str, second: str, expected: tuple[str, str]
) -> None:
    model = models.add_sub(tmp_path / "m.onnx")
    found = _rules(ADD_SUB_IO % (dtype, dims, second), model)
    assert expected in found
    if second == "INPUT9":  # INPUT1 is then fed by nothing
        assert ("onnx-input-missing", "input") in found


def test_check_messages_name_both_sides(tmp_path: Path) -> None:
    model = models.add_sub(tmp_path / "m.onnx")
    [finding] = check_onnx_config(_config(ADD_SUB_IO % ("TYPE_INT32", "[16]", "INPUT1")), model)
    assert finding.message == (  # Triton's onnxruntime backend's words
        "unable to load model 'add_sub_onnx', configuration expects datatype TYPE_INT32 for "
        "input 'INPUT0', model provides TYPE_FP32"
    )
    assert finding.model == "add_sub_onnx" and finding.is_error


def test_check_batching_config_over_a_fixed_batch_model(tmp_path: Path) -> None:
    model = models.add_sub(tmp_path / "m.onnx", batch=4)
    found = _rules(ADD_SUB_IO % ("TYPE_FP32", "[ 16 ]", "INPUT1"), model)
    assert ("onnx-input-batch-unsupported", "max_batch_size") in found


def test_check_without_max_batch_size_sees_the_rank_difference(tmp_path: Path) -> None:
    model = models.add_sub(tmp_path / "m.onnx")
    text = (ADD_SUB_IO % ("TYPE_FP32", "[ 16 ]", "INPUT1")).replace("max_batch_size: 8", "")
    found = _rules(text, model)
    assert ("onnx-input-rank-mismatch", "input[0].dims") in found
    assert ("onnx-output-rank-mismatch", "output[0].dims") in found


def test_check_uses_reshape_and_accepts_sequence_controls(tmp_path: Path) -> None:
    model = models.fixed_scale(tmp_path / "m.onnx")
    text = """
    name: "fixed"
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 6 ] reshape { shape: [ 2, 3 ] } } ]
    output [ { name: "y" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
    sequence_batching {
      control_input [ { name: "counter" control [ { kind: CONTROL_SEQUENCE_START
                                                    int32_false_true: [ 0, 1 ] } ] } ]
    }
    """
    assert _rules(text, model) == []
    broken = text.replace("shape: [ 2, 3 ]", "shape: [ 3, 2 ]")
    assert ("onnx-input-dims-mismatch", "input[0].reshape.shape[0]") in _rules(broken, model)


def test_check_autocompletes_a_copy_first(tmp_path: Path) -> None:
    model = models.fixed_scale(tmp_path / "m.onnx")
    config = _config('name: "fixed" max_batch_size: 4')
    [finding] = check_onnx_config(config, model)
    assert finding.rule == "onnx-autofill-failed"
    assert not config.input  # not modified
    assert check_onnx_config(_config('name: "fixed"'), model) == []


def test_check_unreadable_model_is_one_error(tmp_path: Path) -> None:
    [finding] = check_onnx_config(_config('name: "m"'), tmp_path / "nope.onnx", model="m")
    assert finding.rule == "onnx-model-unreadable" and finding.model == "m"


def test_sequence_inputs_are_not_tensors(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    seq_type = helper.make_tensor_sequence_value_info("items", TensorProto.FLOAT, None)
    out = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    graph = helper.make_graph([helper.make_node("SequenceLength", ["items"], ["n"])], "g",
                              [seq_type], [out])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(tmp_path / "s.onnx"))
    with pytest.raises(OnnxModelError, match="'items' is not a tensor"):
        read_onnx_signature(tmp_path / "s.onnx")


def test_outputs_are_compared_with_their_inferred_shapes(tmp_path: Path) -> None:
    # Triton's qa onnx_batch_item (gen_qa_ragged_models.py): BATCH_OUTPUT is declared [-1,-1]
    # but is an Identity of a [-1,2] input; onnxruntime, and so Triton, sees [-1,2], which the
    # config's dims [ 2 ] match exactly
    import onnx
    from onnx import TensorProto, helper

    batch_in = helper.make_tensor_value_info("BATCH_INPUT", TensorProto.FLOAT, ["b", 2])
    batch_out = helper.make_tensor_value_info("BATCH_OUTPUT", TensorProto.FLOAT, ["n", "m"])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["BATCH_INPUT"], ["BATCH_OUTPUT"])],
        "g",
        [batch_in],
        [batch_out],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    text = """
    name: "batch_item"
    backend: "onnxruntime"
    max_batch_size: 4
    input [ { name: "BATCH_INPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "BATCH_OUTPUT" data_type: TYPE_FP32 dims: [ %s ] } ]
    """
    assert _rules(text % "2", path) == []
    assert ("onnx-output-dims-mismatch", "output[0].dims[0]") in _rules(text % "3", path)


@pytest.mark.parametrize(
    ("body", "count"),
    [
        ('input [ { name: "A" }, { name: "B" optional: true } ]', 1),  # optional: not counted
        (
            'input [ { name: "A" } ]\nbatch_input [ { kind: BATCH_ELEMENT_COUNT '
            'target_name: "N" data_type: TYPE_FP32 source_input: "A" } ]',
            2,
        ),
        (
            'input [ { name: "A" } ]\nsequence_batching { control_input [\n'
            '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },\n'
            '{ name: "R" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] } ] },\n'
            '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ]\n'
            '  state [ { input_name: "IS" output_name: "OS" data_type: TYPE_FP32 dims: [1] } ] }',
            5,
        ),
    ],
)
def test_the_input_count_is_the_onnxruntime_backends(body: str, count: int) -> None:
    from repokit.config.onnx_io import expected_input_count

    assert expected_input_count(_config(body)) == count
