"""Cancellation of python-model requests on a real server (port 0), and the statistics
extension's ``response_stats`` for python models (models in ``python_cancel_models``).

- an HTTP client that closes its connection mid-request cancels it: the running model sees
  ``request.is_cancelled()``, a queued request is never executed, and BLS requests made for it
  are cancelled too (Triton 2.51 lets all of these run to completion over HTTP: a deliberate
  difference, checked in tests/differential/test_python_cancel_vs_triton.py);
- a gRPC client cancelling its call does the same (as Triton for the model itself);
- ``response_stats`` stays empty for python models, plain or decoupled, over HTTP and gRPC (the
  python backend reports no per-response statistics in Triton 2.51).
"""

from __future__ import annotations

import json
import queue
import re
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.e2e.python_cancel_models import build_cancel_repository
from tests.frontends.http.server_thread import ServerThread, running_server
from tests.settle import settled

EVENTS = ("executed", "cancelled", "completed")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_cancel_repository(tmp_path_factory.mktemp("cancel") / "models")
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _metrics(server: ServerThread) -> str:
    assert server.handle is not None
    return requests.get(f"http://127.0.0.1:{server.handle.metrics_port}/metrics", timeout=10).text


def _slow_counts(server: ServerThread) -> dict[str, float]:
    text = _metrics(server)
    counts = {}
    for event in EVENTS:
        found = re.search(rf'slow_requests\{{event="{event}"\}} (\S+)', text)
        counts[event] = float(found.group(1)) if found else 0.0
    return counts


def _pending(server: ServerThread, model: str) -> float:
    pattern = rf'nv_inference_pending_request_count\{{model="{model}",version="1"\}} (\S+)'
    found = re.search(pattern, _metrics(server))
    return float(found.group(1)) if found else 0.0


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _raw_infer(server: ServerThread, model: str, wait_ms: int) -> socket.socket:
    """Send an HTTP infer request on a raw socket and leave the response unread."""
    assert server.handle is not None
    body = json.dumps(
        {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [wait_ms]}]}
    ).encode()
    sock = socket.create_connection(("127.0.0.1", server.handle.http_port))
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def _slow_input(module: Any, wait_ms: int) -> Any:
    item = module.InferInput("IN", [1], "INT32")
    item.set_data_from_numpy(np.array([wait_ms], dtype=np.int32))
    return item


def _grpc(server: ServerThread) -> grpcclient.InferenceServerClient:
    assert server.handle is not None
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.handle.grpc_port}")


def _http(server: ServerThread) -> httpclient.InferenceServerClient:
    assert server.handle is not None
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.handle.http_port}")


def _settled(server: ServerThread, before: dict[str, float]) -> dict[str, float]:
    """Counts once every executed request has finished, relative to ``before``."""

    def finished() -> bool:
        now = _slow_counts(server)
        return (
            now["cancelled"] + now["completed"] - before["cancelled"] - before["completed"]
            >= now["executed"] - before["executed"]
        )

    _wait_until(finished, "the slow model to finish its requests")
    now = _slow_counts(server)
    return {event: now[event] - before[event] for event in EVENTS}


@pytest.mark.parametrize("model", ["slow", "bls_slow"])
def test_http_disconnect_cancels_the_running_request(server: ServerThread, model: str) -> None:
    before = _slow_counts(server)
    sock = _raw_infer(server, model, 20_000)
    _wait_until(lambda: _slow_counts(server)["executed"] > before["executed"], "execution")
    sock.close()
    # the model (called directly, or through BLS) sees is_cancelled() and stops waiting
    assert _settled(server, before) == {"executed": 1, "cancelled": 1, "completed": 0}


def test_http_disconnect_drops_a_queued_request(server: ServerThread) -> None:
    before = _slow_counts(server)
    running = _raw_infer(server, "slow", 20_000)
    _wait_until(lambda: _slow_counts(server)["executed"] > before["executed"], "execution")
    queued = _raw_infer(server, "slow", 1)
    _wait_until(lambda: _pending(server, "slow") >= 1, "the second request to queue")
    queued.close()
    _wait_until(lambda: _pending(server, "slow") == 0, "the queued request to go")
    running.close()
    after = _http(server).infer("slow", [_slow_input(httpclient, 1)])
    assert after.as_numpy("OUT").tolist() == [1]
    # the running one was cancelled, the queued one never ran, the last one completed
    assert _settled(server, before) == {"executed": 2, "cancelled": 1, "completed": 1}


@pytest.mark.parametrize("model", ["slow", "bls_slow"])
def test_grpc_cancel_cancels_the_request_and_its_bls_requests(
    server: ServerThread, model: str
) -> None:
    before = _slow_counts(server)
    results: queue.Queue[Any] = queue.Queue()
    client = _grpc(server)
    call = client.async_infer(
        model, [_slow_input(grpcclient, 20_000)], callback=lambda r, e: results.put((r, e))
    )
    _wait_until(lambda: _slow_counts(server)["executed"] > before["executed"], "execution")
    call.cancel()
    assert _settled(server, before) == {"executed": 1, "cancelled": 1, "completed": 0}
    client.close()


def test_a_finished_request_is_not_cancelled_by_its_disconnect(server: ServerThread) -> None:
    before = _slow_counts(server)
    sock = _raw_infer(server, "bls_slow", 1)
    reply = b""
    while b'"data":[1]' not in reply:
        chunk = sock.recv(4096)
        assert chunk, reply
        reply += chunk
    sock.close()
    assert reply.startswith(b"HTTP/1.1 200")
    assert _settled(server, before) == {"executed": 1, "cancelled": 0, "completed": 1}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_response_stats_stay_empty_for_python_models(server: ServerThread, protocol: str) -> None:
    http, grpc = _http(server), _grpc(server)
    http.infer("slow", [_slow_input(httpclient, 1)])
    responses: queue.Queue[Any] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: responses.put((result, error)))
    grpc.async_stream_infer("stream", [_slow_input(grpcclient, 3)])
    for _ in range(3):
        _, error = responses.get(timeout=30)
        assert error is None
    grpc.stop_stream()
    # the decoupled request counts once its execute has returned, after its last response
    for model in ("slow", "stream"):
        if protocol == "http":
            stats = settled(
                lambda m=model: http.get_inference_statistics(m)["model_stats"][0],
                lambda doc: doc["inference_stats"]["success"]["count"] >= 1,
            )
            assert stats["response_stats"] == {}
            assert stats["inference_stats"]["success"]["count"] >= 1
        else:
            message = settled(
                lambda m=model: grpc.get_inference_statistics(m).model_stats[0],
                lambda message: message.inference_stats.success.count >= 1,
            )
            assert len(message.response_stats) == 0
            assert message.inference_stats.success.count >= 1
    grpc.close()
