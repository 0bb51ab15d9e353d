"""An ONNX model without config.pbtxt is served with the config Triton's onnxruntime backend
would complete from the model file (autofill on, the default)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from repokit.paths import default_sample_repository
from tests.frontends.http.server_thread import running_server


def _repo(tmp_path: Path) -> Path:
    version = tmp_path / "repo" / "onnx_auto" / "1"
    version.mkdir(parents=True)
    shutil.copy(default_sample_repository() / "add_sub_onnx" / "1" / "model.onnx", version)
    return tmp_path / "repo"


def test_config_is_completed_from_the_onnx_file(tmp_path: Path) -> None:
    with running_server(_repo(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        metadata = client.get_model_metadata("onnx_auto")
        assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]
        assert metadata["inputs"][0]["shape"] == [-1, 16]  # dynamic first dim = batch dim
        config = client.get_model_config("onnx_auto")
        assert config["max_batch_size"] == 4  # Triton's default-max-batch-size
        assert config["dynamic_batching"]["preferred_batch_size"] == [4]
        a = np.arange(32, dtype=np.float32).reshape(2, 16)
        inputs = [httpclient.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result = client.infer("onnx_auto", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def test_strict_mode_needs_a_config(tmp_path: Path) -> None:
    with running_server(_repo(tmp_path), strict_model_config=True) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {e["name"]: e for e in client.get_model_repository_index()}
        assert index["onnx_auto"]["state"] == "UNAVAILABLE"
        assert "config.pbtxt" in index["onnx_auto"]["reason"]
