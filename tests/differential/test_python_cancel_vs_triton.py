"""Cancellation and response statistics of python models against real Triton 2.51: the same
models (``python_cancel_models``) served by both, the same requests sent to both.

- gRPC cancellation of a running request: both servers show it to the model
  (``request.is_cancelled()``); a BLS request made for it is cancelled by repokit only (Triton
  2.51 lets it run: our deliberate difference, asserted so that a change on either side shows);
- HTTP client disconnect: Triton 2.51 runs the request to completion, repokit cancels it;
- ``response_stats`` after the same plain and decoupled requests: empty on both.
"""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tests.differential.triton_reference import running_triton
from tests.e2e.python_cancel_models import build_cancel_repository
from tests.e2e.test_python_cancellation import EVENTS, _wait_until
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cancel_repository(tmp_path_factory.mktemp("cancel_diff") / "models")


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    models = ("slow", "bls_slow", "stream")
    with running_triton(repository, tmp_path_factory.mktemp("triton_cancel"), ready=models) as srv:
        yield srv.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True) as srv:
        yield srv.endpoints


def _counts(endpoint: Endpoints) -> dict[str, float]:
    counts = dict.fromkeys(EVENTS, 0.0)
    for line in requests.get(f"{endpoint.metrics}/metrics", timeout=10).text.splitlines():
        for event in EVENTS:
            if line.startswith(f'slow_requests{{event="{event}"}} '):
                counts[event] = float(line.split()[-1])
    return counts


def _settled(endpoint: Endpoints, before: dict[str, float]) -> dict[str, float]:
    def finished() -> bool:
        now = _counts(endpoint)
        done = now["cancelled"] + now["completed"] - before["cancelled"] - before["completed"]
        return done >= now["executed"] - before["executed"]

    _wait_until(finished, "the slow model to finish its requests", timeout=30)
    now = _counts(endpoint)
    return {event: now[event] - before[event] for event in EVENTS}


def _slow_input(wait_ms: int) -> grpcclient.InferInput:
    item = grpcclient.InferInput("IN", [1], "INT32")
    item.set_data_from_numpy(np.array([wait_ms], dtype=np.int32))
    return item


def _grpc_cancelled(endpoint: Endpoints, model: str, wait_ms: int) -> dict[str, float]:
    before = _counts(endpoint)
    client = grpcclient.InferenceServerClient(endpoint.grpc)
    call = client.async_infer(model, [_slow_input(wait_ms)], callback=lambda r, e: None)
    _wait_until(lambda: _counts(endpoint)["executed"] > before["executed"], "execution")
    call.cancel()
    settled = _settled(endpoint, before)
    client.close()
    return settled


def test_grpc_cancel_reaches_the_model_on_both(triton: Endpoints, repokit: Endpoints) -> None:
    expected = {"executed": 1, "cancelled": 1, "completed": 0}
    assert _grpc_cancelled(triton, "slow", 20_000) == expected
    assert _grpc_cancelled(repokit, "slow", 20_000) == expected


def test_grpc_cancel_of_a_bls_caller(triton: Endpoints, repokit: Endpoints) -> None:
    # Triton 2.51 leaves the BLS request running (3 s here); repokit cancels it with its parent
    assert _grpc_cancelled(triton, "bls_slow", 3_000) == {
        "executed": 1,
        "cancelled": 0,
        "completed": 1,
    }
    assert _grpc_cancelled(repokit, "bls_slow", 20_000) == {
        "executed": 1,
        "cancelled": 1,
        "completed": 0,
    }


def _stats_after_requests(endpoint: Endpoints) -> dict[str, Any]:
    requests.post(
        f"{endpoint.http}/v2/models/slow/infer",
        json={"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]}]},
        timeout=30,
    ).raise_for_status()
    client = grpcclient.InferenceServerClient(endpoint.grpc)
    responses: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put(error))
    client.async_stream_infer("stream", [_slow_input(2)], enable_empty_final_response=True)
    client.async_stream_infer("stream", [_slow_input(0)], parameters={"fail": True})
    errors = [responses.get(timeout=30) for _ in range(4)]
    client.stop_stream()
    assert [e is None for e in errors].count(False) == 1
    found = {}
    for model in ("slow", "stream"):
        doc = requests.get(f"{endpoint.http}/v2/models/{model}/stats", timeout=10).json()
        grpc_stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
        found[model] = (doc["model_stats"][0]["response_stats"], grpc_stats.get("response_stats"))
    client.close()
    return found


def test_response_stats_match(triton: Endpoints, repokit: Endpoints) -> None:
    theirs = _stats_after_requests(triton)
    assert _stats_after_requests(repokit) == theirs
    assert theirs == {"slow": ({}, None), "stream": ({}, None)}


def _http_disconnected(endpoint: Endpoints, wait_ms: int) -> dict[str, float]:
    before = _counts(endpoint)
    host, port = endpoint.http.removeprefix("http://").rsplit(":", 1)
    body = b'{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[%d]}]}' % wait_ms
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
            % len(body)
            + body
        )
        _wait_until(lambda: _counts(endpoint)["executed"] > before["executed"], "execution")
    return _settled(endpoint, before)


def test_http_disconnect(triton: Endpoints, repokit: Endpoints) -> None:
    # Triton 2.51 runs the request to completion (1.5 s here); repokit cancels it
    assert _http_disconnected(triton, 1_500) == {"executed": 1, "cancelled": 0, "completed": 1}
    assert _http_disconnected(repokit, 20_000) == {"executed": 1, "cancelled": 1, "completed": 0}
