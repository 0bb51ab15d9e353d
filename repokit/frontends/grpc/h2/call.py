"""One gRPC call on one HTTP/2 stream: its request messages, its handler's task, its response.

A unary request starts the handler once the client has ended its side (one message); a
streaming request starts it with the headers and hands it the messages through an async
iterator as they arrive. The handler's result goes out through the connection
(:meth:`.connection.Connection.send_message` / ``finish``), which owns flow control. A client
RST_STREAM, an expired ``grpc-timeout`` or the connection's end cancels the handler's task,
as grpc.aio does.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import grpc

from repokit.frontends.grpc.h2.context import OK, CallContext
from repokit.frontends.grpc.h2.headers import CallHead, Metadata
from repokit.frontends.grpc.h2.messages import (
    Buffer,
    CompressionError,
    MessageReader,
    MessageTooLarge,
    decompress,
)

if TYPE_CHECKING:
    from repokit.frontends.grpc.h2.connection import Connection

_log = logging.getLogger(__name__)
_CANCELLED = grpc.StatusCode.CANCELLED


class CallDetails:
    """``grpc.HandlerCallDetails`` for interceptors."""

    __slots__ = ("invocation_metadata", "method")

    def __init__(self, method: str, invocation_metadata: Metadata) -> None:
        self.method = method
        self.invocation_metadata = invocation_metadata


class Call(CallContext):
    __slots__ = (
        "conn",
        "drained",
        "encoding",
        "error",
        "handler",
        "head",
        "head_sent",
        "heard",
        "held_bytes",
        "id",
        "input_ended",
        "messages",
        "pending",
        "pending_trailers",
        "reader",
        "recv_credit",
        "send_window",
        "task",
        "timer",
        "waiter",
    )

    def __init__(self, conn: Connection, stream_id: int, head: CallHead, handler: Any) -> None:
        loop = conn.loop
        deadline = None if head.timeout is None else loop.time() + head.timeout
        super().__init__(loop, deadline)
        self.conn = conn
        self.id = stream_id
        self.head = head
        self.handler = handler
        self.reader = MessageReader(conn.max_receive)
        self.messages: deque[Buffer] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.input_ended = False
        self.heard = False  # a DATA frame or the end of the client's side came
        self.error: tuple[grpc.StatusCode, str] | None = None  # a request the call refuses
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        if deadline is not None:
            self.timer = loop.call_at(deadline, self.deadline_exceeded)
        # sending: flow control and our side's state
        self.send_window = conn.peer_initial_window
        self.pending: deque[memoryview | bytes] = deque()
        self.pending_trailers: bytes | None = None
        self.drained: asyncio.Future[None] | None = None
        self.head_sent = False
        self.encoding = conn.encoding_for(head)
        # receiving: stream window credit to give back, bytes received but not yet taken
        self.recv_credit = 0
        self.held_bytes = 0

    # --- the context's reads --------------------------------------------------------------
    def invocation_metadata(self) -> Metadata:
        return self.head.metadata

    def peer(self) -> str:
        return self.conn.peer

    # --- request side (called by the connection) -------------------------------------------
    def on_data(self, chunk: memoryview) -> None:
        if not self.heard:
            self.heard_from_client()
        if self.error is not None or self.finished:
            return
        out: list[tuple[int, Buffer]] = []
        try:
            self.reader.feed(chunk, out)
        except MessageTooLarge as exc:
            self.refuse(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            return
        if out:
            self._take(out)

    def direct_target(self, limit: int) -> memoryview | None:
        """Where the socket may read up to ``limit`` bytes of this call's DATA directly: the
        rest of a large message's buffer (None when no large message is under way)."""
        if self.error is not None or self.finished:
            return None
        return self.reader.direct_target(limit)

    def on_direct(self, size: int) -> None:
        """``size`` bytes were read into :meth:`direct_target`'s view."""
        out: list[tuple[int, Buffer]] = []
        self.reader.advance(size, out)
        if out:
            self._take(out)

    def _take(self, out: list[tuple[int, Buffer]]) -> None:
        for flag, message in out:
            if flag:
                try:
                    message = decompress(message, self.head.encoding, self.conn.max_receive)
                except MessageTooLarge as exc:
                    self.refuse(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
                    return
                except CompressionError as exc:
                    encoding = self.head.encoding
                    if encoding == "identity":
                        self.refuse(
                            grpc.StatusCode.INTERNAL,
                            "Compressed message without grpc-encoding",
                        )
                    elif encoding in ("gzip", "deflate"):
                        self.refuse(grpc.StatusCode.INTERNAL, str(exc))
                    else:
                        self.refuse(grpc.StatusCode.UNIMPLEMENTED, str(exc))
                    return
            if self.handler.request_streaming:
                self.held_bytes += len(message)
                self.messages.append(message)
                self._wake()
            elif self.messages:
                self.refuse(grpc.StatusCode.INTERNAL, "More than one request message")
                return
            else:
                self.messages.append(message)

    def heard_from_client(self) -> None:
        self.heard = True
        if self.pending_trailers is not None and not self.pending:
            self.conn.release_status(self)

    def on_end_input(self) -> None:
        if not self.heard:
            self.heard_from_client()
        self.input_ended = True
        if self.error is not None or self.finished:
            return
        if self.reader.partial:
            self.refuse(grpc.StatusCode.INTERNAL, "Incomplete request message")
            return
        if self.handler.request_streaming:
            self._wake()
        elif not self.messages:
            self.refuse(grpc.StatusCode.INTERNAL, "Missing request message")
        else:
            self.start(self.messages.popleft())

    def refuse(self, code: grpc.StatusCode, message: str) -> None:
        """End the call with ``code`` (its handler, if it runs, is cancelled)."""
        self.error = (code, message)
        self._code, self._details = code, message
        self.messages.clear()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.conn.finish(self)

    def start(self, request: Buffer | None) -> None:
        self.task = self.loop_task(self._run(request))

    def loop_task(self, coro: Any) -> asyncio.Task[None]:
        return self.conn.loop.create_task(coro)

    def on_reset(self) -> None:
        """The client reset the stream (or the connection ended): cancel the handler."""
        if self.finished:
            return
        self.was_cancelled = True
        self._code, self._details = _CANCELLED, "Cancelled"
        self.close()
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def deadline_exceeded(self) -> None:
        self.timer = None
        if self.finished:
            return
        self.was_cancelled = True
        self._code, self._details = grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.conn.finish(self)

    def close(self) -> None:
        """Our side is done (trailers sent or stream reset)."""
        if self.finished:
            return
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.pending.clear()
        self._wake()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self._run_callbacks()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # --- the handler -------------------------------------------------------------------------
    async def read(self) -> Any:
        """The next request message (deserialized), or grpc.aio.EOF."""
        while not self.messages:
            if self.input_ended or self.finished:
                return grpc.aio.EOF
            self.waiter = self.conn.loop.create_future()
            await self.waiter
        message = self.messages.popleft()
        self.held_bytes -= len(message)
        self.conn.give_credit(self, 0)
        parse = self.handler.request_deserializer
        return message if parse is None else parse(message)

    async def _requests(self) -> Any:
        while True:
            message = await self.read()
            if message is grpc.aio.EOF:
                return
            yield message

    async def write(self, message: Any) -> None:
        if self.finished:
            raise asyncio.CancelledError()
        serialize = self.handler.response_serializer
        self.conn.send_message(self, message if serialize is None else serialize(message))
        if self.pending or self.conn.paused:
            await self.conn.writable(self)

    async def send_initial_metadata(self, initial_metadata: Metadata) -> None:
        self.conn.send_head(self, tuple(initial_metadata))

    async def _run(self, request: Buffer | None) -> None:
        handler = self.handler
        try:
            if self.conn.server.interceptors:
                handler = self.handler = await self.conn.server.intercept(self)
                if handler is None:
                    self._code, self._details = grpc.StatusCode.UNIMPLEMENTED, "Method not found!"
                    self.conn.finish(self)
                    return
            if handler.request_streaming:
                argument: Any = self._requests()
            else:
                parse = handler.request_deserializer
                argument = request if parse is None else parse(request)
            if handler.response_streaming:
                behaviour = handler.stream_stream or handler.unary_stream
                result = behaviour(argument, self)
                if inspect.isasyncgen(result) or hasattr(result, "__aiter__"):
                    async for response in result:
                        await self.write(response)
                elif inspect.isawaitable(result):
                    await result
            else:
                behaviour = handler.unary_unary or handler.stream_unary
                result = behaviour(argument, self)
                if inspect.isawaitable(result):
                    result = await result
                if self._code == OK and not self.finished:
                    serialize = handler.response_serializer
                    body = result if serialize is None else serialize(result)
                    self.conn.send_message(self, body)
        except grpc.aio.AbortError:
            pass
        except asyncio.CancelledError:
            if self.finished or self.was_cancelled:
                return
            raise
        except Exception as exc:  # as grpc.aio: UNKNOWN, the exception named, no traceback
            _log.exception("gRPC handler %s failed", self.head.path)
            self._code = grpc.StatusCode.UNKNOWN
            self._details = f"Unexpected {type(exc)}: {exc}"
        self.conn.finish(self)
