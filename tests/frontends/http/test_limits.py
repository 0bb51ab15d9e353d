"""What one HTTP client can hold in the server: pipelined requests it never reads the answers
of (backpressure), slow or idle connections (timeouts) and the number of connections."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from repokit.frontends.http.fast_protocol import PIPELINED_BYTES_LIMIT
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

# a pipelined infer request of 60 KiB (below the size whose body is collected apart) for a
# model that does not exist: answered at once with a small error
_PADDING = b" " * (60 * 1024)
_BODY = json.dumps({"inputs": []}).encode() + _PADDING
UNKNOWN_INFER = (
    b"POST /v2/models/nope/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(_BODY)
    + _BODY
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("limits") / "repo", ("add_sub",))
    with running_server(repo) as running:
        yield running


def connect(server: ServerThread) -> socket.socket:
    host, port = server.http_url.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # reads nothing anyway
    return sock


def test_pipelined_requests_of_a_client_that_never_reads_are_bounded(
    server: ServerThread,
) -> None:
    """Without backpressure the server read all 256 MiB into memory (the issue's reproduction:
    1000 MiB grew the server by 1 GB); now it stops reading once 1 MiB waits, and the client's
    sends block after what the kernel buffers hold (at most 32 + 4 MiB here)."""
    chunk = UNKNOWN_INFER * 16  # ~1 MiB
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
        # what it took is answered once the client reads: 404s for the unknown model
        sock.settimeout(30)
        received = sock.recv(65536)
        assert received.startswith(b"HTTP/1.1 404 ")
    # the connection is gone; the server serves others
    with connect(server) as other:
        other.sendall(UNKNOWN_INFER)
        assert other.recv(65536).startswith(b"HTTP/1.1 404 ")


def test_the_limit_is_above_one_request() -> None:
    assert len(UNKNOWN_INFER) < PIPELINED_BYTES_LIMIT
