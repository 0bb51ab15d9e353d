"""Build the small ONNX models of the sample repository with onnx.helper.

Run: python sample_repos/make_onnx.py   (writes sample_repos/models/add_sub_onnx/1/model.onnx)
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def add_sub_model() -> onnx.ModelProto:
    shape = ["batch", 16]
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
    graph = helper.make_graph(nodes, "add_sub", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    target = Path(__file__).resolve().parent / "models" / "add_sub_onnx" / "1" / "model.onnx"
    onnx.save(add_sub_model(), target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
