"""The HTTP/1.1 protocol (repokit.frontends.http.protocol) against a real server on port 0,
over raw sockets so that pipelining, partial writes, chunked bodies and HTTP/1.0 can be sent.

Where a request can be framed two ways (``Content-Length`` or chunked), the tests check that
both give the same answer.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repokit.frontends.http import protocol
from repokit.frontends.http.messages import HttpRequest, HttpResponse
from repokit.frontends.http.protocol import HEAD_LIMIT
from repokit.frontends.http.server import HttpServer, bind_socket
from tests.e2e.python_cancel_models import build_cancel_repository
from tests.frontends.http.server_thread import (
    ServerThread,
    copy_models,
    running_server,
    serve_settings,
)

A = list(range(16))
ADD_SUB_BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": A},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": A},
        ]
    }
).encode()


class Response:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def json(self) -> object:
        return json.loads(self.body)


class Connection:
    """One keep-alive connection; reads responses one by one in order."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        self.buffer += chunk

    def read(self) -> Response:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        if status == 100:  # the interim answer to Expect: 100-continue
            return self.read()
        headers = [(k, v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
        length = int(next(v for k, v in headers if k.lower() == "content-length"))
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Response(status, headers, body)

    def closed_by_server(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


def request(
    path: str, body: bytes = b"", method: str = "POST", headers: dict[str, str] | None = None
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    for key, value in (headers or {}).items():
        lines.append(f"{key}: {value}")
    if method == "POST" and "Transfer-Encoding" not in (headers or {}):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("fast") / "models")
    with running_server(repo) as srv:
        yield srv


@pytest.fixture
def conn(server: ServerThread) -> Iterator[Connection]:
    assert server.handle is not None and server.handle.http_port is not None
    connection = Connection(server.handle.http_port)
    yield connection
    connection.close()


def chunked_answer(conn: Connection, path: str, body: bytes, headers: dict[str, str]) -> Response:
    """The answer to the same request sent with a chunked body."""
    conn.send(request(path, chunked(body), headers={**headers, "Transfer-Encoding": "chunked"}))
    return conn.read()


INFER = "/v2/models/add_sub/infer"
BINARY_BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": A},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": A},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
).encode()


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        (INFER, ADD_SUB_BODY, {}, 200),
        (INFER, BINARY_BODY, {}, 200),
        ("/v2/models/add_sub/versions/1/infer", ADD_SUB_BODY, {}, 200),
        (INFER, b"{bad", {}, 400),
        (INFER, b"", {}, 400),
        (INFER, b"[1, 2]", {}, 400),
        (INFER, ADD_SUB_BODY[:-9] + b"}", {}, 400),
        ("/v2/models/missing/infer", ADD_SUB_BODY, {}, 404),
        ("/v2/models/add_sub/versions/9/infer", ADD_SUB_BODY, {}, 404),
        (INFER, ADD_SUB_BODY, {"Inference-Header-Content-Length": "nope"}, 400),
        (INFER, ADD_SUB_BODY, {"Inference-Header-Content-Length": "10"}, 400),
        (INFER, ADD_SUB_BODY, {"Accept-Encoding": "identity"}, 200),
    ],
)
def test_a_sized_and_a_chunked_body_get_the_same_answer(
    conn: Connection, path: str, body: bytes, headers: dict[str, str], status: int
) -> None:
    conn.send(request(path, body, headers=headers))
    sized = conn.read()
    other = chunked_answer(conn, path, body, headers)
    assert (sized.status, sized.body) == (other.status, other.body)
    assert sized.status == status
    for name in ("content-type", "inference-header-content-length", "connection"):
        assert sized.header(name) == other.header(name)
    assert sized.header("connection") == "keep-alive"
    assert int(sized.header("content-length") or -1) == len(sized.body)


def test_binary_output_round_trips(conn: Connection) -> None:
    conn.send(request(INFER, BINARY_BODY))
    answer = conn.read()
    length = int(answer.header("inference-header-content-length") or 0)
    header = json.loads(answer.body[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 64}
    values = np.frombuffer(answer.body[length:], dtype=np.float32)
    np.testing.assert_array_equal(values, np.arange(16, dtype=np.float32) * 2)


def test_pipelined_requests_are_answered_in_order(conn: Connection) -> None:
    conn.send(
        request(INFER, ADD_SUB_BODY)
        + request("/v2/health/ready", method="GET")
        + request(INFER, b"{bad")
        + request("/v2/models/add_sub/config", method="GET")
        + request(INFER, ADD_SUB_BODY)
    )
    answers = [conn.read() for _ in range(5)]
    assert [a.status for a in answers] == [200, 200, 400, 200, 200]
    assert answers[0].body == answers[4].body
    assert json.loads(answers[3].body)["name"] == "add_sub"


def test_request_in_pieces(conn: Connection) -> None:
    data = request(INFER, ADD_SUB_BODY)
    for start in range(0, len(data), 37):
        conn.send(data[start : start + 37])
        time.sleep(0.002)
    answer = conn.read()
    assert answer.status == 200
    outputs = answer.json()["outputs"]  # type: ignore[index]
    assert outputs[0]["data"] == [2.0 * x for x in A]


def test_many_requests_on_one_connection(conn: Connection) -> None:
    for _ in range(50):
        conn.send(request(INFER, ADD_SUB_BODY))
        assert conn.read().status == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Encoding": "gzip"},
        {"Accept-Encoding": "gzip"},
        {"Expect": "100-continue"},
        {"Connection": "close"},
    ],
)
def test_compression_continue_and_close(conn: Connection, headers: dict[str, str]) -> None:
    body = ADD_SUB_BODY
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.compress(ADD_SUB_BODY)
    conn.send(request(INFER, body, headers=headers))
    answer = conn.read()
    assert answer.status == 200
    if "Accept-Encoding" in headers:
        assert answer.header("content-encoding") == "gzip"
    if "Connection" in headers:
        assert conn.closed_by_server()


def test_http_1_0_is_answered_and_closed(conn: Connection) -> None:
    head = f"POST {INFER} HTTP/1.0\r\nContent-Length: {len(ADD_SUB_BODY)}\r\n\r\n"
    conn.send(head.encode() + ADD_SUB_BODY)
    answer = conn.read()
    assert answer.status == 200 and answer.header("connection") == "close"
    assert conn.closed_by_server()


def test_oversized_head_is_refused(conn: Connection) -> None:
    conn.send(b"POST " + INFER.encode() + b" HTTP/1.1\r\nX-Big: " + b"a" * 20000)
    answer = conn.read()
    assert answer.status == 413
    assert answer.json() == {"error": "Request header exceeds the size limit"}
    assert conn.closed_by_server()


def test_malformed_head_is_a_bad_request(conn: Connection) -> None:
    conn.send(b"POST " + INFER.encode() + b" HTTP/1.1\r\nno colon here\r\n\r\n")
    answer = conn.read()
    assert answer.status == 400
    assert answer.json() == {"error": "Malformed HTTP request: Invalid header token"}
    assert answer.header("connection") == "close"
    assert conn.closed_by_server()


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"FROB /v2 HTTP/1.1\r\n\r\n", 405),  # a method no router knows
        (b"GET /v2 HTTP/2.0\r\n\r\n", 400),
        (b"GET /v2/\xc3\xa9 HTTP/1.1\r\n\r\n", 400),
        (b"POST /v2 HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST /v2 HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST /v2 HTTP/1.1\r\nContent-Length: 2\r\nExpect: magic\r\n\r\n", 417),
        # a body whose end cannot be found, with or without a length (RFC 9112 6.3)
        (b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nzz", 400),
        (b"POST /v2 HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: gzip\r\n\r\nzz", 400),
        # a coding before the chunks that nothing here decodes
        (b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    ],
)
def test_requests_the_protocol_refuses(conn: Connection, data: bytes, status: int) -> None:
    conn.send(data)
    answer = conn.read()
    assert answer.status == status
    assert "error" in answer.json()  # type: ignore[operator]
    assert conn.closed_by_server()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"POST /v2 HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "Malformed HTTP request: Duplicate Content-Length",
        ),
        (
            b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "Malformed HTTP request: Invalid character in chunk size",
        ),
        (
            b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nzz",
            "Transfer-Encoding 'gzip' does not end with chunked",
        ),
        (
            b"POST /v2 HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            "Transfer-Encoding 'gzip, chunked' is not supported, only chunked",
        ),
    ],
)
def test_a_refusal_says_what_was_wrong(conn: Connection, data: bytes, message: str) -> None:
    conn.send(data)
    assert conn.read().json() == {"error": message}


def test_chunks_frame_the_body_when_a_length_comes_too(conn: Connection) -> None:
    """requests' ``data=`` with a ``Transfer-Encoding: chunked`` header sends both headers
    (Triton's qa http_test test_content_encoding_chunked_manually): the chunks frame the body,
    the length is ignored, and the connection closes after the answer (RFC 9112 6.3)."""
    body = chunked(ADD_SUB_BODY)
    head = (
        f"POST {INFER} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    conn.send(head.encode() + body + request("/v2", method="GET"))
    answer = conn.read()
    assert answer.status == 200
    assert [o["name"] for o in answer.json()["outputs"]] == ["OUTPUT0", "OUTPUT1"]  # type: ignore[index]
    assert answer.header("connection") == "close"
    assert conn.closed_by_server()  # the request behind it is not read


def test_a_refusal_waits_for_the_answers_before_it(conn: Connection) -> None:
    conn.send(request(INFER, ADD_SUB_BODY) + b"GET /v2 HTTP/1.1\r\nno colon\r\n\r\n")
    assert conn.read().status == 200
    assert conn.read().status == 400
    assert conn.closed_by_server()


def test_head_is_answered_without_a_body(conn: Connection) -> None:
    conn.send(b"HEAD /v2 HTTP/1.1\r\nHost: x\r\n\r\n" + request("/v2", method="GET"))
    conn.sock.settimeout(30)
    data = b""
    while data.count(b"\r\n\r\n") < 2 or not data.endswith(b"}"):
        data += conn.sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ")  # the frontend knows no HEAD endpoint
    assert b"content-length: 30" in head  # the size of the body it would have
    assert rest.startswith(b"HTTP/1.1 200 ")  # the next answer follows the head at once


def test_expect_continue_is_answered_before_the_body(conn: Connection) -> None:
    head = f"POST {INFER} HTTP/1.1\r\nExpect: 100-continue\r\n"
    head += f"Content-Length: {len(ADD_SUB_BODY)}\r\n\r\n"
    conn.send(head.encode())
    conn.sock.settimeout(30)
    assert conn.sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
    conn.send(ADD_SUB_BODY)
    assert conn.read().status == 200


def test_a_query_string_is_not_part_of_the_path(conn: Connection) -> None:
    conn.send(request(INFER + "?x=1", ADD_SUB_BODY))
    assert conn.read().status == 200


def test_tritonclient_large_binary(server: ServerThread) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.random.default_rng(1).random(262144, dtype=np.float32)  # 1 MiB
    item = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    item.set_data_from_numpy(data, binary_data=True)
    result = client.infer("identity", [item])
    out = result.as_numpy("OUTPUT0")
    assert out is not None
    np.testing.assert_array_equal(out, data)
    client.close()


def test_restricted_apis(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    with running_server(repo, http_restricted_api=["inference:infer-key=secret"]) as srv:
        assert srv.handle is not None and srv.handle.http_port is not None
        connection = Connection(srv.handle.http_port)
        try:
            connection.send(request(INFER, ADD_SUB_BODY))
            refused = connection.read()
            assert refused.status == 403
            connection.send(request(INFER, ADD_SUB_BODY, headers={"infer-key": "secret"}))
            allowed = connection.read()
            assert allowed.status == 200
        finally:
            connection.close()


def test_stop_finishes_a_running_request(tmp_path: Path) -> None:
    repo = build_cancel_repository(tmp_path / "models")
    srv = ServerThread(serve_settings(repo))
    handle = srv.start()
    assert handle.http_port is not None
    connection = Connection(handle.http_port)
    body = json.dumps(
        {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [600]}]}
    ).encode()
    connection.send(request("/v2/models/slow/infer", body))
    deadline = time.monotonic() + 30
    while handle.service.inflight_requests == 0:  # wait until the request is in the core
        assert time.monotonic() < deadline, "the request never reached the core"
        time.sleep(0.01)
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    try:
        answer = connection.read()
    finally:
        stopper.join(timeout=60)
        connection.close()
    assert answer.status == 200
    assert not stopper.is_alive()


def _closed_within(connection: Connection, seconds: float) -> bool:
    connection.sock.settimeout(seconds)
    try:
        return connection.sock.recv(1) == b""
    except ConnectionResetError:  # closed before it read all we sent: the kernel resets
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_keep_alive_timeout_closes_idle_connections(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    with running_server(repo, http_keepalive_timeout_secs=0.3) as srv:
        assert srv.handle is not None and srv.handle.http_port is not None
        port = srv.handle.http_port
        unused = Connection(port)
        infer = Connection(port)
        infer.send(request(INFER, ADD_SUB_BODY))
        assert infer.read().status == 200
        ready = Connection(port)
        ready.send(request("/v2/health/ready", method="GET"))
        assert ready.read().status == 200
        try:
            for connection in (unused, infer, ready):
                assert _closed_within(connection, 10.0)
        finally:
            for connection in (unused, infer, ready):
                connection.close()


def test_a_running_request_outlives_the_keep_alive_timeout(tmp_path: Path) -> None:
    repo = build_cancel_repository(tmp_path / "models")
    with running_server(repo, http_keepalive_timeout_secs=0.2) as srv:
        assert srv.handle is not None and srv.handle.http_port is not None
        connection = Connection(srv.handle.http_port)
        body = json.dumps(
            {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1000]}]}
        ).encode()
        try:
            connection.send(request("/v2/models/slow/infer", body))
            answer = connection.read()  # 1 s in the model, five keep-alive timeouts
            assert answer.status == 200
        finally:
            connection.close()


def identity_request(values: np.ndarray) -> bytes:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [values.size],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": values.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return request(
        "/v2/models/identity/infer",
        head + values.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(head))},
    )


def identity_output(answer: Response) -> np.ndarray:
    length = int(answer.header("inference-header-content-length") or 0)
    return np.frombuffer(answer.body[length:], dtype=np.float32)


def test_large_bodies_in_odd_pieces_with_requests_pipelined_behind(conn: Connection) -> None:
    rng = np.random.default_rng(7)
    first = rng.random(100_000, dtype=np.float32)  # 400 kB: received chunk by chunk
    second = rng.random(50_000, dtype=np.float32)
    data = identity_request(first) + identity_request(second) + request(INFER, ADD_SUB_BODY)
    cut = len(identity_request(first)) + 5  # a chunk ends 5 bytes into the second request
    pieces = [data[:70_001], data[70_001:cut], data[cut : cut + 99_999], data[cut + 99_999 :]]
    for piece in pieces:
        conn.send(piece)
    answers = [conn.read() for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 200]
    np.testing.assert_array_equal(identity_output(answers[0]), first)
    np.testing.assert_array_equal(identity_output(answers[1]), second)
    assert answers[2].json()["outputs"][0]["data"] == [2.0 * x for x in A]  # type: ignore[index]


def test_a_client_that_leaves_mid_body_leaves_the_server_healthy(server: ServerThread) -> None:
    assert server.handle is not None and server.handle.http_port is not None
    partial = Connection(server.handle.http_port)
    partial.send(identity_request(np.zeros(100_000, dtype=np.float32))[:150_000])
    partial.close()
    conn = Connection(server.handle.http_port)
    try:
        conn.send(request(INFER, ADD_SUB_BODY))
        assert conn.read().status == 200
    finally:
        conn.close()


async def test_a_bug_in_a_handler_answers_500_and_the_connection_serves_on() -> None:
    calls: list[str] = []

    async def handler(req: HttpRequest) -> None:
        calls.append(req.path)
        raise RuntimeError("boom")

    server = HttpServer(handler)
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /boom HTTP/1.1\r\n\r\nGET /boom HTTP/1.1\r\n\r\n")
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            assert json.loads(body) == {"error": "internal error: RuntimeError: boom"}
        writer.close()
    finally:
        await server.close()
    assert calls == ["/boom", "/boom"]


def test_a_complete_but_oversized_head_is_refused(conn: Connection) -> None:
    big = {"X-Big": "a" * (HEAD_LIMIT + 800)}
    conn.send(request(INFER, ADD_SUB_BODY, headers=big))
    answer = conn.read()
    assert answer.status == 413


def test_a_head_just_below_the_limit_is_served(conn: Connection) -> None:
    big = {"X-Big": "a" * (HEAD_LIMIT - 200)}
    conn.send(request(INFER, ADD_SUB_BODY, headers=big))
    assert conn.read().status == 200


def test_the_first_header_length_counts(conn: Connection) -> None:
    lengths = f"Inference-Header-Content-Length: {len(ADD_SUB_BODY)}\r\n"
    lengths += "Inference-Header-Content-Length: 3\r\n"
    conn.send(
        f"POST {INFER} HTTP/1.1\r\n{lengths}Content-Length: {len(ADD_SUB_BODY)}\r\n\r\n".encode()
        + ADD_SUB_BODY
    )
    fast = conn.read()
    assert fast.status == 200
    conn.send(
        f"POST {INFER} HTTP/1.1\r\n{lengths}Transfer-Encoding: chunked\r\n\r\n".encode()
        + chunked(ADD_SUB_BODY)
    )
    slow = conn.read()
    assert (slow.status, slow.body) == (fast.status, fast.body)


def test_nothing_after_a_request_that_closes_the_connection_is_answered(
    conn: Connection,
) -> None:
    conn.send(
        request(INFER, ADD_SUB_BODY, headers={"Connection": "close"}) + request(INFER, b"{bad")
    )
    answer = conn.read()
    assert answer.status == 200 and answer.header("connection") == "close"
    assert conn.closed_by_server()
    assert conn.buffer == b""


def test_http_1_0_with_keep_alive_stays_open(conn: Connection) -> None:
    head = f"POST {INFER} HTTP/1.0\r\nConnection: keep-alive\r\n"
    head += f"Content-Length: {len(ADD_SUB_BODY)}\r\n\r\n"
    for _ in range(2):
        conn.send(head.encode() + ADD_SUB_BODY)
        answer = conn.read()
        assert answer.status == 200 and answer.header("connection") == "keep-alive"


async def _post_pieces(port: int, pieces: list[bytes]) -> list[tuple[bytes, bytes]]:
    """Send ``pieces`` one by one on one connection; read every answer until it closes or
    two answers came: (head, body) of each."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for piece in pieces:
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.01)
    answers = []
    for _ in range(2):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            break
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        answers.append((head, await reader.readexactly(length)))
    writer.close()
    return answers


async def test_a_large_body_is_read_into_its_own_buffer_and_handed_on_read_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the body's buffer starts at 128 KiB and doubles as the 1 MiB body arrives
    monkeypatch.setattr(protocol, "DIRECT_BODY_FIRST", 128 * 1024)
    seen: list[tuple[type, bool, int]] = []

    async def echo(req: HttpRequest) -> HttpResponse:
        body = req.body
        view = memoryview(body)
        seen.append((type(body), view.readonly, len(body)))
        return HttpResponse(bytes(body), content_type="application/octet-stream")

    server = HttpServer(echo)
    port = await server.start(bind_socket("127.0.0.1", 0))
    payload = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    data = b"POST /a HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
    data += b"POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    cuts = [0, 100, 70_000, 70_001, 400_000, len(data) - 40, len(data)]
    try:
        answers = await _post_pieces(port, [data[a:b] for a, b in itertools.pairwise(cuts)])
    finally:
        await server.close()
    assert [body for _, body in answers] == [payload, b"abc"]
    assert seen == [(memoryview, True, len(payload)), (bytes, True, 3)]


async def test_a_body_that_cannot_be_held_is_refused_413_and_the_connection_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_memory(size: int) -> memoryview:
        raise MemoryError

    monkeypatch.setattr(protocol, "_uninitialised", no_memory)
    calls: list[str] = []

    async def handler(req: HttpRequest) -> HttpResponse:
        calls.append(req.path)
        return HttpResponse(b"{}")

    server = HttpServer(handler)
    port = await server.start(bind_socket("127.0.0.1", 0))
    head = b"POST /big HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (1 << 20)
    try:
        answers = await _post_pieces(port, [head + b"x" * 1000, b"y" * 5000])
    finally:
        await server.close()
    assert len(answers) == 1
    assert answers[0][0].startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert b"connection: close" in answers[0][0]
    assert json.loads(answers[0][1]) == {"error": "Request body exceeds the size limit"}
    assert calls == []


def test_header_values_are_read_without_their_trailing_whitespace(conn: Connection) -> None:
    """Values keep trailing whitespace (a forwarded header reaches the model as sent), but
    the ones the server reads are stripped: a gzip body and a close are still understood."""
    body = gzip.compress(ADD_SUB_BODY)
    head = (
        f"POST {INFER} HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip \t\r\n"
        f"Accept-Encoding: deflate \r\nConnection: close \r\nContent-Length: {len(body)}\r\n\r\n"
    )
    conn.send(head.encode() + body)
    answer = conn.read()
    assert answer.status == 200
    assert answer.header("content-encoding") == "deflate"
    assert json.loads(zlib.decompress(answer.body))["outputs"][0]["name"] == "OUTPUT0"
    assert conn.closed_by_server()


class _QuickRun:
    """What a quick hook returns: remembers whether the connection cancelled it."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> bool:
        self.cancelled = True
        return True


async def _read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head, await reader.readexactly(length)


async def test_a_quick_hook_answers_by_callback_in_order_and_declines_to_the_handler() -> None:
    """The server's ``quick`` hook (protocol.Quick) runs what it takes by callbacks: answers
    come later, in request order, a bug it reports is a 500, and what it declines (None) or
    fails to start (raises) goes to the handler."""
    handled: list[str] = []
    pending: list[tuple[str, object]] = []
    loop = asyncio.get_running_loop()

    async def handler(req: HttpRequest) -> HttpResponse:
        handled.append(req.path)
        return HttpResponse(b"handler", content_type="text/plain")

    def quick(req: HttpRequest, done: object) -> _QuickRun | None:
        if req.path == "/raise":
            raise RuntimeError("quick bug")
        if req.path not in ("/quick", "/quick-bug"):
            return None
        pending.append((req.path, done))
        # answered on a later loop turn, as a reply's callback answers
        answer: object = (
            RuntimeError("boom")
            if req.path == "/quick-bug"
            else HttpResponse(b"quick", content_type="text/plain")
        )
        loop.call_soon(done, answer)  # type: ignore[arg-type]
        return _QuickRun()

    server = HttpServer(handler, quick=quick)  # type: ignore[arg-type]
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        paths = ["/quick", "/other", "/quick-bug", "/raise", "/quick"]
        writer.write(b"".join(b"GET %b HTTP/1.1\r\n\r\n" % p.encode() for p in paths))
        answers = [await _read_answer(reader) for _ in paths]
        writer.close()
    finally:
        await server.close()
    assert [body for _, body in answers] == [
        b"quick",
        b"handler",
        b'{"error":"internal error: RuntimeError: boom"}',
        b"handler",
        b"quick",
    ]
    assert answers[2][0].startswith(b"HTTP/1.1 500 ")
    assert handled == ["/other", "/raise"]
    assert [path for path, _ in pending] == ["/quick", "/quick-bug", "/quick"]


async def test_a_client_that_leaves_cancels_a_quick_request_and_gets_no_answer() -> None:
    runs: list[_QuickRun] = []
    started = asyncio.Event()

    async def handler(req: HttpRequest) -> HttpResponse:
        raise AssertionError("the quick hook takes every request here")

    def quick(req: HttpRequest, done: object) -> _QuickRun:
        runs.append(_QuickRun())
        started.set()
        return runs[-1]  # never answered: the client leaves first

    server = HttpServer(handler, quick=quick)  # type: ignore[arg-type]
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /quick HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        await started.wait()
        writer.close()
        while not runs[0].cancelled:
            await asyncio.sleep(0.01)
    finally:
        await server.close()
    assert len(runs) == 1
