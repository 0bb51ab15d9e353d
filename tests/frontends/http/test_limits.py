"""What one HTTP client can hold in the server: pipelined requests it never reads the answers
of (backpressure), slow or idle connections (timeouts) and the number of connections."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from repokit.frontends.http.protocol import PIPELINED_BYTES_LIMIT
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

# a pipelined infer request of 60 KiB (below the size whose body is collected apart) for a
# model whose execute waits for a file "gate": nothing is answered until the test opens it
_PADDING = b" " * (60 * 1024)
_BODY = (
    json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}
    ).encode()
    + _PADDING
)
GATED_INFER = (
    b"POST /v2/models/gated/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(_BODY)
    + _BODY
)
GATED_CONFIG = """
name: "gated"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
GATED_MODEL = """
import time
from pathlib import Path
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        while not (Path(__file__).parent / "gate").exists():
            time.sleep(0.01)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
"""


@pytest.fixture(scope="module")
def gated_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_models(tmp_path_factory.mktemp("limits") / "repo", ("add_sub",))
    (repo / "gated" / "1").mkdir(parents=True)
    (repo / "gated" / "config.pbtxt").write_text(GATED_CONFIG)
    (repo / "gated" / "1" / "model.py").write_text(GATED_MODEL)
    return repo


@pytest.fixture(scope="module")
def server(gated_repo: Path) -> Iterator[ServerThread]:
    with running_server(gated_repo) as running:
        yield running


def connect(server: ServerThread) -> socket.socket:
    host, port = server.http_url.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # reads nothing anyway
    return sock


def test_pipelined_requests_of_a_client_that_never_reads_are_bounded(
    server: ServerThread, gated_repo: Path
) -> None:
    """Without backpressure the server read all 256 MiB into memory (the issue's reproduction:
    1000 MiB grew the server by 1 GB); now it stops reading once 1 MiB waits behind the
    running request, and the client's sends block after what the kernel buffers hold (at most
    32 + 4 MiB here)."""
    chunk = GATED_INFER * 16  # ~1 MiB
    total = 256 * len(chunk)
    sent = 0
    with connect(server) as sock:
        sock.settimeout(3.0)  # sends that make no progress for this long: the server stopped
        try:
            while sent < total:
                view = memoryview(chunk)
                while view:
                    count = sock.send(view)
                    sent += count
                    view = view[count:]
        except TimeoutError:
            pass
        assert sent < 64 * (1 << 20), f"the server read {sent} bytes of unread pipelining"
        (gated_repo / "gated" / "1" / "gate").touch()
        sock.settimeout(60)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    # the connection is gone; the server serves others
    with connect(server) as other:
        other.sendall(GATED_INFER)
        assert other.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_the_limit_is_above_one_request() -> None:
    assert len(GATED_INFER) < PIPELINED_BYTES_LIMIT


# --- slow and idle connections -------------------------------------------------------------
@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """Limits small enough for a test: 0.5 s for a head and for a pause in a body, 4
    connections."""
    repo = copy_models(tmp_path_factory.mktemp("strict") / "repo", ("add_sub",))
    with running_server(
        repo,
        http_header_timeout_secs=0.5,
        http_body_timeout_secs=0.5,
        http_max_connections=4,
    ) as running:
        yield running


def _trickle_until_closed(sock: socket.socket, data: bytes) -> bytes:
    """Send ``data`` a byte at a time (a slow client: every byte resets a silence timeout)
    and return what the server answered before closing the connection."""
    received = b""
    sock.setblocking(False)
    try:
        for index in range(len(data) + 600):  # at most 30 s after the last byte
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    return received
                received += chunk
            except BlockingIOError:
                pass
            except ConnectionResetError:  # closed with our last bytes unread: the kernel resets
                return received
            if index < len(data):
                try:
                    sock.send(data[index : index + 1])
                except OSError:
                    return received
            select.select([sock], [], [], 0.05)
    finally:
        sock.setblocking(True)
    raise AssertionError("the server kept a slow connection open")


INFER_HEAD = (
    b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 2000 + b"\r\n"
)
READY_HEAD = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 2000 + b"\r\n"


@pytest.mark.parametrize("head", [INFER_HEAD, READY_HEAD], ids=["infer", "other"])
def test_a_head_that_trickles_in_is_cut_at_the_header_timeout(
    strict: ServerThread, head: bytes
) -> None:
    with connect(strict) as sock:
        answer = _trickle_until_closed(sock, head)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n",
        b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Length: 200000\r\n\r\n",
    ],
    ids=["infer", "other"],
)
def test_a_body_that_stops_is_cut_at_the_body_timeout(strict: ServerThread, head: bytes) -> None:
    with connect(strict) as sock:
        sock.sendall(head + b" " * 100_000)  # then nothing more
        sock.settimeout(60)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock``: an end of stream, or a reset when the server closed
    it before reading all we sent (a partial head still in its receive buffer)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_idle_and_slow_connections_cannot_lock_others_out(strict: ServerThread) -> None:
    import tritonclient.http as httpclient

    idle = [connect(strict) for _ in range(4)]
    try:
        for sock in idle[:2]:
            sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHo")  # partial heads
        client = httpclient.InferenceServerClient(strict.http_url)
        assert client.is_server_ready()  # a 5th connection: the oldest idle one made room
        # the oldest of them (idle or partial) was closed to make room
        readable, _, _ = select.select(idle, [], [], 30)
        assert readable, "no idle connection was closed"
        assert closed_by_server(readable[0])
        client.close()
    finally:
        for sock in idle:
            sock.close()
