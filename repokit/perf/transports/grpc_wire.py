"""A minimal blocking HTTP/2 client for gRPC calls: one socket, one stream at a time.

Why our own: the grpc library costs 100-200 us of client CPU per call from Python, which at
concurrency 1 against a fast server (Triton answers add_sub in ~80 us) caps the load generator
at a quarter of what h2load drives. Here a call is one ``sendall`` of pre-built frames (HEADERS,
then DATA) and ``recv_into`` one reusable buffer until the stream ends; a few frame headers are
parsed in Python. The request's header fields enter the server's HPACK table on the first call
and are one-byte references afterwards (:class:`~repokit.perf.transports.hpack.Encoder`), as
h2load sends them. Used by the sync-mode worker threads (one connection each).

Covered: the connection preface and SETTINGS (ACKed, the peer's initial window, frame size and
table size honoured), PING ACKs, WINDOW_UPDATE in both directions (our receive windows start at
2^31-1 and are topped up; DATA waits for the peer's send window), CONTINUATION, padding,
RST_STREAM and GOAWAY as errors, trailers-only error responses, ``grpc-status``/``grpc-message``
(percent-decoded), the server's HEADER_TABLE_SIZE, HPACK decoding (Huffman included) via
:mod:`repokit.perf.transports.hpack`, TLS with ALPN ``h2`` (``--ssl-grpc-*``). Not covered:
compressed messages.
"""

from __future__ import annotations

import socket
import ssl
import struct
from urllib.parse import unquote

from repokit.perf.transports.base import blocking_with_timeouts
from repokit.perf.transports.hpack import (
    Decoder,
    Encoder,
    HpackError,
    literal,
    literal_indexed_name,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9
)  # fmt: skip
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_FRAME_HEAD = struct.Struct(">IBI")  # (length << 8 | type, flags, stream)
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
REFILL_AT = 2**30
RECV_SIZE = 262144
STATUS_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}  # fmt: skip


class WireError(Exception):
    """The call failed; the text is what the load generator reports."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        (len(payload) << 8 | kind).to_bytes(4, "big")
        + bytes([flags])
        + stream.to_bytes(4, "big")
        + payload
    )


def header_block(
    path: str, authority: str, metadata: dict[str, str], secure: bool = False
) -> bytes:
    """The request's HPACK block: static-table method and scheme, plain-string literals that
    do not touch the server's dynamic table (so the same bytes serve every request)."""
    block = b"\x83\x87" if secure else b"\x83\x86"  # :method POST, :scheme https / http
    block += literal_indexed_name(4, path.encode())  # :path
    block += literal_indexed_name(1, authority.encode())  # :authority
    block += literal_indexed_name(31, b"application/grpc")  # content-type
    block += literal(b"te", b"trailers")
    for name, value in metadata.items():
        block += literal(name.lower().encode(), value.encode())
    return block


def grpc_frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def _status_error(headers: dict[bytes, bytes]) -> str | None:
    http_status = headers.get(b":status")
    if http_status != b"200":
        shown = "none" if http_status is None else http_status.decode("latin-1")
        return f"gRPC error: HTTP status {shown}"
    status = headers.get(b"grpc-status")
    if status is None:
        return "gRPC error: the response carried no grpc-status"
    if status == b"0":
        return None
    code = int(status) if status.isdigit() else -1
    detail = unquote(headers.get(b"grpc-message", b"").decode("utf-8", "replace"))
    return f"gRPC {STATUS_NAMES.get(code, f'status {status.decode()}')}: {detail}"


class WireConnection:
    """A blocking HTTP/2 connection carrying one gRPC stream at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._in = bytearray()
        # reads land in one reusable buffer: recv(RECV_SIZE) would allocate (and shrink) a
        # RECV_SIZE bytes object per read, ~3 us per call, a twentieth of a call to Triton
        self._buffer = memoryview(bytearray(RECV_SIZE))
        self._decoder = Decoder()
        self._encoder = Encoder()
        self._next_stream = 1
        self._send_window = DEFAULT_WINDOW  # connection-level, toward the server
        self._initial_window = DEFAULT_WINDOW  # the server's per-stream window
        self._max_frame = 16384
        self._consumed = 0  # received DATA bytes not yet returned with WINDOW_UPDATE
        self._stream = 0
        self._stream_window = 0
        self._stream_consumed = 0
        self._data: bytes | bytearray = b""  # bytes while it holds at most one DATA frame
        self._headers: dict[bytes, bytes] = {}
        self._ended = False
        self._fault: str | None = None
        self._last_message = b""  # the frames of the last unary call, reused while unchanged
        self._last_block = b""
        self._head = self._middle = self._tail = b""

    @classmethod
    def open(
        cls, host: str, port: int, timeout: float = 60.0, tls: ssl.SSLContext | None = None
    ) -> WireConnection:
        """Connect (over TLS with ALPN h2 when ``tls`` is given) and send the preface."""
        sock = socket.create_connection((host, port), timeout=timeout)
        blocking_with_timeouts(sock, timeout)
        if tls is not None:
            try:
                sock = tls.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError):
                sock.close()
                raise
            if sock.selected_alpn_protocol() != "h2":
                sock.close()
                raise WireError("the server did not agree to HTTP/2 over TLS (ALPN h2)")
        settings = (
            (2).to_bytes(2, "big") + (0).to_bytes(4, "big")  # no server push
            + (4).to_bytes(2, "big") + MAX_WINDOW.to_bytes(4, "big")  # initial stream window
        )  # fmt: skip
        sock.sendall(
            PREFACE
            + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big"))
        )
        return cls(sock)

    def close(self) -> None:
        self._sock.close()

    # -- calls -------------------------------------------------------------------------------

    def start_stream(self, block: bytes, end_stream: bool = False) -> int:
        stream = self._next_stream
        self._next_stream += 2
        self._stream = stream
        self._stream_window = self._initial_window
        self._stream_consumed = 0
        self._data = b""
        self._headers = {}
        self._ended = False
        self._fault = None
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        self._sock.sendall(frame(HEADERS, flags, stream, self._encoder.encode(block)))
        return stream

    def unary(self, block: bytes, message: bytes) -> tuple[bytes | None, str | None]:
        """One call: (response message, None) or (None, error text)."""
        self.send_unary(block, message)
        return self.receive_unary()

    def send_unary(self, block: bytes, message: bytes) -> None:
        """Open a stream and send the call's one message."""
        block = self._encoder.encode(block)
        stream = self._next_stream
        self._next_stream += 2
        self._stream = stream
        self._stream_window = self._initial_window
        self._data = b""
        self._headers = {}
        self._ended = False
        self._fault = None
        size = len(message) + 5
        if size <= self._max_frame and size <= self._send_window and size <= self._initial_window:
            self._send_window -= size
            self._stream_window -= size
            if message is not self._last_message or block is not self._last_block:
                self._last_message, self._last_block = message, block
                self._head = (len(block) << 8 | HEADERS).to_bytes(4, "big") + bytes([END_HEADERS])
                self._middle = block + (size << 8 | DATA).to_bytes(4, "big") + bytes([END_STREAM])
                self._tail = grpc_frame(message)
            sid = stream.to_bytes(4, "big")
            self._sock.sendall(self._head + sid + self._middle + sid + self._tail)
        else:
            body = grpc_frame(message)
            self._sock.sendall(frame(HEADERS, END_HEADERS, stream, block))
            self._send_data(body, end_stream=True)

    def receive_unary(self) -> tuple[bytes | None, str | None]:
        """The answer to :meth:`send_unary`: (message, None) or (None, error text)."""
        while not self._ended:
            self._receive()
        headers = self._headers
        if self._fault is not None:
            return None, self._fault
        if headers.get(b"grpc-status") != b"0" or headers.get(b":status") != b"200":
            return None, _status_error(headers) or "gRPC error"
        data = self._data
        if len(data) < 5:
            return None, "gRPC error: the response carried no message"
        if data[0]:
            return None, "gRPC error: compressed responses are not supported"
        length = int.from_bytes(data[1:5], "big")
        if len(data) < 5 + length:
            return None, "gRPC error: the response message was cut short"
        return bytes(data[5 : 5 + length]), None

    def send_message(self, message: bytes) -> None:
        """One message on the open (streaming) call."""
        size = len(message) + 5
        if size <= self._max_frame and size <= self._send_window and size <= self._stream_window:
            self._send_window -= size
            self._stream_window -= size
            self._sock.sendall(frame(DATA, 0, self._stream, grpc_frame(message)))
        else:
            self._send_data(grpc_frame(message), end_stream=False)

    def receive_message(self) -> tuple[bytes | None, str | None]:
        """The next message of the open (streaming) call, or the error that ended it."""
        while True:
            data = self._data
            if len(data) >= 5:
                length = int.from_bytes(data[1:5], "big")
                if len(data) >= 5 + length:
                    message = bytes(data[5 : 5 + length])
                    self._data = data[5 + length :]
                    self._refill_stream(5 + length)
                    return message, None
            if self._ended:
                if self._fault is not None:
                    return None, self._fault
                return None, _status_error(self._headers) or "gRPC stream closed"
            self._receive()

    def end_stream(self) -> None:
        if not self._ended:
            self._sock.sendall(frame(DATA, END_STREAM, self._stream))

    # -- frames ------------------------------------------------------------------------------

    def _send_data(self, body: bytes, end_stream: bool) -> None:
        view = memoryview(body)
        while True:
            allowed = min(self._max_frame, self._send_window, self._stream_window)
            if allowed <= 0 and view:
                self._receive()  # wait for WINDOW_UPDATE
                if self._ended:  # answered (an error) before the request was complete
                    return
                continue
            chunk = bytes(view[:allowed])
            view = view[allowed:]
            last = not view
            self._send_window -= len(chunk)
            self._stream_window -= len(chunk)
            flags = END_STREAM if last and end_stream else 0
            self._sock.sendall(frame(DATA, flags, self._stream, chunk))
            if last:
                return

    def _refill_stream(self, count: int) -> None:
        self._stream_consumed += count
        if self._stream_consumed >= REFILL_AT and not self._ended:
            self._sock.sendall(
                frame(WINDOW_UPDATE, 0, self._stream, self._stream_consumed.to_bytes(4, "big"))
            )
            self._stream_consumed = 0

    def _receive(self) -> None:
        """Read from the socket and handle every complete frame. DATA and complete HEADERS
        of the open stream are handled inline (the per-call path); the rest by
        :meth:`_on_frame`. A server that goes away is a WireError, whether the socket ends
        or is reset (it closed with our bytes unread), here or in an answer we send back."""
        try:
            self._receive_frames()
        except (ConnectionResetError, BrokenPipeError):
            raise WireError("the server closed the connection") from None

    def _receive_frames(self) -> None:
        count = self._sock.recv_into(self._buffer)
        if not count:
            raise WireError("the server closed the connection")
        pending = self._in
        if pending:
            pending += self._buffer[:count]
            chunk = bytes(pending)
            pending.clear()
        else:
            chunk = bytes(self._buffer[:count])
        current = self._stream
        unpack = _FRAME_HEAD.unpack_from
        decode = self._decoder.decode
        pos = 0
        end = len(chunk)
        while end - pos >= 9:
            length_kind, flags, stream = unpack(chunk, pos)
            length = length_kind >> 8
            kind = length_kind & 0xFF
            stream &= 0x7FFFFFFF
            body = pos + 9
            stop = body + length
            if stop > end:
                break
            if kind == DATA:
                self._consumed += length
                if self._consumed >= REFILL_AT:
                    self._refill_connection()
                if stream == current:
                    if flags & PADDED:
                        self._append_data(chunk[body + 1 : stop - chunk[body]])
                    elif self._data:
                        self._append_data(chunk[body:stop])
                    else:
                        self._data = chunk[body:stop]
                    if flags & END_STREAM:
                        self._ended = True
            elif kind == HEADERS:
                if flags & (END_HEADERS | PADDED | PRIORITY) == END_HEADERS:
                    try:
                        fields = decode(chunk[body:stop])
                    except HpackError as exc:
                        raise WireError(f"cannot decode the server's headers: {exc}") from exc
                    if stream == current:
                        self._headers.update(fields)
                        if flags & END_STREAM:
                            self._ended = True
                elif flags & END_HEADERS:
                    self._on_headers(stream, flags, chunk[body:stop], b"")
                else:
                    complete = self._continued(chunk, stop, end)
                    if complete is None:
                        break
                    block, stop = complete
                    self._on_headers(stream, flags, chunk[body : body + length], block)
            elif kind == WINDOW_UPDATE and stream == 0 and length == 4:
                self._send_window += int.from_bytes(chunk[body:stop], "big") & 0x7FFFFFFF
            else:
                self._on_frame(kind, flags, stream, chunk[body:stop])
            pos = stop
        if pos < end:
            pending += chunk[pos:]

    def _append_data(self, part: bytes) -> None:
        data = self._data
        if isinstance(data, bytearray):
            data += part
        else:  # a second frame: from here on, grow a bytearray in place
            self._data = bytearray(data) + part

    def _refill_connection(self) -> None:
        self._sock.sendall(frame(WINDOW_UPDATE, 0, 0, self._consumed.to_bytes(4, "big")))
        self._consumed = 0

    def _continued(self, buffer: bytes, pos: int, end: int) -> tuple[bytes, int] | None:
        """The CONTINUATION fragments after a HEADERS frame, once all are in the buffer."""
        parts: list[bytes] = []
        while True:
            if end - pos < 9:
                return None
            length = int.from_bytes(buffer[pos : pos + 3], "big")
            if end - pos < 9 + length:
                return None
            if buffer[pos + 3] != CONTINUATION:
                raise WireError("HTTP/2 protocol error: HEADERS without CONTINUATION")
            parts.append(bytes(buffer[pos + 9 : pos + 9 + length]))
            flags = buffer[pos + 4]
            pos += 9 + length
            if flags & END_HEADERS:
                return b"".join(parts), pos

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream == 0:
                self._send_window += increment
            elif stream == self._stream:
                self._stream_window += increment
        elif kind == SETTINGS:
            if not flags & ACK:
                self._apply_settings(payload)
                self._sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING:
            if not flags & ACK:
                self._sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            if stream == self._stream:
                code = int.from_bytes(payload[:4], "big")
                self._fault = f"gRPC error: the server reset the stream (HTTP/2 error {code})"
                self._ended = True
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            code = int.from_bytes(payload[4:8], "big")
            debug = payload[8:].decode("utf-8", "replace")
            if self._stream > last or code != 0:
                raise WireError(f"the server closed the connection (GOAWAY {code} {debug})".strip())

    def _on_headers(self, stream: int, flags: int, payload: bytes, continued: bytes) -> None:
        if flags & (PADDED | PRIORITY):
            start = 0
            end = len(payload)
            if flags & PADDED:
                start = 1
                end -= payload[0]
            if flags & PRIORITY:
                start += 5
            payload = payload[start:end]
        try:  # every block is decoded: the table must track the server's encoder
            fields = self._decoder.decode(payload + continued if continued else payload)
        except HpackError as exc:
            raise WireError(f"cannot decode the server's headers: {exc}") from exc
        if stream == self._stream:
            self._headers.update(fields)
            if flags & END_STREAM:
                self._ended = True

    def _apply_settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - 5, 6):
            key = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if key == 4:  # INITIAL_WINDOW_SIZE: shifts the open stream's window too
                self._stream_window += value - self._initial_window
                self._initial_window = value
            elif key == 1:  # HEADER_TABLE_SIZE: what our encoder may use of the peer's table
                self._encoder.limit(value)
            elif key == 5:  # MAX_FRAME_SIZE
                self._max_frame = value
