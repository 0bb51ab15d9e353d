"""The request and response types the HTTP endpoints work with (:mod:`.protocol` makes and
sends them): a parsed request with its whole body, a response with its body (one block or
parts), and the stream a handler opens for a response it sends piece by piece
(``generate_stream``'s Server-Sent Events)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, overload
from urllib.parse import parse_qs


class Headers(dict[str, str]):
    """Request headers by lowercase name (``get`` takes any case); the first of repeated
    headers counts."""

    __slots__ = ()

    @overload  # type: ignore[override]
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    @overload
    def get(self, name: str, default: None) -> str | None: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        return dict.get(self, name.lower(), default)


class HttpResponse:
    """A complete response: ``body`` is one block, or ``parts`` (written one after the other,
    never joined) when the endpoint has the body in pieces (large binary outputs)."""

    __slots__ = ("body", "content_type", "headers", "parts", "status")

    def __init__(
        self,
        body: bytes = b"",
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str = "text/plain",
        parts: Sequence[bytes | memoryview] | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.headers: dict[str, str] = headers if headers is not None else {}
        self.content_type = content_type
        self.parts = parts

    @property
    def size(self) -> int:
        if self.parts is None:
            return len(self.body)
        return sum(len(part) for part in self.parts)


class ResponseStream(Protocol):
    """A response whose head is sent and whose body follows in pieces: chunked, or as they are
    when the handler gave a ``content-length`` header."""

    async def send(self, data: bytes | memoryview) -> None: ...

    async def eof(self) -> None: ...


class Responder(Protocol):
    """What a request needs of its connection to stream a response."""

    @property
    def transport(self) -> asyncio.Transport | None: ...

    async def open_stream(
        self, request: HttpRequest, status: int, headers: dict[str, str], content_type: str
    ) -> ResponseStream: ...


class HttpRequest:
    """One request: method, raw path (not percent-decoded) and query string, headers, the
    whole body."""

    __slots__ = ("_args", "_responder", "body", "headers", "method", "path", "query_string")

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str = "",
        headers: Headers | None = None,
        body: bytes | memoryview = b"",
        responder: Responder | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers if headers is not None else Headers()
        self.body = body
        self._responder = responder
        self._args: dict[str, str] | None = None

    @property
    def args(self) -> dict[str, str]:
        """The query parameters (the first value of each name; blank values dropped)."""
        if self._args is None:
            parsed = parse_qs(self.query_string, errors="surrogateescape")
            self._args = {name: values[0] for name, values in parsed.items()}
        return self._args

    @property
    def transport(self) -> asyncio.Transport | None:
        return None if self._responder is None else self._responder.transport

    async def respond(
        self,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str = "text/plain",
    ) -> ResponseStream:
        """Send the head now; the body follows through the returned stream's ``send`` and
        ends with ``eof``. The handler then returns None."""
        if self._responder is None:
            raise RuntimeError("this request has no connection to stream a response on")
        return await self._responder.open_stream(self, status, headers or {}, content_type)
