"""Python-backend parity through tritonclient over HTTP and gRPC on a real server (port 0):
BLS (to python and onnx models, async fan-out, decoupled), decoupled streaming with zero, one
and many responses, auto-complete, request/response parameters, custom metrics, logging,
cancellation and errors in every phase (models in ``python_parity_models``)."""

from __future__ import annotations

import json
import logging
import queue
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.python_parity_models import build_parity_repository
from tests.frontends.http.server_thread import ServerThread, running_server

PROTOCOLS = ("http", "grpc")
INTERNAL = {"http": "500", "grpc": "StatusCode.INTERNAL"}
INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_parity_repository(tmp_path_factory.mktemp("parity") / "models")
    with running_server(
        repo, allow_grpc=True, model_control_mode="explicit", load_models=["*"]
    ) as srv:
        yield srv


def _client(server: ServerThread, protocol: str) -> Any:
    return server.client(protocol)


def _infer(
    server: ServerThread,
    protocol: str,
    model: str,
    arrays: dict[str, np.ndarray],
    parameters: dict[str, Any] | None = None,
) -> Any:
    module: Any = httpclient if protocol == "http" else grpcclient
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else str(array.dtype).upper()
        datatype = {"FLOAT32": "FP32", "FLOAT64": "FP64"}.get(datatype, datatype)
        item = module.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        inputs.append(item)
    return _client(server, protocol).infer(model, inputs, parameters=parameters)


X16 = np.arange(16, dtype=np.float32).reshape(1, 16)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("target", ["add_sub", "add_sub_onnx"])
def test_bls_calls_python_and_onnx_models(server: ServerThread, protocol: str, target: str) -> None:
    before = _success_count(server, target)
    result = _infer(server, protocol, "bls", {"INPUT0": X16}, {"target": target})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X16 * 2)
    assert _success_count(server, target) == before + 1  # the target's own statistics


def _success_count(server: ServerThread, model: str) -> int:
    assert server.handle is not None
    stats = server.handle.service.model_statistics(model)
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bls_errors_reach_the_model_as_response_errors(server: ServerThread, protocol: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        _infer(server, protocol, "bls", {"INPUT0": X16}, {"target": "missing"})
    assert info.value.status() == INTERNAL[protocol]
    assert info.value.message() == (
        "Model missing - Error when running inference: Failed for execute the inference "
        "request. Model 'missing' is not ready."
    )
    with pytest.raises(InferenceServerException) as info:
        _infer(server, protocol, "bls", {"INPUT0": X16}, {"target": "repeat"})
    assert "is using the decoupled" in info.value.message()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bls_async_fan_out(server: ServerThread, protocol: str) -> None:
    result = _infer(server, protocol, "bls_async", {"INPUT0": X16})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X16 * (2 + 3 + 4 + 5))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("count", [0, 1, 5])
def test_bls_iterates_a_decoupled_model(server: ServerThread, protocol: str, count: int) -> None:
    result = _infer(server, protocol, "bls_stream", {"COUNT": np.array([count], dtype=np.int32)})
    assert result.as_numpy("VALUES").tolist() == [*range(count), -1]


def _stream(
    server: ServerThread, model: str, count: int, **kwargs: Any
) -> list[tuple[list[int] | None, bool, str | None]]:
    """(OUT values, triton_final_response, error) of every streamed response."""
    client = _client(server, "grpc")
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    item = grpcclient.InferInput("COUNT", [1], "INT32")
    item.set_data_from_numpy(np.array([count], dtype=np.int32))
    try:
        client.async_stream_infer(model, [item], request_id="r1", **kwargs)
        got: list[tuple[list[int] | None, bool, str | None]] = []
        while True:
            result, error = results.get(timeout=30)
            if error is not None:
                got.append((None, True, error.message()))
                break
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            out = result.as_numpy("OUT")
            got.append((None if out is None else out.tolist(), final, None))
            if final or (count and len(got) == count and not kwargs):
                break
    finally:
        client.stop_stream()
    return got


@pytest.mark.parametrize("count", [1, 3])
def test_decoupled_stream_many_responses(server: ServerThread, count: int) -> None:
    got = _stream(server, "repeat", count)
    assert got == [([i], False, None) for i in range(count)]


@pytest.mark.parametrize("count", [0, 2])
def test_decoupled_empty_final_response_when_asked(server: ServerThread, count: int) -> None:
    got = _stream(server, "repeat", count, enable_empty_final_response=True)
    assert got == [*[([i], False, None) for i in range(count)], (None, True, None)]


def test_decoupled_final_flag_on_the_last_response(server: ServerThread) -> None:
    got = _stream(
        server,
        "repeat",
        2,
        enable_empty_final_response=True,
        parameters={"final_with_last": True},
    )
    assert got == [([0], False, None), ([1], True, None)]


def test_decoupled_error_response(server: ServerThread) -> None:
    got = _stream(server, "repeat", 1, parameters={"fail": True})
    assert got == [(None, True, "asked to fail")]


def test_decoupled_refused_on_unary_endpoints(server: ServerThread) -> None:
    count = {"COUNT": np.array([1], dtype=np.int32)}
    with pytest.raises(InferenceServerException) as info:
        _infer(server, "http", "repeat", count)
    assert info.value.status() == "501"
    with pytest.raises(InferenceServerException) as info:
        _infer(server, "grpc", "repeat", count)
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


def test_stream_closed_cancels_the_request(server: ServerThread) -> None:
    client = _client(server, "grpc")
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    item = grpcclient.InferInput("COUNT", [1], "INT32")
    item.set_data_from_numpy(np.array([1], dtype=np.int32))
    client.async_stream_infer("wait_cancel", [item])
    result, error = results.get(timeout=30)
    assert error is None and result.as_numpy("OUT").tolist() == [0]
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 20
    while 'parity_cancel_seen{model="wait_cancel"} 1' not in _metrics(server):
        assert time.monotonic() < deadline, "the model never saw is_cancelled()"
        time.sleep(0.05)


def _metrics(server: ServerThread) -> str:
    assert server.handle is not None
    text: str = requests.get(
        f"http://127.0.0.1:{server.handle.metrics_port}/metrics", timeout=10
    ).text
    return text


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auto_complete_config_becomes_the_models_config(
    server: ServerThread, protocol: str
) -> None:
    if protocol == "grpc":
        config = _client(server, protocol).get_model_config("auto", as_json=True)["config"]
    else:
        config = _client(server, protocol).get_model_config("auto")
    assert [i["name"] for i in config["input"]] == ["X"]
    assert config["max_batch_size"] == 4
    result = _infer(server, protocol, "auto", {"X": np.array([[1, 2]], dtype=np.int64)})
    assert result.as_numpy("Y").tolist() == [[10, 20]]
    with pytest.raises(InferenceServerException) as info:  # checks use the completed config
        _infer(server, protocol, "auto", {"X": np.array([[1, 2, 3]], dtype=np.int64)})
    assert info.value.status() == INVALID[protocol]


def test_load_failures_are_reported_on_the_model_only(server: ServerThread) -> None:
    index = {e["name"]: e for e in _client(server, "http").get_model_repository_index()}
    assert index["init_fail"]["state"] == "UNAVAILABLE"
    assert index["init_fail"]["reason"].startswith(
        "Internal: RuntimeError: initialize failed on purpose"
    )
    assert index["auto_conflict"]["reason"].startswith(
        "Internal: ValueError: unable to load model 'auto_conflict', configuration expects "
        "datatype TYPE_FP32 for input 'INPUT0', model provides TYPE_INT32"
    )
    assert index["features"]["state"] == "READY"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_and_response_parameters(server: ServerThread, protocol: str) -> None:
    x = np.ones(4, dtype=np.float32)
    result = _infer(server, protocol, "features", {"INPUT0": x}, {"tag": "hello", "k": 3})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    info = json.loads(result.as_numpy("INFO")[0])
    assert info["params"] == {"tag": "hello", "k": 3}
    assert info["names"] == ["INFO", "OUTPUT0"]
    assert info["corr"] == 0 and info["flags"] == 0 and info["cancelled"] is False
    assert info["keys"] == sorted(
        [
            "model_config",
            "model_instance_kind",
            "model_instance_name",
            "model_instance_device_id",
            "model_repository",
            "model_version",
            "model_name",
        ]
    )
    response = result.get_response()
    if protocol == "http":
        assert response["parameters"] == {"echo": "hello", "n": 7, "ok": True}
    else:
        params = response.parameters
        assert params["echo"].string_param == "hello"
        assert params["n"].int64_param == 7 and params["ok"].bool_param is True


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("mode", "kind", "text"),
    [
        ("raise", "internal", "RuntimeError: execute failed on purpose"),
        ("wrong_count", "internal", "Number of InferenceResponse objects do not match"),
        ("not_a_list", "internal", "Expected a list in the execute return"),
        ("error", "invalid", "bad input on purpose"),
    ],
)
def test_execute_errors(
    server: ServerThread, protocol: str, mode: str, kind: str, text: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        _infer(server, protocol, "features", {"INPUT0": np.ones(4, np.float32)}, {"mode": mode})
    status = (INTERNAL if kind == "internal" else INVALID)[protocol]
    assert info.value.status() == status
    assert text in info.value.message()
    if kind == "internal":
        assert info.value.message().startswith(
            "Failed to process the request(s) for model 'features_0', message: "
        )
    # the instance survives its model's errors
    ok = _infer(server, protocol, "features", {"INPUT0": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(ok.as_numpy("OUTPUT0"), np.ones(4, np.float32))


def test_custom_metrics_on_the_metrics_endpoint(server: ServerThread) -> None:
    x = np.full(4, 2.0, dtype=np.float32)
    result = _infer(server, "http", "features", {"INPUT0": x}, {"mode": "count"})
    seen = int(result.as_numpy("OUTPUT0")[0]) - 1  # Metric.value() inside the model
    text = _metrics(server)
    assert "# TYPE parity_requests counter" in text
    assert f'parity_requests{{kind="all",model="features"}} {seen}' in text
    assert 'parity_last_sum{model="features"} 8' in text
    assert "# TYPE parity_sizes histogram" in text
    assert 'parity_sizes_bucket{model="features",le="+Inf"}' in text


def test_model_logs_reach_the_server_log(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="repokit.model"):
        _infer(server, "http", "features", {"INPUT0": np.ones(4, np.float32)}, {"tag": "L1"})
        deadline = time.monotonic() + 10
        while "parity info L1" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
    records = [r for r in caplog.records if r.name == "repokit.model"]
    levels = {r.getMessage(): r.levelno for r in records}
    assert levels["parity info L1"] == logging.INFO
    assert levels["parity warning"] == logging.WARNING
    assert levels["parity error"] == logging.ERROR
    assert "parity verbose" not in levels  # log_verbose_level is 0
    assert records[0].triton_file == "model.py"  # the model's file and line, as Triton
    assert records[0].triton_line > 0


def test_finalize_errors_are_logged_and_unload_succeeds(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(server, "http")
    with caplog.at_level(logging.ERROR, logger="repokit.model"):
        client.unload_model("finalize_fail")
        deadline = time.monotonic() + 10
        while "finalize failed on purpose" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "Failed to finalize model instance 'finalize_fail_0'" in caplog.text
    assert not client.is_model_ready("finalize_fail")
    client.load_model("finalize_fail")
    assert client.is_model_ready("finalize_fail")
