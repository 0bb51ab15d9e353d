"""HTTP/1.1 for a whole port: one :class:`asyncio.Protocol` per connection over ``httptools``
(the C parser llhttp), every request handed to one handler (the frontend's router).

What a connection does:

* reads into the server's receive buffer (one for all connections: what a read brings is
  parsed before the next read) and parses requests as they arrive; a ``Content-Length`` body of
  at least :data:`DIRECT_BODY_BYTES` is read straight into a buffer of its size, past the
  parser and without another copy, and handed on as a read-only view (``Content-Length`` or
  chunked bodies, ``Expect:
  100-continue``); a head larger than :data:`HEAD_LIMIT` is refused with 413, a body larger
  than the server's limit with 413, a malformed request with 400 (llhttp's reason in the
  message), a transfer coding other than ``chunked`` with 400 or 501, an unknown ``Expect``
  with 417, and the connection closes after such an answer; a request with both
  ``Transfer-Encoding: chunked`` and ``Content-Length`` is read by its chunks and the
  connection closes after its answer (RFC 9112 6.3);
* runs one request at a time and answers in order: requests pipelined behind the running one
  wait, parsed, in the connection; once :data:`PIPELINED_BYTES_LIMIT` bytes of them wait, the
  connection stops reading (the client's sends block in its kernel buffers) until they are
  taken. The next answer is written only once the client has read the previous ones (below
  the transport's write high-water mark);
* keeps the connection open after a response unless HTTP/1.0 or ``Connection`` asks
  otherwise (``Connection: keep-alive`` keeps it, any other value closes it);
* ``HEAD``: the head of the answer (with its ``content-length``), no body;
* a client that disconnects cancels its running request (the model sees ``is_cancelled()``);
* slow and idle connections (:mod:`.connection_limits`): a head must arrive within the header
  timeout of its first byte, a body may pause at most the body timeout (both: 408, then
  close), an idle connection closes after the keep-alive timeout, a request that runs past the
  response timeout is answered 503 and the connection closes; past the connection limit a new
  connection closes the one idle (or sending a partial request) the longest, or is refused
  when every connection is running a request.

Errors of the protocol itself are Triton's ``{"error": "<message>"}`` JSON, as every error of
the frontend. The server (:mod:`.server`) owns the listening socket, the set of connections and
the timer that checks their timeouts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from time import monotonic
from typing import TYPE_CHECKING, Protocol, cast

import httptools
import numpy as np

from repokit.frontends.http.messages import Headers, HttpRequest, HttpResponse, ResponseStream
from repokit.frontends.http.responses import error_body

if TYPE_CHECKING:
    from repokit.frontends.http.server import HttpServer

Handler = Callable[[HttpRequest], Awaitable[HttpResponse | None]]


class Running(Protocol):
    """A request under way: its task, or what runs it by callbacks (:data:`Quick`)."""

    def cancel(self) -> bool: ...


# Runs a request by callbacks instead of the handler when it can: calls its second argument
# with what the handler would return (or raise) and returns what can cancel it; None: the
# handler runs the request (nothing was done).
Quick = Callable[[HttpRequest, Callable[[HttpResponse | Exception], None]], Running | None]

# Content-Length bodies at least this large are read into a buffer of their own, past the
# parser (see get_buffer)
DIRECT_BODY_BYTES = 1 << 16
# a direct body's buffer holds at most this many bytes at first and doubles as the body
# arrives (a client announcing a huge body gets memory only for what it sends)
DIRECT_BODY_FIRST = 1 << 26
# the receive buffer that every connection of a server reads into (see HttpServer)
RECEIVE_BUFFER_BYTES = 1 << 18
# a first response part smaller than this is written together with the head
COALESCE_BYTES = 1 << 16
# the largest request head (request line and headers) accepted
HEAD_LIMIT = 8192
# a connection stops reading while this many bytes of complete requests wait behind the
# running one
PIPELINED_BYTES_LIMIT = 1 << 20

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_JSON = b"application/json"
_REASONS: dict[int, bytes] = {s.value: s.phrase.encode() for s in HTTPStatus}
_REASONS[413] = b"Request Entity Too Large"  # the phrase of RFC 7231 on every Python
_HEAD = b"HTTP/1.1 %d %b\r\n%bcontent-length: %d\r\nconnection: %b\r\ncontent-type: %b\r\n\r\n"
_TASK_NAME = "http-request"  # the Task that runs each request
_log = logging.getLogger("repokit.http")
_access = logging.getLogger("repokit.http.access")


def reason(status: int) -> bytes:
    return _REASONS.get(status, b"Unknown")


def response_head(
    status: int,
    content_type: str,
    size: int,
    headers: dict[str, str] | None = None,
    keep_alive: bool = True,
) -> bytes:
    """The status line and headers of a response with a ``size``-byte body."""
    extra = b""
    if headers:
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode(
            "utf-8", "surrogateescape"
        )
    return _HEAD % (
        status,
        reason(status),
        extra,
        size,
        b"keep-alive" if keep_alive else b"close",
        content_type.encode("latin-1"),
    )


def error_bytes(status: int, message: str, keep_alive: bool = True) -> bytes:
    """A complete ``{"error": "<message>"}`` response."""
    body = error_body(message)
    return response_head(status, "application/json", len(body), None, keep_alive) + body


class Refused(Exception):
    """A request the connection answers itself with ``status`` and closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _StopReading(Exception):
    """Raised at the start of a request that follows one that closes the connection."""


class _Stream:
    """A streamed response body (``ResponseStream``): chunked, or as it is when the handler
    declared its ``content-length``."""

    __slots__ = ("_chunked", "_connection", "_done")

    def __init__(self, connection: HttpConnection, chunked: bool) -> None:
        self._connection = connection
        self._chunked = chunked
        self._done = False

    async def send(self, data: bytes | memoryview) -> None:
        if not data or self._done:
            return
        if self._chunked:
            data = b"%x\r\n%b\r\n" % (len(data), bytes(data))
        await self._connection.write_body(data)

    def discard(self) -> None:
        """Send nothing more (the answer to HEAD)."""
        self._done = True

    async def eof(self) -> None:
        if not self._done:
            self._done = True
            if self._chunked:
                await self._connection.write_body(b"0\r\n\r\n")


def _uninitialised(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that is not zero-filled (every byte of it is
    received into before it is read)."""
    return np.empty(size, dtype=np.uint8).data


class HttpConnection(asyncio.BufferedProtocol):
    """One client connection (see the module docstring)."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self._receive = server.receive_view
        self.transport: asyncio.Transport | None = None
        self._parser = _request_parser(self)
        # made on the serving loop: asyncio.get_running_loop() costs a getpid() call each time
        self._loop = asyncio.get_running_loop()
        self._now = monotonic()
        # the request being parsed
        self._url: list[bytes] = []
        self._headers = Headers()
        self._head_size = 0
        # bytes of the head not yet given to a callback (an upper bound), and a counter of
        # the callbacks that tell how far the head got
        self._head_pending = 0
        self._head_events = 0
        self._head_since = 0.0  # when its first byte arrived (0: no head is being received)
        self._body: list[bytes | memoryview] = []
        self._body_size = 0
        self._in_body = False
        # a large Content-Length body: its size, the bytes of it still to come past the
        # parser (0: none), and its buffer (filled up to _body_size)
        self._body_direct = 0
        self._body_left = 0
        self._direct: memoryview | None = None
        self._request: HttpRequest | None = None
        self._keep_alive = True
        self._continue_pending = False
        # complete requests waiting, and their sizes (a Refused answers in order, then closes)
        self._queue: deque[tuple[HttpRequest | Refused, bool, int]] = deque()
        self._queued_bytes = 0
        self._task: Running | None = None  # the request running
        self._task_since = 0.0
        self._streaming = False  # the running request's response head is sent
        self._running_keep_alive = True
        self._last_data = self._now
        self._idle_since = self._now
        self._reading_paused = False
        self._done_reading = False  # a request that closes the connection was read
        self._can_write = asyncio.Event()
        self._can_write.set()

    # --- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        if not self.server.admit(self):
            transport.abort()
            return
        self.transport = transport
        self.server.connections.add(self)
        self._idle_since = self._last_data = monotonic()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        task = self._task
        self._task = None
        if task is not None:
            task.cancel()  # a client that left cancels its request
        self._queue.clear()
        self._body = []
        self._direct = None
        self._can_write.set()  # a stream waiting to write sees the transport gone

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read goes: the rest of a large body under way, else the server's
        receive buffer."""
        if self._body_left:
            direct = self._direct
            assert direct is not None
            return direct[self._body_size :]
        return self._receive

    def buffer_updated(self, nbytes: int) -> None:
        if self._done_reading:
            return
        self._now = self._last_data = monotonic()
        if self._body_left:
            self._body_size += nbytes
            self._body_left -= nbytes
            if not self._body_left:
                self._end_direct_body()
            elif self._body_size == len(self._direct or b""):
                self._grow_direct()
            return
        self._feed(nbytes)

    def _feed(self, size: int) -> None:
        """Parse what a read brought into the receive buffer (its first ``size`` bytes)."""
        events = self._head_events
        try:
            self._parser.feed_data(self._receive[:size])
        except httptools.HttpParserUpgrade:
            self._done_reading = True  # no protocol switch: answer what was read, then close
            self._keep_alive = False
        except httptools.HttpParserInvalidMethodError:
            self._refuse(405, "Method Not Allowed")  # what the router answers to any other
            return
        except Exception as exc:
            if self._done_reading and isinstance(exc.__context__, _StopReading):
                return  # what follows a request that closes the connection is not read
            refused = _refusal(exc)
            self._refuse(refused.status, refused.message)
            return
        if self._head_since:  # a head is still arriving: its unparsed rest counts too
            if self._head_events != events:
                self._head_pending = size - self.server.receive_buffer.rfind(b"\n", 0, size) - 1
            else:
                self._head_pending += size
            if self._head_size + self._head_pending > HEAD_LIMIT:
                self._refuse(413, "Request header exceeds the size limit")
                return
        if self._in_body and self._body_direct:  # a large body: the rest goes past the parser
            self._start_direct_body()
        if self._queued_bytes >= PIPELINED_BYTES_LIMIT and not self._reading_paused:
            self._pause_reading()

    def _start_direct_body(self) -> None:
        """The body's first bytes came with its head (given to on_body): move them into the
        body's own buffer, where the following reads go."""
        size = self._body_direct
        try:
            direct = _uninitialised(min(size, max(DIRECT_BODY_FIRST, 2 * self._body_size)))
        except MemoryError:
            self._refuse(413, "Request body exceeds the size limit")
            return
        filled = 0
        for piece in self._body:
            direct[filled : filled + len(piece)] = piece
            filled += len(piece)
        self._body = []
        self._direct = direct
        self._body_left = size - filled

    def _grow_direct(self) -> None:
        """The direct body's buffer is full and more is to come: twice as large (at most the
        body's size), what arrived copied over."""
        direct = self._direct
        assert direct is not None
        try:
            larger = _uninitialised(min(self._body_direct, 2 * len(direct)))
        except MemoryError:
            self._refuse(413, "Request body exceeds the size limit")
            return
        larger[: len(direct)] = direct
        self._direct = larger

    def _end_direct_body(self) -> None:
        """The last byte of a direct body arrived: the request is complete. The parser still
        waits for the body, so the next request gets a new one."""
        direct = self._direct
        assert direct is not None
        self._direct = None
        self._body = [direct.toreadonly()]
        self._parser = _request_parser(self)
        self.on_message_complete()

    # --- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._done_reading:
            raise _StopReading
        self._url = []
        self._headers = Headers()
        self._head_size = 0
        self._head_pending = 0
        self._head_events += 1
        self._head_since = self._now
        self._body = []
        self._body_size = 0

    def on_url(self, url: bytes) -> None:
        self._url.append(url)
        self._head_size += len(url)
        if self._head_size > HEAD_LIMIT:
            raise Refused(413, "Request header exceeds the size limit")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_events += 1
        size = self._head_size = self._head_size + len(name) + len(value) + 4
        if size > HEAD_LIMIT:
            raise Refused(413, "Request header exceeds the size limit")
        key = name.lower().decode("latin-1")
        headers = self._headers
        if key not in headers:  # the first of repeated headers counts
            # as llhttp gives it: without leading whitespace, with any trailing whitespace (as
            # tritonserver keeps it: a forwarded header reaches the model as it was sent);
            # the values this server parses are stripped where they are read
            headers[key] = value.decode("utf-8", "surrogateescape")

    def on_headers_complete(self) -> None:
        self._head_since = 0.0
        parser = self._parser
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise Refused(400, "Bad Request")
        headers = self._headers
        get = dict.get  # the names are lowercase already
        connection = get(headers, "connection")
        if connection is None:
            self._keep_alive = version == "1.1"
        else:
            self._keep_alive = connection.strip().lower() == "keep-alive"
        pieces = self._url
        url = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if not url.isascii():
            raise Refused(400, "URL may only contain US-ASCII characters.")
        # "/" first, no "?" or "#": ints, whose membership test is a memchr (a bytes needle
        # costs Python 3.11 a TypeError raised and cleared inside each test)
        if url[0] == 0x2F and 0x3F not in url and 0x23 not in url:
            path, query = url.decode("ascii"), ""  # the usual origin-form path: as it is
        else:
            try:
                parsed = httptools.parse_url(url)
            except httptools.HttpParserInvalidURLError:
                raise Refused(400, f"Bad URL: {url.decode('ascii')}") from None
            path = parsed.path.decode("ascii") if parsed.path else "/"
            query = parsed.query.decode("ascii") if parsed.query else ""
        length = get(headers, "content-length")
        coding = get(headers, "transfer-encoding")
        if coding is not None:
            codings = [part.strip().lower() for part in coding.split(",")]
            if codings[-1] != "chunked":  # the body's end could not be found (RFC 9112 6.3)
                raise Refused(400, f"Transfer-Encoding '{coding}' does not end with chunked")
            if len(codings) > 1:
                raise Refused(501, f"Transfer-Encoding '{coding}' is not supported, only chunked")
            if length is not None:
                # both: the chunks frame the body and the length is ignored, and the connection
                # closes after the answer (RFC 9112 6.3), as Triton's server reads it
                length = None
                self._keep_alive = False
        if length is not None or coding is not None:
            if length is not None and int(length) > self.server.max_body:
                raise Refused(413, "Request body exceeds the size limit")
            expect = get(headers, "expect")
            if expect is not None:
                if expect.strip().lower() != "100-continue":
                    raise Refused(417, f"Unknown Expect: {expect}")
                self._continue_pending = True
                self._send_continue()
        self._request = HttpRequest(
            parser.get_method().decode("ascii"), path, query, headers, b"", self
        )
        self._in_body = True
        size = 0 if length is None else int(length)
        self._body_direct = size if size >= DIRECT_BODY_BYTES else 0

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._body_size += len(body)
        if self._body_size > self.server.max_body:
            raise Refused(413, "Request body exceeds the size limit")

    def on_message_complete(self) -> None:
        self._in_body = False
        self._body_direct = 0
        self._continue_pending = False
        request = self._request
        assert request is not None
        self._request = None
        body = self._body
        if body:
            request.body = body[0] if len(body) == 1 else b"".join(body)
        self._body = []
        keep_alive = self._keep_alive
        if not keep_alive:
            self._done_reading = True  # nothing after this request is read
        if self._task is None and not self._queue:
            self._start(request, keep_alive)
            return
        size = self._body_size + self._head_size
        self._queue.append((request, keep_alive, size))
        self._queued_bytes += size

    # --- running requests --------------------------------------------------------------------
    def _start(self, request: HttpRequest, keep_alive: bool) -> None:
        self._task_since = self._now
        self._streaming = False
        self._running_keep_alive = keep_alive
        quick = self.server.quick
        if quick is not None:
            try:
                running = quick(
                    request, lambda answer: self._quick_done(request, keep_alive, answer)
                )
            except Exception:  # a bug: the handler's path still answers (this runs in the parser)
                _log.exception("HTTP quick path failed for %s %s", request.method, request.path)
                running = None
            if running is not None:
                self._task = running
                return
        # a Task made here, named: the loop's create_task is one more call, and an unnamed
        # Task formats a "Task-<n>" name for itself (with sprintf) on Python 3.11
        self._task = asyncio.Task(self._run(request, keep_alive), loop=self._loop, name=_TASK_NAME)

    def _next(self) -> None:
        """Start the first waiting request (or answer the refusal waiting first)."""
        if not self._queue:
            if self._continue_pending:
                self._send_continue()
            return
        item, keep_alive, size = self._queue.popleft()
        self._queued_bytes -= size
        if self._reading_paused and self._queued_bytes < PIPELINED_BYTES_LIMIT:
            self._reading_paused = False
            if self.transport is not None and not self._done_reading:
                self.transport.resume_reading()
        if isinstance(item, Refused):
            self._answer_and_close(item.status, item.message)
        else:
            self._start(item, keep_alive)

    async def _run(self, request: HttpRequest, keep_alive: bool) -> None:
        try:
            response = await self.server.handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug still answers, and the server keeps serving
            response = self._failed(request, exc)
            if response is None:
                return
        if self._answered(request, response, keep_alive):
            await self._next_when_writable()

    def _quick_done(
        self, request: HttpRequest, keep_alive: bool, answer: HttpResponse | Exception
    ) -> None:
        """The answer of a request run by callbacks (as :meth:`_run` takes the handler's)."""
        if isinstance(answer, Exception):
            response = self._failed(request, answer)
            if response is None:
                return
        else:
            response = answer
        if self._answered(request, response, keep_alive):
            self._loop.create_task(self._next_when_writable())

    def _failed(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        """The answer to a handler's bug (None: the connection closed instead)."""
        _log.error("HTTP handler failed for %s %s", request.method, request.path, exc_info=exc)
        if self._streaming:  # the head is out: the client sees a cut-off body
            self._close()
            return None
        return HttpResponse(
            error_body(f"internal error: {type(exc).__name__}: {exc}"),
            status=500,
            content_type="application/json",
        )

    def _answered(
        self, request: HttpRequest, response: HttpResponse | None, keep_alive: bool
    ) -> bool:
        """Write a request's answer (None: it was streamed) and go on to the next request;
        True when that must wait until the client reads (:meth:`_next_when_writable`)."""
        if self.transport is None:
            return False
        if response is not None:
            self._write(request, response, keep_alive)
        elif self.server.access_log:
            _access.info("%s %s -> streamed", request.method, request.path)
        self._task = None
        self._idle_since = self._now = monotonic()
        if not keep_alive:
            self._close()
            return False
        if self._queue:
            if not self._can_write.is_set():  # a slow reader: queue no more responses
                return True
            self._next()
        elif self._continue_pending:
            self._send_continue()
        return False

    async def _next_when_writable(self) -> None:
        await self._can_write.wait()
        if self._task is None and self.transport is not None:
            self._next()

    def _write(self, request: HttpRequest, response: HttpResponse, keep_alive: bool) -> None:
        transport = self.transport
        assert transport is not None
        parts = response.parts
        size = response.size
        head = response_head(
            response.status, response.content_type, size, response.headers, keep_alive
        )
        if self.server.access_log:
            _access.info(
                "%s %s -> %d (%d bytes)", request.method, request.path, response.status, size
            )
        if request.method == "HEAD":
            transport.write(head)
        elif parts is None:
            transport.write(head + response.body)
        elif parts:
            first = parts[0]  # small (a JSON header): one write with the head
            transport.write(head + first if len(first) < COALESCE_BYTES else head)
            for part in parts[1:] if len(first) < COALESCE_BYTES else parts:
                transport.write(part)  # large parts go as they are, never joined
        else:
            transport.write(head)

    # --- streamed responses (Responder) ------------------------------------------------------
    async def open_stream(
        self, request: HttpRequest, status: int, headers: dict[str, str], content_type: str
    ) -> ResponseStream:
        chunked = not any(name.lower() == "content-length" for name in headers)
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        if chunked:
            extra += "transfer-encoding: chunked\r\n"
        head = b"HTTP/1.1 %d %b\r\n%bconnection: %b\r\ncontent-type: %b\r\n\r\n" % (
            status,
            reason(status),
            extra.encode("utf-8", "surrogateescape"),
            b"keep-alive" if self._running_keep_alive else b"close",
            content_type.encode("latin-1"),
        )
        self._streaming = True
        await self.write_body(head)
        stream = _Stream(self, chunked)
        if request.method == "HEAD":
            stream.discard()  # a HEAD answer has no body
        return stream

    async def write_body(self, data: bytes | memoryview) -> None:
        """Write part of a streamed response once the client has read what was sent before."""
        if not self._can_write.is_set():
            await self._can_write.wait()
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        transport.write(data)

    # --- refusals, flow control, closing -----------------------------------------------------
    def _send_continue(self) -> None:
        """``100 Continue`` for the request whose body is awaited, once it is its turn."""
        if self._continue_pending and self._task is None and not self._queue:
            self._continue_pending = False
            if self.transport is not None:
                self.transport.write(CONTINUE)

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` once the requests before it are answered, then close."""
        self._done_reading = True
        self._head_since = 0.0
        self._in_body = False
        self._body_direct = self._body_left = 0
        self._body = []
        self._direct = None
        if self._task is None and not self._queue:
            self._answer_and_close(status, message)
        else:
            self._queue.append((Refused(status, message), False, 0))

    def _answer_and_close(self, status: int, message: str) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(error_bytes(status, message, keep_alive=False))
        self._close()

    def _pause_reading(self) -> None:
        if self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # --- what the server asks ----------------------------------------------------------------
    def waiting_for_client(self) -> bool:
        """Nothing runs for this connection: it is idle or the client is still sending."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        return self._task is None and not self._queue

    @property
    def idle_since(self) -> float:
        """When this connection last had news (a byte from the client or a finished answer)."""
        return max(self._idle_since, self._last_data)

    def close_if_idle(self) -> bool:
        """Close the connection when no request is running, waiting or arriving."""
        if self._task is not None or self._queue or self._head_since or self._in_body:
            return False
        self._close()
        return True

    def check_timeouts(self, now: float) -> None:
        """Called by the server's timer (see the module docstring)."""
        if self.transport is None:
            return
        limits = self.server.limits
        if self._task is not None:
            if now - self._task_since > limits.response_timeout_s and not self._streaming:
                self._task.cancel()
                self._task = None
                self._queue.clear()
                self._answer_and_close(503, "Response Timeout")
            return
        if self._queue:
            return
        if self._head_since:
            if now - self._head_since > limits.header_timeout_s:
                self._answer_and_close(408, "Request Timeout")
        elif self._in_body:
            if now - self._last_data > limits.body_timeout_s:
                self._answer_and_close(408, "Request Timeout")
        elif now - self.idle_since > limits.keepalive_timeout_s:
            self._close()


def _request_parser(connection: HttpConnection) -> httptools.HttpRequestParser:
    """llhttp for one connection; a request with both ``Transfer-Encoding: chunked`` and
    ``Content-Length`` is parsed by its chunks (see ``on_headers_complete``), not refused."""
    parser = httptools.HttpRequestParser(connection)
    parser.set_dangerous_leniencies(lenient_chunked_length=True)
    return parser


def _refusal(exc: BaseException) -> Refused:
    """The answer to what the parser raised (a callback's Refused, or malformed input: 400)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, Refused):
            return seen
        seen = seen.__context__ or seen.__cause__
    if isinstance(exc, httptools.HttpParserError) and str(exc):
        return Refused(400, f"Malformed HTTP request: {exc}")  # llhttp's reason
    return Refused(400, "Bad Request")
