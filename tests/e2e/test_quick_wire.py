"""The wire lane driven by callbacks (repokit.core.quick_wire) on a real server (port 0): an
HTTP JSON request to a python model goes to its instance without a task, and what the task's
path guarantees still holds: a client that goes away cancels the request at the instance and
the server, the version and the instance count it out; a request past the response timeout is
answered 503 and cancelled the same way; the statistics count what ran. The server runs without
frontend worker processes (their frontends take the task's path: the service is remote)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator

import pytest
import requests

from tests.e2e.python_cancel_models import build_cancel_repository
from tests.frontends.http.server_thread import ServerThread, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_cancel_repository(tmp_path_factory.mktemp("quick") / "models")
    with running_server(repo, workers=0, http_response_timeout_secs=3.0) as srv:
        yield srv


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _slow_count(server: ServerThread, event: str) -> float:
    assert server.handle is not None
    text = requests.get(f"http://127.0.0.1:{server.handle.metrics_port}/metrics", timeout=10).text
    found = re.search(rf'slow_requests\{{event="{event}"\}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def _body(wait_ms: int) -> bytes:
    inputs = [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [wait_ms]}]
    return json.dumps({"inputs": inputs}).encode()


def _send(server: ServerThread, wait_ms: int) -> socket.socket:
    assert server.handle is not None
    body = _body(wait_ms)
    sock = socket.create_connection(("127.0.0.1", server.handle.http_port))
    head = (
        "POST /v2/models/slow/infer HTTP/1.1\r\nHost: test\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def _counted_out(server: ServerThread) -> bool:
    """Nothing in flight: the server's count, the version's and its instance's."""
    assert server.handle is not None
    service = server.handle.service
    loaded = service.manager.get("slow", "")
    lane = loaded.wire_lane
    assert lane is not None
    return (
        service.inflight_requests == 0
        and loaded.inflight == 0
        and lane.scheduler.pending_count == 0  # type: ignore[attr-defined]
        and all(n == 0 for n in lane.scheduler._outstanding.values())  # type: ignore[attr-defined]
    )


def _success_count(server: ServerThread) -> int:
    assert server.handle is not None
    stats = requests.get(f"http://{server.http_url}/v2/models/slow/stats", timeout=10).json()
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def test_the_lane_is_driven_by_callbacks(server: ServerThread) -> None:
    assert server.handle is not None
    lane = server.handle.service.manager.get("slow", "").wire_lane
    assert lane is not None and lane.quick is not None
    before = _success_count(server)
    answers = [
        requests.post(f"http://{server.http_url}/v2/models/slow/infer", data=_body(5), timeout=30)
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].json()["outputs"][0]["data"] == [5]
    assert _success_count(server) == before + 3
    assert _counted_out(server)


def test_a_client_that_goes_away_cancels_its_request(server: ServerThread) -> None:
    executed = _slow_count(server, "executed")
    cancelled = _slow_count(server, "cancelled")
    before = _success_count(server)
    sock = _send(server, 20_000)
    _wait_until(lambda: _slow_count(server, "executed") > executed, "the execution")
    assert not _counted_out(server)
    sock.close()
    _wait_until(lambda: _slow_count(server, "cancelled") > cancelled, "the model to see it")
    _wait_until(lambda: _counted_out(server), "the request to be counted out")
    # the next request is served, and the cancelled one was not counted a success
    answer = requests.post(
        f"http://{server.http_url}/v2/models/slow/infer", data=_body(1), timeout=30
    )
    assert answer.json()["outputs"][0]["data"] == [1]
    assert _success_count(server) == before + 1


def test_a_request_past_the_response_timeout_is_answered_503_and_cancelled(
    server: ServerThread,
) -> None:
    cancelled = _slow_count(server, "cancelled")
    sock = _send(server, 20_000)
    sock.settimeout(30)
    answer = b""
    while b'{"error":"Response Timeout"}' not in answer:
        chunk = sock.recv(4096)
        assert chunk, f"closed without the 503: {answer!r}"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert sock.recv(4096) == b""  # the connection closes after it
    sock.close()
    _wait_until(lambda: _slow_count(server, "cancelled") > cancelled, "the model to see it")
    _wait_until(lambda: _counted_out(server), "the request to be counted out")
