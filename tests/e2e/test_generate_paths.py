"""The generate extension through the rest of the core, on real servers (port 0): a client
that closes its connection cancels the request (``/generate`` and ``/generate_stream``, as for
``/infer``: the model sees ``request.is_cancelled()``), and an ensemble (ONNX then python
steps) answers generate like any model."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest

from tests.e2e.generate_cases import answer, post
from tests.e2e.python_cancel_models import build_cancel_repository
from tests.e2e.test_python_cancellation import _settled, _slow_counts, _wait_until
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server


@pytest.fixture(scope="module")
def cancel_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_cancel_repository(tmp_path_factory.mktemp("generate_cancel") / "models")
    with running_server(repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def ensemble_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    names = ("add_sub", "add_sub_onnx", "add_sub_ensemble")
    repo = copy_models(tmp_path_factory.mktemp("generate_ensemble") / "models", names)
    with running_server(repo) as srv:
        yield srv


def _raw_generate(server: ServerThread, suffix: str, body: dict[str, object]) -> socket.socket:
    """Send a generate request on a raw socket and leave the answer unread."""
    assert server.handle is not None
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.handle.http_port))
    head = (
        f"POST /v2/models/{suffix} HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_disconnect_cancels_the_running_request(cancel_server: ServerThread, route: str) -> None:
    before = _slow_counts(cancel_server)
    sock = _raw_generate(cancel_server, f"slow/{route}", {"IN": 20_000})
    _wait_until(lambda: _slow_counts(cancel_server)["executed"] > before["executed"], "execution")
    sock.close()
    assert _settled(cancel_server, before) == {"executed": 1, "cancelled": 1, "completed": 0}


def test_a_stream_after_a_cancelled_one_is_answered(cancel_server: ServerThread) -> None:
    sock = _raw_generate(cancel_server, "stream/generate_stream", {"IN": 2})
    sock.close()
    host, port = cancel_server.http_url.split(":")
    status, content_type, events = answer(
        *post(host, int(port), "stream/generate_stream", {"IN": 2})
    )
    assert (status, content_type) == (200, "text/event-stream")
    assert [event["OUT"] for event in events] == [0, 1]


def test_ensemble_answers_generate(ensemble_server: ServerThread) -> None:
    host, port = ensemble_server.http_url.split(":")
    a = [float(i) for i in range(16)]
    b = [1.5] * 16
    status, _, body = answer(
        *post(host, int(port), "add_sub_ensemble/generate", {"A": a, "B": b, "id": "e"})
    )
    assert status == 200
    assert body == {
        "TWICE_A": [2 * x for x in a],
        "TWICE_B": [3.0] * 16,
        "id": "e",
        "model_name": "add_sub_ensemble",
        "model_version": "1",
        # an ensemble's response parameters (Triton's generate writes them as fields)
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
    }


def test_ensemble_generate_with_too_few_elements(ensemble_server: ServerThread) -> None:
    host, port = ensemble_server.http_url.split(":")
    status, _, body = answer(
        *post(host, int(port), "add_sub_ensemble/generate", {"A": [1.0], "B": [1.0]})
    )
    assert status == 400
    assert body == {"error": "The schema can not convert input 'A' to tensor with proper shape"}


def test_compressed_body_is_refused(ensemble_server: ServerThread) -> None:
    host, port = ensemble_server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(
            "POST",
            "/v2/models/add_sub_ensemble/generate",
            b"\x1f\x8b",
            {"Content-Encoding": "gzip"},
        )
        response = connection.getresponse()
        assert response.status == 400
        assert json.loads(response.read()) == {
            "error": "Unsupported content-encoding, only 'identity' is supported."
        }
    finally:
        connection.close()


def test_unknown_version_is_refused(ensemble_server: ServerThread) -> None:
    host, port = ensemble_server.http_url.split(":")
    status, _, body = answer(*post(host, int(port), "add_sub/versions/7/generate", {}))
    assert status == 404
    assert "add_sub" in body["error"]
