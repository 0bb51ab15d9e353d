"""The HTTP server's socket handling (repokit.frontends.http.server): a socket made by the
caller, TLS through an ``ssl.SSLContext``, several servers sharing a port with SO_REUSEPORT."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from repokit.frontends.http.connection_limits import ConnectionLimits
from repokit.frontends.http.messages import HttpRequest, HttpResponse
from repokit.frontends.http.server import HttpServer, bind_socket
from tests.tls_helpers import make_self_signed_cert


def _named(name: str) -> HttpServer:
    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse(f"{name} {request.method} {request.path}".encode())

    return HttpServer(handler)


async def _get(port: int, context: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(b"GET /x?y=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    return answer


async def test_tls_with_the_servers_context(tmp_path: Path) -> None:
    key, cert = make_self_signed_cert(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(str(cert), str(key))
    client_context = ssl.create_default_context(cafile=str(cert))
    server = _named("tls")
    port = await server.start(bind_socket("127.0.0.1", 0), server_context)
    try:
        answer = await _get(port, client_context)
    finally:
        await server.close()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\ntls GET /x")
    assert b"connection: close\r\n" in answer


async def test_two_servers_share_a_port_with_reuse_port() -> None:
    first_socket = bind_socket("127.0.0.1", 0, reuse_port=True)
    port = first_socket.getsockname()[1]
    second_socket = bind_socket("127.0.0.1", port, reuse_port=True)
    first, second = _named("one"), _named("two")
    assert await first.start(first_socket) == port
    assert await second.start(second_socket) == port
    try:
        seen = set()
        for _ in range(64):
            body = (await _get(port)).partition(b"\r\n\r\n")[2]
            seen.add(body.split(b" ")[0])
            if len(seen) == 2:
                break
    finally:
        await first.close()
        await second.close()
    assert seen == {b"one", b"two"}


async def _scenario() -> list[bytes]:
    """Pipelined requests, a response in parts and a streamed one, on the running loop."""

    async def handler(request: HttpRequest) -> HttpResponse | None:
        if request.path == "/parts":
            return HttpResponse(parts=[b"a" * 70000, memoryview(b"b" * 5)])
        if request.path == "/stream":
            stream = await request.respond(content_type="text/event-stream")
            for event in (b"data: 1\n\n", b"data: 2\n\n"):
                await stream.send(event)
            await stream.eof()
            return None
        return HttpResponse(request.body[::-1])

    server = HttpServer(handler)
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /parts HTTP/1.1\r\n\r\n"
            b"GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        answer = await reader.read()
        writer.close()
    finally:
        await server.close()
    return answer.split(b"HTTP/1.1 ")[1:]


def _check(answers: list[bytes]) -> None:
    echo, parts, stream = answers
    assert echo.startswith(b"200 OK\r\n") and echo.endswith(b"\r\n\r\ncba")
    assert b"content-length: 70005\r\n" in parts
    assert parts.endswith(b"a" * 70000 + b"bbbbb")
    head, _, body = stream.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and b"connection: close" in head
    assert body == b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"


async def test_pipelining_parts_and_streams_on_asyncio() -> None:
    _check(await _scenario())


def test_pipelining_parts_and_streams_on_uvloop() -> None:
    """``repokit serve`` runs on uvloop, whose transports are not asyncio's classes."""
    import uvloop

    _check(uvloop.run(_scenario()))


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    answer = await asyncio.wait_for(reader.read(), 30)  # until the server closes
    writer.close()
    return answer


async def test_a_request_past_the_response_timeout_is_answered_503() -> None:
    async def never(request: HttpRequest) -> HttpResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server = HttpServer(never, ConnectionLimits(response_timeout_s=0.2, max_connections=8))
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        answer = await _exchange(port, b"GET / HTTP/1.1\r\n\r\n")
    finally:
        await server.close()
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert answer.endswith(b'{"error":"Response Timeout"}')


@pytest.mark.parametrize(
    "data",
    [
        b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nabcdef\r\n",
    ],
    ids=["declared", "chunked"],
)
async def test_a_body_over_the_limit_is_413(data: bytes) -> None:
    server = _named("x")
    server.max_body = 10
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        answer = await _exchange(port, data)
    finally:
        await server.close()
    assert answer.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert answer.endswith(b'{"error":"Request body exceeds the size limit"}')


async def test_a_connection_past_the_limit_is_refused_when_every_one_is_busy() -> None:
    release = asyncio.Event()

    async def wait(request: HttpRequest) -> HttpResponse:
        await release.wait()
        return HttpResponse(b"done")

    server = HttpServer(wait, ConnectionLimits(max_connections=1))
    port = await server.start(bind_socket("127.0.0.1", 0))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        await writer.drain()
        while not any(not c.waiting_for_client() for c in server.connections):
            await asyncio.sleep(0.01)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            answer = await _exchange(port, b"GET / HTTP/1.1\r\n\r\n")
            if not answer:
                raise ConnectionResetError("closed without an answer")
        release.set()
        assert (await reader.readuntil(b"done")).startswith(b"HTTP/1.1 200 OK")
        writer.close()
    finally:
        await server.close()
