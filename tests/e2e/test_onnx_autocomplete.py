"""An ONNX model without config.pbtxt is served with the config Triton's onnxruntime backend
would complete from the model file (autofill on, the default)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repokit.core.settings import LogSettings
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


@pytest.mark.parametrize(
    ("backend_config", "size"),
    [
        ({"": {"default-max-batch-size": "6"}}, 6),
        ({"onnxruntime": {"default-max-batch-size": "5"}}, 5),
        # the backend's own setting wins over the global one (qa/L0_backend_config)
        ({"": {"default-max-batch-size": "7"}, "onnxruntime": {"default-max-batch-size": "8"}}, 8),
    ],
)
def test_default_max_batch_size_comes_from_the_backend_config(
    tmp_path: Path,
    backend_config: dict[str, dict[str, str]],
    size: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """--backend-config [onnxruntime,]default-max-batch-size=N is the max_batch_size autofill
    gives a model that can batch, with a dynamic batcher, as Triton's onnxruntime backend."""
    caplog.set_level(logging.DEBUG, logger="repokit")
    verbose = LogSettings(log_verbose_level=1)
    with running_server(_repo(tmp_path), backend_config=backend_config, log=verbose) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        config = client.get_model_config("onnx_auto")
        assert config["max_batch_size"] == size
        assert config["dynamic_batching"]["preferred_batch_size"] == [size]
    # Triton's verbose line, which qa/L0_backend_config greps
    assert "Starting dynamic-batcher thread for onnx_auto at default nice..." in caplog.messages


def test_default_max_batch_size_zero_turns_batching_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="repokit")
    backend_config = {"onnxruntime": {"default-max-batch-size": "0"}}
    verbose = LogSettings(log_verbose_level=1)
    with running_server(_repo(tmp_path), backend_config=backend_config, log=verbose) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        config = client.get_model_config("onnx_auto")
        assert config["max_batch_size"] == 0
        assert "dynamic_batching" not in config
        assert client.get_model_metadata("onnx_auto")["inputs"][0]["shape"] == [-1, 16]
    assert not [m for m in caplog.messages if "dynamic-batcher" in m]


def test_default_max_batch_size_must_be_a_number(tmp_path: Path) -> None:
    backend_config = {"onnxruntime": {"default-max-batch-size": "lots"}}
    with running_server(_repo(tmp_path), backend_config=backend_config) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {e["name"]: e for e in client.get_model_repository_index()}
        assert index["onnx_auto"]["state"] == "UNAVAILABLE"
        assert (
            "default-max-batch-size must be an integer, got 'lots'" in index["onnx_auto"]["reason"]
        )
