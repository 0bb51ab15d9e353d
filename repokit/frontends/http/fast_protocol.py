"""Sanic's HTTP/1.1 protocol with a protocol lane for well-formed infer requests.

Why: for small infer requests, Sanic's own request machinery (its pure-Python header parser,
the ``Request`` and ``HTTPResponse`` objects, the connection task's stage bookkeeping, the
header formatting) cost more server time than the whole core (figures: benchmarks/README.md,
"Measurements that shaped the code"). Inference is the one endpoint whose speed matters, so
this protocol, a subclass of Sanic's ``HttpProtocol`` handed to
``create_server(protocol=...)``, answers it directly and leaves everything else to Sanic.

A connection starts in the protocol lane. Each complete request in the buffer is looked at once:

* ``POST /v2/models/<name>[/versions/<v>]/infer HTTP/1.1`` with one ``Content-Length``, no
  ``Transfer-Encoding``, ``Content-Encoding``, ``Expect`` or ``Upgrade``, no ``Connection``
  other than keep-alive, no ``Accept-Encoding`` that asks for compression, and a plain path
  (no ``%`` or ``?``) runs here: the body goes through the same
  :meth:`Endpoints.run_infer <repokit.frontends.http.endpoints.Endpoints.run_infer>` as
  Sanic's route, and the response is written with the same status, body and headers (minus
  Sanic's empty ``alt-svc``);
* anything else (other endpoints, compression, chunked bodies, HTTP/1.0, oversized or
  malformed heads, restricted APIs, access logging, and every request while OpenTelemetry
  tracing is on, since its ``traceparent`` header matters) is handed to Sanic's own machinery
  as the raw bytes, together with everything after it, and Sanic answers it exactly as before.
  Triton-mode tracing samples lane requests here: a traced one records its receive and send
  times around the lane's work.

Requests of one connection are answered in order: the protocol lane serves one request at a time
and hands over to Sanic only when its own response is written; the connection comes back to
the protocol lane when Sanic is idle again with nothing buffered. A client that disconnects cancels
the running request (the model sees ``is_cancelled()``), and Sanic's timeouts still apply: a
request in the protocol lane counts as a request in progress, not as an idle keep-alive
connection.

Backpressure: requests pipelined behind the running one wait in the connection's buffer; once
:data:`PIPELINED_BYTES_LIMIT` bytes wait there, the connection stops reading (the client's
sends block in its kernel buffers) until the lane has taken requests out of it again. The lane
writes the next response only once the client has read the previous ones (below the transport's
write high-water mark), so a client that sends without reading holds at most this much plus
one response in the server. Sanic's own lane stops at ``REQUEST_BUFFER_SIZE``.

Slow and idle connections (:mod:`repokit.frontends.http.connection_limits`): a request head
must arrive within the header timeout of its first byte, a body may pause at most the body
timeout, in either lane (Sanic's own request timeout only counts silence, and it reads bodies
under its response timeout); past the connection limit a new connection closes the one idle
or sending a partial request the longest.

What this relies on in Sanic (not its documented API, so pyproject.toml pins the Sanic and
sanic-routing release lines it was checked against, and
``tests/frontends/http/test_sanic_contract.py`` asserts that each item still exists with its
kind; when Sanic is upgraded, re-read these against the new sources and move the pin, the test
and this list together):

* subclassing ``sanic.server.protocols.http_protocol.HttpProtocol`` (the ``protocol=`` option
  of ``create_server`` is public, the class's insides are not), with ``__slots__`` of our own;
* its slots ``_time`` (Sanic's timeout clock: the lane refreshes it so that Sanic's checks see
  a request in progress), ``_task`` (Sanic's connection task: the lane starts it with
  ``connection_task()`` only when a connection first needs Sanic, and reads it to know
  whether Sanic's timeouts run), ``_callback_check_timeouts`` (the lane's timer sits there
  so that Sanic's ``close()`` cancels it), ``recv_buffer`` (the lane only returns a
  connection from Sanic when it is empty), and the settings ``request_max_size``,
  ``keep_alive_timeout``, ``request_timeout``, ``response_timeout``, ``connections``,
  ``transport``, ``loop``, ``app``;
* its methods ``connection_made`` / ``data_received`` / ``connection_lost`` /
  ``pause_writing`` / ``resume_writing`` (extended), ``check_timeouts``, ``close``,
  ``close_if_idle`` (extended or called), the property ``http`` (the connection's ``Http``,
  whose ``stage`` and ``request_body`` tell whether Sanic is idle or reading a body), and
  ``SanicProtocol.connection_made``, the generic setup that starts no connection task;
* ``Http.HEADER_MAX_SIZE``, the process-wide head limit Sanic derives from its config (a head
  over it goes to Sanic, which refuses it), ``Stage`` and ``sanic.helpers.STATUS_CODES``
  (reason phrases, so that status lines match Sanic's);
* in :mod:`repokit.frontends.runner`: ``Http.__touched__`` (set once Sanic's TOUCHUP rewrote
  ``Http``; a second TOUCHUP in one process fails) and the ``AsyncioServer`` handle of
  ``create_server(return_asyncio_server=True)``: ``server`` (the asyncio server), the
  ``connections`` set and the startup/stop hooks.

Nothing of sanic-routing is used directly; it is pinned because Sanic's routing of what the
lane hands over is part of the behaviour the tests compare.

The decision: keep Sanic for now. Every other endpoint, compression, chunked bodies, HTTP/1.0,
restricted APIs, access logs and Sanic's error pages stay Sanic's, and the lane answers with
the status, body and headers of Sanic's route (tests/frontends/http/test_fast_protocol.py):
the private surface above buys that for a small, pinned and tested contract. The alternative the
design leaves open is to own HTTP/1.1 as uvicorn does: one ``asyncio.Protocol`` over a C
parser, every endpoint dispatched through one router (``routing.Route``), so the lane *is*
the frontend and Sanic goes. That needs its own chunked bodies, ``Expect: 100-continue``,
HTTP/1.0 and keep-alive rules, compression negotiation, timeouts and error pages, and the
streaming endpoints (generate_stream) that now use Sanic's ``request.respond``, all proven
equal to today's answers before the switch.
"""

from __future__ import annotations

import asyncio
from time import monotonic as current_time
from typing import TYPE_CHECKING, Any

from sanic.helpers import STATUS_CODES
from sanic.http import Http, Stage
from sanic.server.protocols.base_protocol import SanicProtocol
from sanic.server.protocols.http_protocol import HttpProtocol

from repokit.core.tracing.setting import OTEL_MODE
from repokit.core.tracing.trace import Trace
from repokit.errors import RepokitError
from repokit.frontends.http.compression import choose_response_encoding
from repokit.frontends.http.connection_limits import ConnectionLimits
from repokit.frontends.http.responses import error_body
from repokit.frontends.http.routing import Endpoint, Route
from repokit.frontends.status import http_status

if TYPE_CHECKING:
    from repokit.frontends.http.app import HttpFrontend

_END_OF_HEAD = b"\r\n\r\n"
# bodies at least this large are received chunk by chunk and joined once
COLLECT_BODY_BYTES = 1 << 16
# a connection stops reading while this many bytes of pipelined requests wait behind the
# running one (a single request's large body is collected apart, up to the input size limit)
PIPELINED_BYTES_LIMIT = 1 << 20
# header names that send a request to Sanic (it implements what they ask for)
_SANIC_HEADERS = frozenset(
    {b"transfer-encoding", b"content-encoding", b"expect", b"upgrade", b"connection"}
)


class FastInfer:
    """A parsed infer request of the protocol lane."""

    __slots__ = ("body_end", "body_start", "header_length", "route")

    def __init__(self, route: Route, body_start: int, body_end: int, header_length: str | None):
        self.route = route
        self.body_start = body_start
        self.body_end = body_end
        self.header_length = header_length


def parse_infer_head(
    frontend: HttpFrontend, buffer: bytearray, end_of_head: int, max_body: int
) -> FastInfer | None:
    """The infer request whose head is ``buffer[:end_of_head]``, or None when Sanic must
    handle the request (see the module docstring for what qualifies)."""
    lines = bytes(buffer[:end_of_head]).split(b"\r\n")
    request_line = lines[0].split(b" ")
    if len(request_line) != 3 or request_line[0] != b"POST" or request_line[2] != b"HTTP/1.1":
        return None
    target = request_line[1]
    if b"%" in target or b"?" in target or not target.isascii():
        return None
    route = frontend.route(target.decode("ascii"))
    if route is None or route.endpoint is not Endpoint.MODEL_INFER:
        return None
    content_length = -1
    header_length: str | None = None
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        name = name.lower()
        if name == b"content-length":
            value = value.strip()
            if content_length >= 0 or not value.isdigit():
                return None
            content_length = int(value)
        elif name == b"inference-header-content-length":
            if header_length is None:  # the first one counts, as in Sanic's headers.get()
                header_length = value.strip().decode("latin-1")
        elif name == b"accept-encoding":
            accepted = value.decode("latin-1").strip()
            if choose_response_encoding(accepted) != "identity":
                return None
        elif name in _SANIC_HEADERS and (
            name != b"connection" or value.strip().lower() != b"keep-alive"
        ):
            return None
    if content_length < 0 or content_length > max_body:
        return None
    start = end_of_head + len(_END_OF_HEAD)
    return FastInfer(route, start, start + content_length, header_length)


_HEAD_FORMAT = (
    b"HTTP/1.1 %d %s\r\n%bcontent-length: %d\r\nconnection: keep-alive\r\ncontent-type: %b\r\n\r\n"
)


def response_head(
    status: int, content_type: str, size: int, header_length: int | None = None
) -> bytes:
    """The status line and headers of a keep-alive response with a ``size``-byte body."""
    extra = (
        b"" if header_length is None else b"Inference-Header-Content-Length: %d\r\n" % header_length
    )
    reason = STATUS_CODES.get(status, b"UNKNOWN")
    return _HEAD_FORMAT % (status, reason, extra, size, content_type.encode("latin-1"))


def error_parts(status: int, message: str) -> list[bytes | memoryview]:
    """Triton's ``{"error": "<message>"}`` response."""
    body = error_body(message)
    return [response_head(status, "application/json", len(body)) + body]


class FastInferProtocol(HttpProtocol):
    """``HttpProtocol`` that serves plain infer requests itself (see the module docstring)."""

    __slots__ = (
        "_body_missing",
        "_body_parts",
        "_body_request",
        "_fast_buffer",
        "_fast_since",
        "_fast_task",
        "_frontend",
        "_head_since",
        "_lane_can_write",
        "_last_data",
        "_limits",
        "_reading_paused",
        "_sanic_owned",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        frontend: HttpFrontend | None = getattr(self.app.ctx, "frontend", None)
        self._limits = frontend.limits if frontend is not None else ConnectionLimits()
        self._head_since = 0.0  # when Sanic's lane started receiving the current head
        self._last_data = 0.0  # when the protocol lane last received bytes
        # restricted APIs and access logs are Sanic's business: no protocol lane then
        if frontend is not None and (frontend.restrictions or self.app.config.ACCESS_LOG):
            frontend = None
        self._frontend = frontend
        self._fast_buffer = bytearray()
        self._fast_since = 0.0
        # a large body being received: its chunks (joined once), the bytes still missing
        self._body_parts: list[bytes] | None = None
        self._body_missing = 0
        self._body_request: FastInfer | None = None
        self._fast_task: asyncio.Task[None] | None = None
        self._sanic_owned = frontend is None
        self._reading_paused = False  # by the lane's backpressure (Sanic pauses on its own)
        # the transport is below its write high-water mark (pause_writing/resume_writing)
        self._lane_can_write = asyncio.Event()
        self._lane_can_write.set()

    # --- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        """Sanic's connection setup, but its connection task (the Http object, the request
        loop, the timeout checks) starts only when the connection first needs Sanic: a burst
        of new connections reaches the models sooner (a batch forms from what arrives within
        the queue delay)."""
        if not self._admit():
            transport.abort()
            return
        if self._frontend is None:
            super().connection_made(transport)  # type: ignore[no-untyped-call]
            return
        # the generic setup (write limits, connection set, conn_info), without the task
        SanicProtocol.connection_made(self, transport)  # type: ignore[no-untyped-call]
        self.recv_buffer = bytearray()
        self._time = current_time()
        self._callback_check_timeouts = self.loop.call_later(
            self._timeout_interval(), self._lane_timeouts
        )

    def data_received(self, data: bytes) -> None:
        if self._sanic_owned:
            http = self.http
            if self._frontend is None or http is None or http.stage is not Stage.IDLE:
                super().data_received(data)
                return
            if self.recv_buffer:
                super().data_received(data)
                return
            self._sanic_owned = False  # Sanic is idle with nothing buffered: back to the lane
        now = current_time()
        self._time = self._last_data = now
        if self._body_parts is not None:
            self._collect_body(data)
            return
        buffer = self._fast_buffer
        if not buffer:
            self._fast_since = now
        buffer += data
        if self._fast_task is None:
            self._next_request()
        if len(buffer) >= PIPELINED_BYTES_LIMIT and not self._reading_paused:
            transport = self.transport
            if transport is not None and not self._sanic_owned:
                self._reading_paused = True
                transport.pause_reading()

    def pause_writing(self) -> None:
        self._lane_can_write.clear()
        super().pause_writing()  # type: ignore[no-untyped-call]

    def resume_writing(self) -> None:
        self._lane_can_write.set()
        super().resume_writing()  # type: ignore[no-untyped-call]

    def connection_lost(self, exc: Exception | None) -> None:
        task = self._fast_task
        self._fast_task = None
        if task is not None:
            task.cancel()
        # what the connection buffered goes now, not when the protocol object is collected
        self._fast_buffer = bytearray()
        self._body_parts = None
        self._body_request = None
        super().connection_lost(exc)  # type: ignore[no-untyped-call]

    # --- Sanic's connection management --------------------------------------------------------
    def _admit(self) -> bool:
        """Room for this new connection: past the limit, the connection idle (or sending a
        partial request) the longest is closed; False when every one is running a request."""
        connections = self.connections
        if len(connections) < self._limits.max_connections:
            return True
        victim: FastInferProtocol | None = None
        for connection in connections:
            if (
                isinstance(connection, FastInferProtocol)
                and connection.waiting_for_client()
                and (victim is None or connection._time < victim._time)
            ):
                victim = connection
        if victim is None:
            return False
        victim.close()
        return True

    def waiting_for_client(self) -> bool:
        """Nothing runs for this connection: it is idle or the client is still sending."""
        if self._fast_task is not None or self.transport is None or self.transport.is_closing():
            return False
        if not self._sanic_owned or self._task is None:
            return True
        http = self.http
        if http is None:
            return True
        stage = http.stage
        return stage in (Stage.IDLE, Stage.REQUEST) or bool(
            stage is Stage.HANDLER and http.request_body
        )

    def check_timeouts(self) -> None:
        """A request in the protocol lane is in progress: the keep-alive timeout does not apply to
        it; a partly received one gets the header or body timeout. In Sanic's lane the head
        gets the header timeout from its first byte and a body the body timeout."""
        now = current_time()
        if self._fast_task is not None:
            self._time = now
        elif self._partial():
            if self._lane_expired(now):
                self._timed_out()
                return
            self._time = now
        elif self._sanic_timed_out(now):
            return
        super().check_timeouts()  # type: ignore[no-untyped-call]

    def _sanic_timed_out(self, now: float) -> bool:
        http = self.http
        task = self._task
        if http is None or task is None:
            return False
        stage = http.stage
        if stage is Stage.REQUEST:
            if not self._head_since:
                self._head_since = now
            late = now - self._head_since > self._limits.header_timeout_s
        else:
            self._head_since = 0.0
            late = bool(
                stage is Stage.HANDLER
                and http.request_body
                and now - self._time > self._limits.body_timeout_s
            )
        if late:  # no response has started: answer 408 and close (the task ends with it)
            self._timed_out()
        return late

    def _lane_expired(self, now: float) -> bool:
        """A partial request of the protocol lane ran out of time (head: since its first byte;
        body: since its last byte)."""
        if self._body_parts is not None:
            return now - self._last_data > self._limits.body_timeout_s
        return now - self._fast_since > self._limits.header_timeout_s

    def _timed_out(self) -> None:
        """Sanic's answer to a request that timed out, then close."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            for part in error_parts(408, "Request Timeout"):
                transport.write(part)
        self.close()

    def _timeout_interval(self) -> float:
        limits = self._limits
        shortest = min(
            self.keep_alive_timeout,
            self.request_timeout,
            self.response_timeout,
            limits.header_timeout_s,
            limits.body_timeout_s,
        )
        return float(max(0.1, shortest / 2))

    def _lane_timeouts(self) -> None:
        """Sanic's keep-alive and request timeouts for a connection Sanic has not seen yet
        (once its connection task runs, its own checks take over)."""
        self._callback_check_timeouts = None
        if self.transport is None:
            return
        if self._task is not None:  # Sanic's connection task runs: its checks from now on
            self.check_timeouts()
            return
        if self._fast_task is None:
            now = current_time()
            if self._partial():
                if self._lane_expired(now):
                    self._timed_out()
                    return
            elif now - self._time > self.keep_alive_timeout:
                self.close()
                return
        self._callback_check_timeouts = self.loop.call_later(
            self._timeout_interval(), self._lane_timeouts
        )

    def close_if_idle(self) -> bool:
        if self._fast_task is not None or self._partial():
            return False
        return bool(super().close_if_idle())

    def _partial(self) -> bool:
        """Part of a request has arrived."""
        return bool(self._fast_buffer) or self._body_parts is not None

    # --- the protocol lane -------------------------------------------------------------------
    def _next_request(self) -> None:
        """Start the first complete request of the buffer, or hand the buffer to Sanic."""
        buffer = self._fast_buffer
        frontend = self._frontend
        assert frontend is not None
        end_of_head = buffer.find(_END_OF_HEAD)
        if end_of_head < 0 or end_of_head >= Http.HEADER_MAX_SIZE:
            if end_of_head >= 0 or len(buffer) > Http.HEADER_MAX_SIZE:
                self._hand_to_sanic()  # Sanic refuses an oversized head (413)
            return
        parsed = parse_infer_head(frontend, buffer, end_of_head, self.request_max_size)
        tracing = frontend.service.tracing
        if parsed is None or (tracing.enabled and tracing.mode == OTEL_MODE):
            # opentelemetry mode: Sanic's route reads the request's traceparent header
            self._hand_to_sanic()
            return
        if len(buffer) < parsed.body_end:  # the body is still arriving
            if parsed.body_end - parsed.body_start >= COLLECT_BODY_BYTES:
                with memoryview(buffer) as view:
                    self._body_parts = [view[parsed.body_start :].tobytes()]
                self._body_missing = parsed.body_end - len(buffer)
                self._body_request = parsed
                buffer.clear()
            return
        with memoryview(buffer) as view:  # one copy of the body, not two
            body = view[parsed.body_start : parsed.body_end].tobytes()
        if parsed.body_end == len(buffer):
            buffer.clear()
        else:
            del buffer[: parsed.body_end]
            self._fast_since = current_time()
        self._fast_task = self.loop.create_task(self._serve(frontend, parsed, body))

    def _collect_body(self, data: bytes) -> None:
        """A chunk of a large body: kept as it is until the body is complete, then joined in
        one copy (growing one buffer would copy it again and again)."""
        parts = self._body_parts
        parsed = self._body_request
        assert parts is not None and parsed is not None
        missing = self._body_missing
        if len(data) < missing:
            parts.append(data)
            self._body_missing = missing - len(data)
            return
        parts.append(data if len(data) == missing else data[:missing])
        self._body_parts = None
        self._body_request = None
        body = b"".join(parts)
        if len(data) > missing:  # what the client sent after the body (pipelining)
            self._fast_buffer += data[missing:]
            self._fast_since = current_time()
        frontend = self._frontend
        assert frontend is not None
        self._fast_task = self.loop.create_task(self._serve(frontend, parsed, body))

    def _resume_reading(self) -> None:
        """Read again once the pipelined requests waiting fell below the limit."""
        if self._reading_paused and len(self._fast_buffer) < PIPELINED_BYTES_LIMIT:
            self._reading_paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    def _hand_to_sanic(self) -> None:
        data = bytes(self._fast_buffer)
        self._fast_buffer.clear()
        self._sanic_owned = True
        if self._reading_paused:  # Sanic reads (and pauses) as it needs from here on
            self._reading_paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
        if self._task is None and self.transport is not None:
            self._task = self.loop.create_task(self.connection_task())  # type: ignore[no-untyped-call]
        super().data_received(data)

    async def _serve(self, frontend: HttpFrontend, parsed: FastInfer, body: bytes) -> None:
        trace = None
        tracing = frontend.service.tracing
        if tracing.enabled:  # triton mode here (opentelemetry requests take Sanic's route)
            trace = tracing.sample(parsed.route.model)
            if trace is not None:
                trace.stamp("HTTP_RECV_START")
        try:
            parts = await self._answer(frontend, parsed, body, trace)
            transport = self.transport
            self._fast_task = None
            if transport is None or transport.is_closing():
                return
            if trace is not None:
                trace.stamp("HTTP_SEND_START")
            for part in parts:
                transport.write(part)
            if trace is not None:
                trace.stamp("HTTP_SEND_END")
        finally:
            if trace is not None:
                trace.finish()
        self._time = current_time()
        if self._fast_buffer:
            if not self._lane_can_write.is_set():  # a slow reader: queue no more responses
                await self._lane_can_write.wait()
            if self._fast_task is None and self.transport is not None:
                self._next_request()
                self._resume_reading()

    @staticmethod
    async def _answer(
        frontend: HttpFrontend, parsed: FastInfer, body: bytes, trace: Trace | None = None
    ) -> list[bytes | memoryview]:
        ops = frontend.endpoints
        route = parsed.route
        try:
            version = ops.infer_version(route)
            encoded = await ops.run_infer(route.model, version, body, parsed.header_length, trace)
        except RepokitError as exc:
            return error_parts(http_status(exc.code), exc.message)
        except Exception as exc:  # a bug must still answer, as Sanic's error handler does
            return error_parts(500, f"internal error: {type(exc).__name__}: {exc}")
        head = encoded.head
        if encoded.header_length is None:
            return [response_head(200, encoded.content_type, len(head)) + head]
        blobs = encoded.blobs
        size = encoded.size
        first = response_head(200, encoded.content_type, size, encoded.header_length) + head
        return [first, *blobs]
