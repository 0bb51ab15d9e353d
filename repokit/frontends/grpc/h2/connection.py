"""One HTTP/2 connection of the gRPC server: frame parsing, settings, flow control both ways,
PING, GOAWAY, RST_STREAM, and the writes of every call on it.

Bytes from the socket are parsed where they lie: a DATA frame's payload goes to its call as a
view of the received bytes (:class:`.messages.MessageReader` copies it at most once), even
when the frame spans reads; only a partial frame header or a partial control frame is kept
for the next read. Once a large message is under way, the socket reads straight into its
buffer: with large DATA frames each payload alone (its head read apart), with small ones
(16 KiB: nghttp2, grpc-go, grpc-java) many frames at once, heads and all, whose payloads are
then moved down over the heads in place (:meth:`Connection._unpack`). Writes are collected and
handed to the transport once per loop iteration.

Flow control: we advertise a per-stream window of :data:`STREAM_WINDOW` and open the
connection window to :data:`CONNECTION_WINDOW`. Credit for a stream is given back as its
bytes arrive, except that a streaming call's complete messages count until its handler takes
them, so a slow handler holds at most one window of its stream's requests. Sending honours the
peer's windows and MAX_FRAME_SIZE; a call whose data does not fit waits (its handler too, for
a stream) until the peer's WINDOW_UPDATE or the transport's resume_writing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import TYPE_CHECKING, Any

import grpc

from repokit.frontends.grpc.h2 import frames as f
from repokit.frontends.grpc.h2.call import Call
from repokit.frontends.grpc.h2.headers import (
    PLAIN_HEAD,
    TRAILERS_OK,
    TRAILERS_ONLY_HEAD,
    CallHead,
    HeadDecoder,
    Metadata,
    response_head,
    trailers,
)
from repokit.frontends.grpc.h2.messages import compress, prefix, response_encoding
from repokit.frontends.grpc.h2.ping_policy import PingPolicy
from repokit.protocol.grpc_raw import MessageParts, message_bytes

if TYPE_CHECKING:
    from repokit.frontends.grpc.h2.server import NativeServer

_log = logging.getLogger(__name__)

STREAM_WINDOW = 4 << 20
CONNECTION_WINDOW = 64 << 20
RECEIVE_MAX_FRAME = 1 << 20  # SETTINGS_MAX_FRAME_SIZE we advertise
RECEIVE_BUFFER = 256 * 1024  # one read into our own buffer
# A large message's next DATA frame is read head apart, payload straight into the message, only
# when the client's frames are at least this large: with smaller ones (16 KiB: nghttp2, h2load,
# most HTTP/2 stacks) two reads per frame cost more than reading many frames at once into the
# message and moving their payloads down over their heads (Connection._unpack).
DIRECT_FRAME_MIN = 64 * 1024
STATUS_HOLD = 0.1  # seconds a stream's early failure waits for the client's first message
_WRITE_JOIN_LIMIT = 256 * 1024  # smaller batches are joined into one write
_WRITE_JOIN_PARTS = 64  # ... when they have at most this many parts (more: a large message's)

# the methods whose responses --grpc-infer-response-compression-level compresses
COMPRESSED_METHODS = frozenset(
    {
        "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ModelStreamInfer",
    }
)


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: NativeServer) -> None:
        self.server = server
        self.loop = server.loop
        self.max_receive = server.max_receive
        self.max_send = server.max_send
        self.transport: Any = None
        self.peer = ""
        self.calls: dict[int, Call] = {}
        self.last_stream = 0
        self.closing = False  # GOAWAY sent
        self.closed = False
        self.paused = False
        # receiving
        self._leftover = b""
        self._receive = bytearray(RECEIVE_BUFFER)
        self._receive_view = memoryview(self._receive)
        self._direct: Call | None = None  # the call the last get_buffer read for
        self._bulk: Call | None = None  # the call of the last DATA frame, a large message open
        # the call of the last DATA frame when it was small and a large message is open: the
        # next reads go into that message, frames and all (see _unpack)
        self._pack: Call | None = None
        self._packing: Call | None = None  # the call the last get_buffer gave a packed read
        self._pack_view: memoryview | None = None  # ... and where that read went
        self._preface = False
        self._settings_seen = False
        self._decoder = HeadDecoder()
        self._continuing: tuple[int, int, list[bytes]] | None = None
        self._data_left = 0
        self._data_frame = 0  # the length of the DATA frame under way
        self._data_call: Call | None = None
        self._data_end = False
        self._conn_credit = 0
        # sending
        self.peer_initial_window = f.DEFAULT_WINDOW
        self.send_window = f.DEFAULT_WINDOW
        self.max_frame = f.DEFAULT_MAX_FRAME
        self._blocked: dict[Call, None] = {}
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_timeout: asyncio.TimerHandle | None = None
        self._pings = PingPolicy(
            server.min_recv_ping_interval,
            server.max_ping_strikes,
            server.keepalive_permit_without_calls,
            max_sent_without_data=server.max_pings_without_data,
        )
        self._age: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            family = "ipv6" if ":" in str(peer[0]) else "ipv4"
            self.peer = f"{family}:{peer[0]}:{peer[1]}"
        settings = {
            f.MAX_CONCURRENT_STREAMS: self.server.max_concurrent_streams,
            f.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            f.MAX_FRAME_SIZE: RECEIVE_MAX_FRAME,
        }
        self._write(f.settings_frame(settings))
        self._write(f.window_update(0, CONNECTION_WINDOW - f.DEFAULT_WINDOW))
        self.server.connections.add(self)
        self._schedule_keepalive()
        age = self.server.max_connection_age
        if age > 0:  # as grpc: GOAWAY once the connection is this old, the calls then drain
            self._age = self.loop.call_later(age * random.uniform(0.9, 1.1), self._aged)

    def _aged(self) -> None:
        self._age = None
        self.goaway()
        grace = self.server.max_connection_age_grace
        if grace > 0 and not self.closed:
            self._age = self.loop.call_later(grace, self.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._bulk = self._data_call = self._direct = self._pack = self._packing = None
        self._pack_view = None
        self.server.connections.discard(self)
        for timer in (self._keepalive, self._ping_timeout, self._age):
            if timer is not None:
                timer.cancel()
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call.on_reset()
        self._blocked.clear()
        self.server.call_ended()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._retry_blocked()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read goes: the rest of a large message under way when the read is
        inside its DATA frame (no copy of those bytes until the handler), else our buffer.
        With large frames, at a frame boundary inside such a message only the next frame
        header is read, so its payload can go to the message directly; with small frames the
        read goes into the message, frames and all, and :meth:`_unpack` takes the heads out."""
        self._direct = self._packing = None
        left = self._data_left
        leftover = self._leftover
        if leftover and (left or len(leftover) >= 9 or not self._preface):
            return self._receive_view  # a partial control frame or the preface
        if left:
            call = self._data_call
            if call is not None:
                if self._data_frame >= DIRECT_FRAME_MIN:
                    target = call.direct_target(left)
                    if target is not None:
                        self._direct = call
                        return target
                elif self._continuing is None:
                    target = call.direct_target(1 << 30)
                    if target is not None:
                        self._packing, self._pack_view = call, target
                        return target
        elif self._bulk is not None and not leftover:
            if self._bulk.direct_target(1 << 30) is not None:
                return self._receive_view[:9]
            self._bulk = None
        elif self._pack is not None and self._continuing is None:
            target = self._pack.direct_target(1 << 30)
            if target is not None:
                self._packing, self._pack_view = self._pack, target
                return target
            self._pack = None
        return self._receive_view

    def buffer_updated(self, nbytes: int) -> None:
        call = self._direct
        if call is None:
            packing = self._packing
            if packing is not None:
                view = self._pack_view
                self._packing = self._pack_view = None
                assert view is not None
                try:
                    self._unpack(packing, view, nbytes)
                except f.H2Error as error:
                    self.connection_error(error.code, error.message)
                return
            self.data_received(bytes(self._receive_view[:nbytes]))
            return
        self._direct = None
        self._data_left -= nbytes
        self._conn_credit += nbytes
        call.on_direct(nbytes)
        self.give_credit(call, nbytes)
        if not self._data_left:
            self._data_done()
        self._give_connection_credit()

    def _give_connection_credit(self) -> None:
        if self._conn_credit >= CONNECTION_WINDOW // 4:
            self._write(f.window_update(0, self._conn_credit))
            self._conn_credit = 0

    def data_received(self, data: bytes) -> None:
        if self._leftover:
            data = self._leftover + data
            self._leftover = b""
        try:
            self._parse(data)
        except f.H2Error as error:
            self.connection_error(error.code, error.message)
            return
        self._give_connection_credit()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def _unpack(self, call: Call, view: memoryview, nbytes: int) -> None:
        """A packed read: ``nbytes`` bytes of frames went into ``view``, the unfilled rest of
        ``call``'s message (at most what is left of it, so they are this message's frames and
        whatever came between them). Each DATA payload of the call is moved down over the frame
        heads before it, so the payloads lie in the message in order; the first frame of
        anything else (another stream, a control frame, a padded or oversized DATA frame) ends
        the walk, and it and the bytes after it are parsed from a copy as any read is. A head
        cut by the read's end waits in ``_leftover`` for the next read."""
        head = self._leftover
        self._leftover = b""
        write = pos = 0  # where payload goes, where the walk is
        taken = 0  # payload bytes given to the call's message so far
        credit = 0  # payload bytes not yet counted for flow control
        rest: bytes | None = None  # what the standard parse takes over
        while pos < nbytes:
            left = self._data_left
            if left:
                n = left if left <= nbytes - pos else nbytes - pos
                if pos != write:
                    view[write : write + n] = view[pos : pos + n]
                write += n
                pos += n
                credit += n
                self._data_left = left - n
                if self._data_left:
                    continue
                # the frame ended: the message and the credit first, then the frame's end
                # (END_STREAM starts the call, which needs the message whole)
                call.on_direct(write - taken)
                taken = write
                self._conn_credit += credit
                self.give_credit(call, credit)
                credit = 0
                self._data_done()
                if pos < nbytes and self._pack is not call:
                    rest = bytes(view[pos:nbytes])  # the call took its end, or is gone
                    break
                continue
            if head:
                need = 9 - len(head)
                if nbytes - pos < need:
                    self._leftover = head + bytes(view[pos:nbytes])
                    pos = nbytes
                    break
                frame_head = head + bytes(view[pos : pos + need])
                pos += need
                head = b""
            else:
                if nbytes - pos < 9:
                    self._leftover = bytes(view[pos:nbytes])
                    pos = nbytes
                    break
                frame_head = bytes(view[pos : pos + 9])
                pos += 9
            length = (frame_head[0] << 16) | (frame_head[1] << 8) | frame_head[2]
            stream = f.read_u32(frame_head, 5) & 0x7FFFFFFF
            flags = frame_head[4]
            if (
                frame_head[3] != f.DATA
                or stream != call.id
                or flags & f.PADDED
                or length > RECEIVE_MAX_FRAME
                or length == 0
            ):
                rest = frame_head + bytes(view[pos:nbytes])
                break
            self._begin_data(stream, flags, length)
            if self._data_call is not call:  # refused (DATA after END_STREAM): dropped
                rest = bytes(view[pos:nbytes])
                break
        if write != taken:
            call.on_direct(write - taken)
        if credit:
            self._conn_credit += credit
            self.give_credit(call, credit)
        if rest is not None:
            self.data_received(rest)
            return
        self._give_connection_credit()

    # --- parsing ----------------------------------------------------------------------------
    def _parse(self, data: bytes) -> None:
        pos, end = 0, len(data)
        if not self._preface:
            if end < len(f.PREFACE):
                if not f.PREFACE.startswith(data):
                    raise f.H2Error(f.PROTOCOL_ERROR, "bad HTTP/2 connection preface")
                self._leftover = data
                return
            if not data.startswith(f.PREFACE):
                raise f.H2Error(f.PROTOCOL_ERROR, "bad HTTP/2 connection preface")
            self._preface = True
            pos = len(f.PREFACE)
        view = memoryview(data)
        while pos < end:
            left = self._data_left
            if left:
                n = left if left <= end - pos else end - pos
                self._data_left = left - n
                self._conn_credit += n
                call = self._data_call
                if call is not None:
                    call.on_data(view[pos : pos + n])
                    self.give_credit(call, n)
                pos += n
                if not self._data_left:
                    self._data_done()
                continue
            if end - pos < 9:
                self._leftover = data[pos:]
                return
            length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
            kind = data[pos + 3]
            flags = data[pos + 4]
            stream = f.read_u32(data, pos + 5) & 0x7FFFFFFF
            if length > RECEIVE_MAX_FRAME:
                raise f.H2Error(f.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            if self._continuing is not None and kind != f.CONTINUATION:
                raise f.H2Error(f.PROTOCOL_ERROR, "expected CONTINUATION")
            if not self._settings_seen and kind != f.SETTINGS:
                raise f.H2Error(f.PROTOCOL_ERROR, "first frame is not SETTINGS")
            if kind == f.DATA and not flags & f.PADDED:
                pos += 9
                self._begin_data(stream, flags, length)
                if not length:
                    self._data_done()
                continue
            if end - pos - 9 < length:
                self._leftover = data[pos:]
                return
            payload = data[pos + 9 : pos + 9 + length]
            pos += 9 + length
            self._frame(kind, flags, stream, payload)

    def _begin_data(self, stream: int, flags: int, length: int) -> None:
        if stream == 0:
            raise f.H2Error(f.PROTOCOL_ERROR, "DATA on stream 0")
        call = self.calls.get(stream)
        if call is None:
            if stream > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, f"DATA on idle stream {stream}")
        elif call.input_ended:  # DATA after END_STREAM: a stream error
            self._write(f.rst_stream(stream, f.STREAM_CLOSED))
            self._reset(call)
            call = None
        self._data_call = call
        self._data_left = length
        self._data_frame = length
        self._data_end = bool(flags & f.END_STREAM)

    def _data_done(self) -> None:
        call = self._data_call
        self._data_call = None
        # frames as large as DIRECT_FRAME_MIN: the next one's head is read alone; smaller
        # ones: the next reads go into the message, frames and all (get_buffer)
        if self._data_frame >= DIRECT_FRAME_MIN:
            self._bulk, self._pack = call, None
        else:
            self._bulk, self._pack = None, call
        if call is not None and self._data_end:
            self._bulk = self._pack = None
            call.on_end_input()

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == f.HEADERS:
            if stream == 0 or not stream & 1:
                raise f.H2Error(f.PROTOCOL_ERROR, f"HEADERS on stream {stream}")
            block = _unpad(payload, flags)
            if flags & f.PRIORITY_FLAG:
                block = block[5:]
            if flags & f.END_HEADERS:
                self._headers(stream, flags, block)
            else:
                self._continuing = (stream, flags, [block])
        elif kind == f.CONTINUATION:
            if self._continuing is None or self._continuing[0] != stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "unexpected CONTINUATION")
            parts = self._continuing[2]
            parts.append(payload)
            if sum(len(part) for part in parts) > 1 << 20:
                raise f.H2Error(f.ENHANCE_YOUR_CALM, "header block larger than 1 MiB")
            if flags & f.END_HEADERS:
                first_flags = self._continuing[1]
                self._continuing = None
                self._headers(stream, first_flags, b"".join(parts))
        elif kind == f.DATA:  # padded
            self._begin_data(stream, flags, 0)
            self._conn_credit += len(payload)
            call = self._data_call
            if call is not None:
                call.on_data(memoryview(_unpad(payload, flags)))
                self.give_credit(call, len(payload))
            self._data_done()
        elif kind == f.SETTINGS:
            self._settings(flags, stream, payload)
        elif kind == f.PING:
            if len(payload) != 8:
                raise f.H2Error(f.FRAME_SIZE_ERROR, "PING payload is not 8 bytes")
            if stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "PING on a stream")
            if flags & f.ACK:
                if self._ping_timeout is not None:
                    self._ping_timeout.cancel()
                    self._ping_timeout = None
                    self._schedule_keepalive()
            else:
                self._write(f.frame(f.PING, f.ACK, 0, payload))
                if self._pings.received(bool(self.calls)):
                    _log.debug("too many pings from %s", self.peer)
                    self.connection_error(f.ENHANCE_YOUR_CALM, "too_many_pings")
        elif kind == f.WINDOW_UPDATE:
            self._window_update(stream, payload)
        elif kind == f.RST_STREAM:
            if len(payload) != 4:
                raise f.H2Error(f.FRAME_SIZE_ERROR, "RST_STREAM payload is not 4 bytes")
            if stream == 0 or stream > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream}")
            call = self.calls.get(stream)
            if call is not None:
                self._reset(call)
        elif kind == f.PRIORITY:
            if len(payload) != 5:
                raise f.H2Error(f.FRAME_SIZE_ERROR, "PRIORITY payload is not 5 bytes")
        elif kind == f.PUSH_PROMISE:
            raise f.H2Error(f.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        # GOAWAY from the client: its calls in flight finish; unknown types are ignored

    def _settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream:
            raise f.H2Error(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise f.H2Error(f.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        self._settings_seen = True
        grown = False
        for key, value in f.parse_settings(payload):
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise f.H2Error(f.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE too large")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for call in self.calls.values():
                    call.send_window += delta
                grown = grown or delta > 0
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_MAX_FRAME <= value <= f.MAX_FRAME_LIMIT:
                    raise f.H2Error(f.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value}")
                self.max_frame = value
            elif key == f.ENABLE_PUSH and value > 1:
                raise f.H2Error(f.PROTOCOL_ERROR, f"ENABLE_PUSH {value}")
            # HEADER_TABLE_SIZE: our header blocks never use the dynamic table
        self._write(f.SETTINGS_ACK)
        if grown:
            self._retry_blocked()

    def _window_update(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise f.H2Error(f.FRAME_SIZE_ERROR, "WINDOW_UPDATE payload is not 4 bytes")
        increment = f.read_u32(payload) & 0x7FFFFFFF
        if stream == 0:
            if not increment:
                raise f.H2Error(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > f.MAX_WINDOW:
                raise f.H2Error(f.FLOW_CONTROL_ERROR, "connection window above 2^31-1")
            self._retry_blocked()
            return
        call = self.calls.get(stream)
        if call is None:
            if stream > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream}")
            return
        call.send_window += increment
        if not increment or call.send_window > f.MAX_WINDOW:
            self._write(f.rst_stream(stream, f.FLOW_CONTROL_ERROR))
            self._reset(call)
            return
        if call.pending:
            self._push(call)

    def _headers(self, stream: int, flags: int, block: bytes) -> None:
        head = self._decoder.decode(block)  # always: the dynamic table must follow
        call = self.calls.get(stream)
        if call is not None:  # the client's trailers
            if not flags & f.END_STREAM:
                raise f.H2Error(f.PROTOCOL_ERROR, "trailers without END_STREAM")
            call.on_end_input()
            return
        if stream <= self.last_stream:
            self._write(f.rst_stream(stream, f.STREAM_CLOSED))
            return
        self.last_stream = stream
        if self.closing or len(self.calls) >= self.server.max_concurrent_streams:
            self._write(f.rst_stream(stream, f.REFUSED_STREAM))
            return
        handler = self.server.lookup(head.path)
        call = Call(self, stream, head, handler)
        self.calls[stream] = call
        if flags & f.END_STREAM:
            call.input_ended = True
        if head.method != "POST" or not head.content_type.startswith("application/grpc"):
            call.refuse(
                grpc.StatusCode.INTERNAL,
                f"not a gRPC request (method '{head.method}', content-type '{head.content_type}')",
            )
        elif handler is None:
            call.refuse(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        elif handler.request_streaming:
            call.start(None)  # its input may have ended already (an empty stream)
        elif call.input_ended:
            call.input_ended = False
            call.on_end_input()

    # --- flow control, receiving side ------------------------------------------------------------
    def give_credit(self, call: Call, received: int) -> None:
        """Count ``received`` bytes of ``call`` and give the stream's credit back once it is
        half a window and the call does not hold half a window of untaken messages."""
        credit = call.recv_credit + received
        if (
            credit >= STREAM_WINDOW // 2
            and call.held_bytes < STREAM_WINDOW // 2
            and not call.input_ended
            and not call.finished
        ):
            self._write(f.window_update(call.id, credit))
            credit = 0
        call.recv_credit = credit

    # --- sending --------------------------------------------------------------------------------
    def encoding_for(self, head: CallHead) -> str:
        """--grpc-infer-response-compression-level applies to inference responses only, as
        Triton sets it on its ModelInfer and ModelStreamInfer handlers (statistics, metadata
        and the rest go uncompressed)."""
        level = self.server.compression_level
        if not level or head.path not in COMPRESSED_METHODS:
            return "identity"
        return response_encoding(level, head.accept_encoding)

    def send_head(self, call: Call, metadata: Metadata | None = None) -> None:
        if call.head_sent or call.finished:
            return
        call.head_sent = True
        if call.encoding == "identity" and not metadata:
            block = PLAIN_HEAD
        else:
            block = response_head(call.encoding, metadata)
        self._header_frames(call.id, block, False)

    def send_message(self, call: Call, body: Any) -> None:
        """Send one message: ``bytes`` or :class:`~repokit.protocol.grpc_raw.MessageParts`
        (a large response's parts, written as they are: its DATA frames are views of them)."""
        if call.finished:
            return
        size = len(body)
        if size > self.max_send:
            call.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
            call.set_details(f"Sent message larger than max ({size} vs. {self.max_send})")
            return
        compressed = call.encoding != "identity"
        if compressed:
            body = compress(message_bytes(body), call.encoding)
            size = len(body)
        if isinstance(body, MessageParts):
            if not call.head_sent:
                self.send_head(call)
            call.pending.append(prefix(size, False))
            call.pending.extend(body.parts)
            self._push(call)
            return
        if not call.head_sent:
            self.send_head(call)
        total = size + 5
        window = min(self.send_window, call.send_window)
        if not call.pending and total <= window and total <= self.max_frame and not self.paused:
            self.send_window -= total
            call.send_window -= total
            self._write(f.frame_head(f.DATA, 0, call.id, total) + prefix(size, compressed) + body)
            self._pings.reset()
            return
        call.pending.append(prefix(size, compressed))
        call.pending.append(memoryview(body))
        self._push(call)

    def _push(self, call: Call) -> None:
        pending = call.pending
        max_frame = self.max_frame
        while pending:
            window = min(self.send_window, call.send_window)
            if window <= 0 or self.paused:
                self._blocked[call] = None
                return
            chunk = pending[0]
            if len(chunk) >= 2 * max_frame and window >= 2 * max_frame:
                self._push_frames(call, chunk, min(len(chunk), window) // max_frame)
                continue
            size = min(window, max_frame)
            parts: list[bytes | memoryview] = []
            taken = 0
            while pending and taken < size:
                chunk = pending[0]
                room = size - taken
                if len(chunk) <= room:
                    pending.popleft()
                    parts.append(chunk)
                    taken += len(chunk)
                else:
                    parts.append(chunk[:room])
                    pending[0] = chunk[room:]
                    taken = size
            self._write(f.frame_head(f.DATA, 0, call.id, taken))
            self._pings.reset()
            for part in parts:
                self._write(part)
            self.send_window -= taken
            call.send_window -= taken
        self._blocked.pop(call, None)
        if call.pending_trailers is not None:
            self._end(call, call.pending_trailers)
        elif call.drained is not None and not self.paused:
            drained, call.drained = call.drained, None
            if not drained.done():
                drained.set_result(None)

    def _push_frames(self, call: Call, chunk: bytes | memoryview, count: int) -> None:
        """``count`` full DATA frames from the start of ``chunk``, the first of ``call``'s
        pending data (a large message's bytes: one head made for all, views of the chunk)."""
        size = self.max_frame
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        taken = count * size
        head = f.frame_head(f.DATA, 0, call.id, size)
        out = self._out
        for pos in range(0, taken, size):
            out.append(head)
            out.append(view[pos : pos + size])
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        self._pings.reset()
        if taken == len(view):
            call.pending.popleft()
        else:
            call.pending[0] = view[taken:]
        self.send_window -= taken
        call.send_window -= taken

    def _retry_blocked(self) -> None:
        for call in list(self._blocked):
            if self.send_window <= 0 or self.paused:
                return
            self._blocked.pop(call, None)
            self._push(call)

    async def writable(self, call: Call) -> None:
        """Wait until ``call``'s data has gone to the transport and it takes writes."""
        while (call.pending or self.paused) and not call.finished:
            call.drained = self.loop.create_future()
            self._blocked[call] = None
            await call.drained

    def finish(self, call: Call) -> None:
        """Send ``call``'s status (after its data, when flow control holds that back)."""
        if call.finished or call.pending_trailers is not None:
            return
        code, details = call.code(), call.details()
        number = code.value[0]
        trailing = call.trailing_metadata()
        if call.error is not None or call.was_cancelled:
            call.pending.clear()  # a refused or expired call's data is not sent
        if not call.head_sent:  # trailers-only
            block = TRAILERS_ONLY_HEAD + trailers(number, details, trailing)
        elif number == 0 and not details and not trailing:
            block = TRAILERS_OK
        else:
            block = trailers(number, details, trailing)
        if call.pending:
            call.pending_trailers = block
            return
        if (
            number
            and not call.heard
            and call.handler is not None
            and call.handler.request_streaming
        ):
            # A stream that fails before the client sent anything: its status waits for the
            # client's first message (at most STATUS_HOLD seconds). A gRPC client whose first
            # write is still under way when the status comes fails the call with its own
            # "Internal error" instead of the status.
            call.pending_trailers = block
            if call.timer is not None:
                call.timer.cancel()
            call.timer = self.loop.call_later(STATUS_HOLD, self.release_status, call)
            return
        self._end(call, block)

    def release_status(self, call: Call) -> None:
        block = call.pending_trailers
        if block is not None and not call.finished:
            self._end(call, block)

    def _end(self, call: Call, block: bytes) -> None:
        self._header_frames(call.id, block, True)
        if not call.input_ended and call.reader.partial:
            # a refused message still coming in: ask the client to stop sending it (a client
            # whose stream is reset before it has sent anything may fail the call with its
            # own error instead of the status, so a stream is not reset otherwise; the
            # messages that come after the status are dropped)
            self._write(f.rst_stream(call.id, f.NO_ERROR))
        self._drop(call)

    def _reset(self, call: Call) -> None:
        """The stream ended abnormally: its handler is cancelled."""
        self.calls.pop(call.id, None)
        self._blocked.pop(call, None)
        call.on_reset()
        self._check_drained()

    def _drop(self, call: Call) -> None:
        self.calls.pop(call.id, None)
        self._blocked.pop(call, None)
        call.close()
        self._check_drained()

    def _header_frames(self, stream: int, block: bytes, end_stream: bool) -> None:
        self._pings.reset()  # as grpc: the client may ping again once the server sent something
        flags = f.END_STREAM if end_stream else 0
        limit = self.max_frame
        if len(block) <= limit:
            self._write(f.frame(f.HEADERS, flags | f.END_HEADERS, stream, block))
            return
        self._write(f.frame(f.HEADERS, flags, stream, block[:limit]))
        for pos in range(limit, len(block), limit):
            last = pos + limit >= len(block)
            self._write(
                f.frame(
                    f.CONTINUATION, f.END_HEADERS if last else 0, stream, block[pos : pos + limit]
                )
            )

    def _write(self, data: bytes | memoryview) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        transport = self.transport
        if transport is None or transport.is_closing() or not out:
            return
        if len(out) == 1:
            transport.write(out[0])
        elif len(out) <= _WRITE_JOIN_PARTS and sum(len(part) for part in out) <= _WRITE_JOIN_LIMIT:
            transport.write(b"".join(out))
        else:
            transport.writelines(out)

    # --- connection lifetime ----------------------------------------------------------------------
    def connection_error(self, code: int, message: str) -> None:
        """A protocol error: GOAWAY with ``code`` and the reason, then close."""
        _log.debug("HTTP/2 connection error %s from %s: %s", code, self.peer, message)
        self._write(f.goaway(self.last_stream, code, message.encode("utf-8", "replace")[:256]))
        self._close()

    def goaway(self) -> None:
        """Graceful stop: no new calls; the connection closes once its calls are done."""
        if self.closing or self.closed:
            return
        self.closing = True
        self._write(f.goaway(self.last_stream, f.NO_ERROR))
        self._check_drained()

    def _check_drained(self) -> None:
        if self.closing and not self.calls:
            self._close()
            self.server.call_ended()

    def abort(self) -> None:
        """Grace expired: cancel every call and close."""
        for call in list(self.calls.values()):
            self._write(f.rst_stream(call.id, f.CANCEL))
            call.on_reset()
        self.calls.clear()
        self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def _schedule_keepalive(self) -> None:
        interval = self.server.keepalive_time
        if interval > 0 and not self.closed:
            self._keepalive = self.loop.call_later(interval, self._send_keepalive)

    def _send_keepalive(self) -> None:
        self._keepalive = None
        if self.closed:
            return
        if (not self.calls and not self.server.keepalive_permit_without_calls) or (
            not self._pings.may_send()
        ):
            # as grpc: no keepalive pings without calls unless permitted, nor more than
            # --grpc-http2-max-pings-without-data of them until headers or data are sent
            self._schedule_keepalive()
            return
        self._pings.sent()
        self._write(f.frame(f.PING, 0, 0, os.urandom(8)))
        self._ping_timeout = self.loop.call_later(
            self.server.keepalive_timeout, self.connection_error, f.NO_ERROR, "keepalive timeout"
        )


def _unpad(payload: bytes, flags: int) -> bytes:
    if not flags & f.PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise f.H2Error(f.PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]
