"""onnxruntime backend on tiny models built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from repokit.backends.onnxruntime import OnnxRuntimeBackend
from repokit.backends.registry import create_backend
from repokit.errors import Code, RepokitError
from repokit.scheduler.sequence_batch import SequenceBatchScheduler
from repokit.scheduler.sequence_controls import FLAG_START
from tests.backends.conftest import make_context, request


def onnx_bytes(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def add_sub_model(elem: int = TensorProto.FLOAT, dims: list[object] | None = None) -> bytes:
    shape = dims if dims is not None else ["batch", 4]
    io = [helper.make_tensor_value_info(n, elem, shape) for n in ("INPUT0", "INPUT1")]
    out = [helper.make_tensor_value_info(n, elem, shape) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return onnx_bytes(nodes, io, out)


ADD_SUB_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {t} dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: {t} dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {t} dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: {t} dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
{extra}
"""


async def loaded(
    tmp_path: Path, name: str, config: str, model: bytes, filename: str = "model.onnx"
) -> OnnxRuntimeBackend:
    context = make_context(tmp_path, name, config, {filename: model})
    backend = create_backend(context)
    assert isinstance(backend, OnnxRuntimeBackend)
    await backend.load()
    return backend


async def test_float_add_sub_batch_is_concatenated_and_split(tmp_path: Path) -> None:
    backend = await loaded(
        tmp_path,
        "add_sub",
        ADD_SUB_CONFIG.format(name="add_sub", t="TYPE_FP32", extra=""),
        add_sub_model(),
    )
    assert backend.instance_count == 2
    a = [np.arange(4 * n, dtype=np.float32).reshape(n, 4) for n in (1, 3)]
    b = [np.ones((n, 4), dtype=np.float32) for n in (1, 3)]
    results, timing = await backend.execute(
        1,
        [
            request({"INPUT0": a[0], "INPUT1": b[0]}),
            request({"INPUT0": a[1], "INPUT1": b[1]}, outputs=("OUTPUT1",)),
        ],
    )
    assert timing.compute_infer_ns > 0
    first, second = results
    assert first.error is None and [t.name for t in first.outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(first.outputs[0].data, a[0] + 1)
    assert first.outputs[0].datatype == "FP32" and first.outputs[0].shape == (1, 4)
    assert [t.name for t in second.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(second.outputs[0].data, a[1] - 1)
    await backend.unload()


async def test_int64_fixed_dims_without_batching(tmp_path: Path) -> None:
    config = (
        ADD_SUB_CONFIG.format(name="ints", t="TYPE_INT64", extra="")
        .replace("max_batch_size: 8", "max_batch_size: 0")
        .replace("count: 2", "count: 1")
    )
    backend = await loaded(tmp_path, "ints", config, add_sub_model(TensorProto.INT64, [4]))
    x = np.array([5, 6, 7, 8], dtype=np.int64)
    (result,), _ = await backend.execute(0, [request({"INPUT0": x, "INPUT1": x})])
    assert result.outputs[0].datatype == "INT64"
    assert result.outputs[0].data.tolist() == [10, 12, 14, 16]
    # two non-batched requests run one after the other
    results, _ = await backend.execute(0, [request({"INPUT0": x, "INPUT1": x})] * 2)
    assert [r.outputs[1].data.tolist() for r in results] == [[0, 0, 0, 0]] * 2
    await backend.unload()


async def test_reshape_both_ways_and_model_file_in_directory(tmp_path: Path) -> None:
    model = onnx_bytes(
        [helper.make_node("Identity", ["X"], ["Y"])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 2, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 2, 2])],
    )
    config = """
name: "reshaped"
backend: "onnxruntime"
default_model_filename: "model_dir"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
"""
    backend = await loaded(tmp_path, "reshaped", config, model, filename="model_dir/model.onnx")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (result,), _ = await backend.execute(0, [request({"X": x})])
    assert result.outputs[0].shape == (2, 4)
    np.testing.assert_array_equal(result.outputs[0].data, x)
    await backend.unload()


async def test_string_identity(tmp_path: Path) -> None:
    model = onnx_bytes(
        [helper.make_node("Identity", ["S"], ["T"])],
        [helper.make_tensor_value_info("S", TensorProto.STRING, [-1])],
        [helper.make_tensor_value_info("T", TensorProto.STRING, [-1])],
    )
    config = """
name: "strings"
platform: "onnxruntime_onnx"
input [ { name: "S" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "T" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
    backend = await loaded(tmp_path, "strings", config, model)
    (result,), _ = await backend.execute(0, [request({"S": np.array([b"ab", b"c"], dtype=object)})])
    assert result.outputs[0].datatype == "BYTES"
    assert result.outputs[0].data.tolist() == [b"ab", b"c"]
    await backend.unload()


async def test_runtime_error_is_internal(tmp_path: Path) -> None:
    backend = await loaded(
        tmp_path, "m", ADD_SUB_CONFIG.format(name="m", t="TYPE_FP32", extra=""), add_sub_model()
    )
    bad = np.zeros((1, 4), dtype=np.int32)
    (result,), _ = await backend.execute(0, [request({"INPUT0": bad, "INPUT1": bad})])
    assert result.error is not None and result.error.code is Code.INTERNAL
    assert result.error.message.startswith("onnx runtime error")
    await backend.unload()


async def test_config_datatype_mismatch_fails_load(tmp_path: Path) -> None:
    context = make_context(
        tmp_path,
        "m",
        ADD_SUB_CONFIG.format(name="m", t="TYPE_INT32", extra=""),
        {"model.onnx": add_sub_model()},
    )
    with pytest.raises(RepokitError) as info:
        await create_backend(context).load()
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "unable to load model 'm', configuration expects datatype "
        "TYPE_INT32 for input 'INPUT0', model provides FP32"
    )


async def test_config_name_unknown_to_model_fails_load(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.format(name="m", t="TYPE_FP32", extra="").replace('"OUTPUT1"', '"OUT"')
    context = make_context(tmp_path, "m", config, {"model.onnx": add_sub_model()})
    with pytest.raises(RepokitError, match="unexpected output 'OUT' in the configuration"):
        await create_backend(context).load()


async def test_missing_and_corrupt_model_files(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.format(name="m", t="TYPE_FP32", extra="")
    missing = make_context(tmp_path, "m", config, {})
    with pytest.raises(RepokitError) as info:
        await create_backend(missing).load()
    assert info.value.code is Code.UNAVAILABLE and "model.onnx" in info.value.message
    corrupt = make_context(tmp_path / "other", "m", config, {"model.onnx": b"not onnx"})
    with pytest.raises(RepokitError) as info:
        await create_backend(corrupt).load()
    assert info.value.code is Code.INTERNAL
    assert info.value.message.startswith("onnx runtime error")


async def test_bad_thread_count_parameter(tmp_path: Path) -> None:
    extra = 'parameters { key: "intra_op_thread_count" value: { string_value: "many" } }'
    context = make_context(
        tmp_path,
        "m",
        ADD_SUB_CONFIG.format(name="m", t="TYPE_FP32", extra=extra),
        {"model.onnx": add_sub_model()},
    )
    with pytest.raises(RepokitError) as info:
        await create_backend(context).load()
    assert info.value.code is Code.INVALID_ARG
    assert "'intra_op_thread_count' parameter value 'many'" in info.value.message


STATE_CONFIG = """
name: "acc"
platform: "onnxruntime_onnx"
max_batch_size: 0
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32
            dims: [ 1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""


def accumulator_model() -> bytes:
    """OUTPUT = OUTPUT_STATE = INPUT + INPUT_STATE * (1 - START): an implicit-state sum."""
    names = ("INPUT", "INPUT_STATE", "START")
    io = [helper.make_tensor_value_info(n, TensorProto.INT32, [1]) for n in names]
    out = [
        helper.make_tensor_value_info(n, TensorProto.INT32, [1]) for n in ("OUTPUT", "OUTPUT_STATE")
    ]
    one = helper.make_tensor("ONE", TensorProto.INT32, [1], [1])
    nodes = [
        helper.make_node("Constant", [], ["one"], value=one),
        helper.make_node("Sub", ["one", "START"], ["keep"]),
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        helper.make_node("Add", ["INPUT", "kept"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"]),
    ]
    return onnx_bytes(nodes, io, out)


@pytest.mark.parametrize("outputs", [(), ("OUTPUT",)])
async def test_implicit_state_outputs_the_config_does_not_list_are_returned(
    tmp_path: Path, outputs: tuple[str, ...]
) -> None:
    """Triton 2.51 (L0_implicit_state, L0_dyna_implicit_state with onnx models): the state
    output is no config output, the sequence batcher asks for it and gets it back, so the
    sum carries from request to request whether the client names its outputs or not."""
    backend = await loaded(tmp_path, "acc", STATE_CONFIG, accumulator_model())
    scheduler = SequenceBatchScheduler(backend, backend.context.config, model_dir=tmp_path)
    await scheduler.start()
    sums = []
    for index, value in enumerate((1, 2, 3)):
        given = request(
            {"INPUT": np.array([value], np.int32)},
            outputs,
            correlation_id=9,
            flags=FLAG_START if index == 0 else 0,
        )
        result = (await scheduler.submit(given, 0)).result
        assert result.error is None and [t.name for t in result.outputs] == ["OUTPUT"]
        sums.append(result.outputs[0].data.tolist())
    assert sums == [[1], [3], [6]]
    await scheduler.stop()
    await backend.unload()
