"""Build a repository, validate the output clean, serve it (warmup runs at load), infer with
tritonclient.http and compare with ONNX Runtime run directly on the source models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.build.builder import build_repository
from repokit.build.engine import TensorRTStatus
from repokit.build.profiles import parse_shape_option
from repokit.build.report import BuildOptions
from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from tests.build import models
from tests.frontends.http.server_thread import ServerThread, running_server

SUM_ENSEMBLE = """
name: "sum_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [ {
  model_name: "add_sub_onnx" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" }
} ] }
"""
NO_TRT = TensorRTStatus(False, "", "the Python module 'tensorrt' is not installed")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("e2e")
    source = root / "src"
    source.mkdir()
    models.copy_sample(source, "add_sub_onnx")
    (source / "sum_ensemble" / "1").mkdir(parents=True)
    (source / "sum_ensemble" / "config.pbtxt").write_text(SUM_ENSEMBLE)
    models.write_model(source, "seq", models.SEQUENCE_BIAS_CONFIG, models.sequence_bias)
    models.write_model(source, "strings", None, models.strings)
    models.write_model(source, "fixed", None, models.fixed_scale)
    options = BuildOptions(
        profile=True,
        to="tensorrt",  # no TensorRT here: the ONNX models stay runnable with ONNX Runtime
        profiles=2,
        shapes=(parse_shape_option("x:1,16,32"),),
        warmup_data="random",
    )
    report = build_repository(source, root / "out", options, tensorrt=NO_TRT)
    assert report.exit_code == 0, [(m.name, m.reason) for m in report.models]
    return source, root / "out"


@pytest.fixture(scope="module")
def server(compiled: tuple[Path, Path]) -> Iterator[ServerThread]:
    with running_server(compiled[1], model_control_mode="explicit", load_models=["*"]) as srv:
        yield srv


def test_output_validates_clean(compiled: tuple[Path, Path]) -> None:
    checked = validate_repository(compiled[1], ValidateOptions())
    assert checked.error_count == 0, [d.message for d in checked.all_diagnostics()]


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)  # type: ignore[no-any-return]


def test_served_models_match_onnxruntime(server: ServerThread, compiled: tuple[Path, Path]) -> None:
    source = compiled[0]
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for name in ("add_sub_onnx", "seq", "strings", "fixed", "sum_ensemble"):
            assert client.is_model_ready(name), name
        rng = np.random.default_rng(1)
        x = rng.standard_normal((3, 20, 8)).astype(np.float32)
        bias = rng.standard_normal((3, 8)).astype(np.float32)
        inputs = [httpclient.InferInput("x", list(x.shape), "FP32"),
                  httpclient.InferInput("bias", list(bias.shape), "FP32")]  # fmt: skip
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(bias)
        served = client.infer("seq", inputs).as_numpy("y")
        [expected] = _ort(source / "seq" / "1" / "model.onnx", {"x": x, "bias": bias})
        np.testing.assert_allclose(served, expected, rtol=1e-6)

        a = rng.standard_normal((2, 16)).astype(np.float32)
        b = rng.standard_normal((2, 16)).astype(np.float32)
        pair = [httpclient.InferInput("INPUT0", [2, 16], "FP32"),
                httpclient.InferInput("INPUT1", [2, 16], "FP32")]  # fmt: skip
        pair[0].set_data_from_numpy(a)
        pair[1].set_data_from_numpy(b)
        result = client.infer("add_sub_onnx", pair)
        sums, diffs = _ort(source / "add_sub_onnx" / "1" / "model.onnx", {"INPUT0": a, "INPUT1": b})
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), sums, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), diffs, rtol=1e-6)

        ensemble = [httpclient.InferInput("A", [2, 16], "FP32"),
                    httpclient.InferInput("B", [2, 16], "FP32")]  # fmt: skip
        ensemble[0].set_data_from_numpy(a)
        ensemble[1].set_data_from_numpy(b)
        np.testing.assert_allclose(client.infer("sum_ensemble", ensemble).as_numpy("SUM"), sums)
        assert not (compiled[1] / "sum_ensemble" / "warmup").exists()

        text = np.array([[b"hello"], [b"world"]], dtype=object)
        string_input = httpclient.InferInput("text", [2, 1], "BYTES")
        string_input.set_data_from_numpy(text)
        echoed = client.infer("strings", [string_input]).as_numpy("text_out")
        assert echoed.tolist() == text.tolist()
    finally:
        client.close()


def test_warmup_runs_at_load(server: ServerThread, compiled: tuple[Path, Path]) -> None:
    """Break one warmup file of the compiled repository: reloading then fails with Triton's
    warmup message, so the samples the build wrote are what the server runs at load."""
    out = compiled[1]
    warmup = sorted((out / "seq" / "warmup").iterdir())[0]
    saved = warmup.read_bytes()
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        warmup.write_bytes(saved[:4])
        with pytest.raises(InferenceServerException, match="warmup setting expects"):
            client.load_model("seq")
        warmup.write_bytes(saved)
        client.load_model("seq")
        assert client.is_model_ready("seq")
    finally:
        warmup.write_bytes(saved)
        client.close()
