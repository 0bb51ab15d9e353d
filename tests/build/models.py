"""Small ONNX models built with onnx.helper, and repositories around them, for build tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from repokit.paths import default_sample_repository

OPSET = [helper.make_opsetid("", 13)]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def add_sub(path: Path, batch: str | int = "batch", width: int = 16) -> Path:
    """INPUT0, INPUT1 [batch, width] FP32 -> OUTPUT0 = sum, OUTPUT1 = difference."""
    shape = [batch, width]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("INPUT0", "INPUT1")
    ]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("OUTPUT0", "OUTPUT1")
    ]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return _save(helper.make_model(helper.make_graph(nodes, "add_sub", inputs, outputs),
                                   opset_imports=OPSET), path)  # fmt: skip


def sequence_bias(path: Path) -> Path:
    """x [batch, seq, 8] FP32 and bias [batch, 8] FP32 -> y = x + bias[:, None, :]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    bias = helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [
        helper.make_node("Unsqueeze", ["bias", "axes"], ["bias3"]),
        helper.make_node("Add", ["x", "bias3"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "sequence_bias", [x, bias], [y], initializer=[axes])
    return _save(helper.make_model(graph, opset_imports=OPSET), path)


def fixed_scale(path: Path) -> Path:
    """x [2, 3] FP32 (no batch dimension) -> y = 2x; int counter [1] INT32 passes through."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    counter = helper.make_tensor_value_info("counter", TensorProto.INT32, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    count_out = helper.make_tensor_value_info("count_out", TensorProto.INT32, [1])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["y"]),
        helper.make_node("Identity", ["counter"], ["count_out"]),
    ]
    graph = helper.make_graph(nodes, "fixed_scale", [x, counter], [y, count_out], initializer=[two])
    return _save(helper.make_model(graph, opset_imports=OPSET), path)


def reshape_by_input(path: Path) -> Path:
    """data [n] FP32 and new_shape [2] INT64 (a shape tensor) -> Reshape(data, new_shape)."""
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, ["n"])
    new_shape = helper.make_tensor_value_info("new_shape", TensorProto.INT64, [2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["r", "c"])
    nodes = [helper.make_node("Reshape", ["data", "new_shape"], ["out"])]
    graph = helper.make_graph(nodes, "reshape_by_input", [data, new_shape], [out])
    return _save(helper.make_model(graph, opset_imports=OPSET), path)


def strings(path: Path) -> Path:
    """text [batch, 1] STRING -> same (Identity)."""
    text = helper.make_tensor_value_info("text", TensorProto.STRING, ["batch", 1])
    out = helper.make_tensor_value_info("text_out", TensorProto.STRING, ["batch", 1])
    graph = helper.make_graph([helper.make_node("Identity", ["text"], ["text_out"])], "strings",
                              [text], [out])  # fmt: skip
    return _save(helper.make_model(graph, opset_imports=OPSET), path)


def write_model(repo: Path, name: str, config: str | None, builder: object) -> Path:
    """``repo/name/1/model.onnx`` from ``builder(path)`` plus an optional config.pbtxt."""
    directory = repo / name
    builder(directory / "1" / "model.onnx")  # type: ignore[operator]
    if config is not None:
        (directory / "config.pbtxt").write_text(config)
    return directory


def copy_sample(repo: Path, *names: str) -> None:
    for name in names:
        shutil.copytree(default_sample_repository() / name, repo / name)


SEQUENCE_BIAS_CONFIG = """
name: "seq"
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { preferred_batch_size: [ 2, 4 ] }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
