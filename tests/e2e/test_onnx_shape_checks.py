"""An ONNX model whose config dims contradict the model's shapes is refused at load time, as
Triton 2.51's onnxruntime backend refuses it (``ValidateInputs``/``ValidateOutputs``): a model
dimension of -1 matches any config dimension of an input, outputs must match exactly, a
batching config needs a dynamic first model dimension, a scalar tensor takes only 1s, a ragged
input needs the model shape [-1]. qa/L0_scalar_io checks that a scalar model with dims [2]
stops the server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tests.frontends.http.server_thread import running_server


def _identity(shape: list[object] | None, out_shape: list[object] | None = None) -> bytes:
    """INPUT -> OUTPUT (Identity); a shape of None leaves the tensor's shape unrecorded (a
    scalar to onnxruntime)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        "g",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, out_shape or shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def _config(name: str, max_batch: int, in_dims: str, out_dims: str, extra: str = "") -> str:
    return (
        f'name: "{name}" platform: "onnxruntime_onnx" max_batch_size: {max_batch}\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {in_dims} ] {extra} }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {out_dims} ] }} ]\n'
    )


# name -> (model, config, the reason Triton gives, or "" when it loads)
CASES: dict[str, tuple[bytes, str, str]] = {
    "scalar_ok": (_identity(None), _config("scalar_ok", 0, "1", "1"), ""),
    "scalar_dims_2": (
        _identity(None),
        _config("scalar_dims_2", 0, "2", "1"),
        "unable to load model 'scalar_dims_2', scalar tensor 'INPUT', should only provide 1 in"
        " the model configuration when the model doesn't support batching. Model configuration"
        " provided: [2].",
    ),
    "dynamic_input_ok": (
        _identity(["batch", "n"], ["batch", 4]),
        _config("dynamic_input_ok", 8, "4", "4"),
        "",
    ),
    "fixed_batch": (
        _identity([2, 4]),
        _config("fixed_batch", 8, "4", "4"),
        "model 'fixed_batch', tensor 'INPUT': for the model to support batching the shape"
        " should have at least 1 dimension and the first dimension must be -1; but shape"
        " expected by the model is [2,4]",
    ),
    "wrong_input_dims": (
        _identity(["batch", 4]),
        _config("wrong_input_dims", 8, "5", "4"),
        "model 'wrong_input_dims', tensor 'INPUT': the model expects 2 dimensions (shape"
        " [-1,4]) but the model configuration specifies 2 dimensions (an initial batch"
        " dimension because max_batch_size > 0 followed by the explicit tensor shape, making"
        " complete shape [-1,5])",
    ),
    "output_not_exact": (
        _identity(["batch", "n"]),
        _config("output_not_exact", 8, "4", "4"),
        "model 'output_not_exact', tensor 'OUTPUT': the model expects 2 dimensions (shape"
        " [-1,-1]) but the model configuration specifies 2 dimensions (an initial batch"
        " dimension because max_batch_size > 0 followed by the explicit tensor shape, making"
        " complete shape [-1,4])",
    ),
    "rank_differs": (
        _identity([3, 4]),
        _config("rank_differs", 0, "12", "3, 4"),
        "model 'rank_differs', tensor 'INPUT': the model expects 2 dimensions (shape [3,4])"
        " but the model configuration specifies 1 dimensions (shape [12])",
    ),
    "ragged_not_flat": (
        _identity(["batch", 4]),
        _config("ragged_not_flat", 8, "4", "4", "allow_ragged_batch: true"),
        "unable to load model 'ragged_not_flat', configuration expects model provides input"
        " with shape [-1]  for ragged input 'INPUT', model provides [-1,4]",
    ),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("onnx_shapes")
    for name, (model, config, _reason) in CASES.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(model)
        (root / name / "config.pbtxt").write_text(config)
    return root


def test_models_whose_dims_contradict_the_model_are_refused(repo: Path) -> None:
    with running_server(repo, allow_grpc=True) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {e["name"]: e for e in client.get_model_repository_index()}
        for name, (_model, _config, reason) in CASES.items():
            if reason:
                assert index[name]["state"] == "UNAVAILABLE", name
                assert reason in index[name]["reason"], (name, index[name]["reason"])
            else:
                assert index[name]["state"] == "READY", (name, index[name])
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("INPUT", [1], "FP32")
        tensor.set_data_from_numpy(np.array([2.5], np.float32))
        result = grpc.infer("scalar_ok", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), [2.5])
        tensor = httpclient.InferInput("INPUT", [2, 4], "FP32")
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        tensor.set_data_from_numpy(data)
        result = client.infer("dynamic_input_ok", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), data)
