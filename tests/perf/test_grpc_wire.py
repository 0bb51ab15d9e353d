"""The load generator's own HTTP/2 gRPC client and its HPACK decoder, against scripted peers.

A scripted server (a socket in a thread) reads the client's frames and answers with frames
built here, so each protocol corner is exercised on purpose: CONTINUATION, padding, PING and
SETTINGS acknowledgements, flow control, trailers-only errors, RST_STREAM, GOAWAY, a closed
connection, Huffman-coded headers (decoded by the ``hpack`` package).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from repokit.perf.transports.base import TransportOptions
from repokit.perf.transports.grpc import GrpcTransport
from repokit.perf.transports.grpc_wire import (
    PREFACE,
    WireConnection,
    WireError,
    frame,
    grpc_frame,
    header_block,
)
from repokit.perf.transports.hpack import (
    Decoder,
    Encoder,
    HpackError,
    encode_integer,
    indexed_only,
    literal,
)

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9
)  # fmt: skip
OK_HEADERS = b"\x88" + literal(b"content-type", b"application/grpc")  # :status 200
OK_TRAILERS = literal(b"grpc-status", b"0")
BLOCK = header_block("/inference.GRPCInferenceService/ModelInfer", "test", {})


class Peer:
    """The server side of one connection: read the client's frames, write ours."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.received: list[tuple[int, int, int, bytes]] = []

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("client went away")
            self.buffer += chunk
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out

    def handshake(self, settings: bytes = b"") -> None:
        assert self._read(len(PREFACE)) == PREFACE
        self.send(frame(SETTINGS, 0, 0, settings))

    def next_frame(self) -> tuple[int, int, int, bytes]:
        head = self._read(9)
        length = int.from_bytes(head[:3], "big")
        entry = (head[3], head[4], int.from_bytes(head[5:9], "big"), self._read(length))
        self.received.append(entry)
        return entry

    def until(self, kind: int, flags_mask: int = 0) -> tuple[int, int, int, bytes]:
        while True:
            entry = self.next_frame()
            if entry[0] == kind and entry[1] & flags_mask == flags_mask:
                return entry

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


@contextmanager
def scripted(script: Callable[[Peer], None]) -> Iterator[int]:
    """A one-connection server running ``script``; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    errors: list[BaseException] = []

    def run() -> None:
        conn, _ = listener.accept()
        try:
            script(Peer(conn))
        except BaseException as exc:  # reported in the test thread
            errors.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        thread.join(timeout=10)
        listener.close()
    if errors:
        raise errors[0]


def answer(peer: Peer, stream: int, message: bytes) -> None:
    peer.send(
        frame(HEADERS, 0x4, stream, OK_HEADERS)
        + frame(DATA, 0, stream, grpc_frame(message))
        + frame(HEADERS, 0x5, stream, OK_TRAILERS)
    )


# -- HPACK ------------------------------------------------------------------------------------


def test_hpack_static_dynamic_and_size_updates() -> None:
    decoder = Decoder()
    first = b"\x88" + b"\x40" + literal(b"grpc-status", b"0")[1:]  # incremental indexing
    assert decoder.decode(first) == [(b":status", b"200"), (b"grpc-status", b"0")]
    assert decoder.decode(b"\x88\xbe") == [(b":status", b"200"), (b"grpc-status", b"0")]
    # a literal with an indexed name (content-type, static 31) and incremental indexing
    assert decoder.decode(b"\x5f" + bytes([16]) + b"application/grpc") == [
        (b"content-type", b"application/grpc")
    ]
    assert decoder.decode(b"\xbe\xbf") == [
        (b"content-type", b"application/grpc"),
        (b"grpc-status", b"0"),
    ]
    decoder.decode(b"\x20")  # table size 0 evicts everything
    with pytest.raises(HpackError, match="62"):
        decoder.decode(b"\xbe")  # the cached answer for these bytes went with the table
    with pytest.raises(HpackError):
        decoder.decode(encode_integer(4097, 5, 0x20))  # above the size we advertised


def test_hpack_encoder_indexes_request_fields_and_honours_table_size() -> None:
    fields = Decoder().decode(BLOCK)
    peer = Decoder()
    encoder = Encoder()
    first = encoder.encode(BLOCK)
    assert peer.decode(first) == fields
    again = encoder.encode(BLOCK)
    assert again == b"\x83\x86\xc1\xc0\xbf\xbe"  # one byte per field once indexed
    assert encoder.encode(BLOCK) is again  # cached while the table does not change
    assert peer.decode(again) == fields
    other = header_block("/inference.GRPCInferenceService/ModelStreamInfer", "test", {"k": "v"})
    assert peer.decode(encoder.encode(other)) == Decoder().decode(other)
    assert peer.decode(encoder.encode(BLOCK)) == fields  # indices shifted by the new entries
    encoder.limit(0)  # the peer allows no dynamic table: announce it, then plain literals
    shrunk = encoder.encode(BLOCK)
    assert shrunk.startswith(b"\x20")
    assert peer.decode(shrunk) == fields
    assert peer.decode(encoder.encode(BLOCK)) == fields
    small = Encoder(60)  # entries larger than the table are sent without indexing
    assert peer.decode(small.encode(BLOCK)) == fields


def test_hpack_decodes_huffman_and_rejects_truncation_and_long_integers() -> None:
    import hpack

    server = hpack.Encoder()  # as a server that Huffman-codes its headers would send them
    trailers = [(b"grpc-status", b"3"), (b"grpc-message", b"input 'INPUT0' is missing")]
    block = server.encode(trailers, huffman=True)
    assert block != server.encode(trailers, huffman=False)
    decoder = Decoder()
    assert decoder.decode(block) == trailers
    assert decoder.decode(server.encode(trailers, huffman=True)) == trailers  # now indexed
    with pytest.raises(HpackError):
        decoder.decode(b"\x00\x0bgrpc")  # truncated string
    with pytest.raises(HpackError):
        decoder.decode(b"\xff\xff")  # truncated integer
    long_value = b"x" * 300  # needs a multi-byte length
    assert encode_integer(300, 7) == b"\x7f\xad\x01"
    assert decoder.decode(literal(b"grpc-message", long_value)) == [(b"grpc-message", long_value)]


# -- the HTTP/2 connection ---------------------------------------------------------------------


def test_unary_call_with_ping_settings_continuation_and_padding() -> None:
    def script(peer: Peer) -> None:
        peer.handshake(struct.pack(">HI", 5, 32768))  # MAX_FRAME_SIZE
        _, flags, stream, block = peer.until(HEADERS)
        assert flags == 0x4 and Decoder().decode(block) == Decoder().decode(BLOCK)
        _, flags, _, body = peer.until(DATA)
        assert flags == 0x1 and body == grpc_frame(b"request")
        split = len(OK_HEADERS) // 2
        peer.send(
            frame(PING, 0, 0, b"12345678")
            + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 1 << 20))
            + frame(HEADERS, 0, stream, OK_HEADERS[:split])
            + frame(CONTINUATION, 0x4, stream, OK_HEADERS[split:])
            + frame(DATA, 0x8, stream, b"\x03" + grpc_frame(b"answer") + b"pad")
            + frame(HEADERS, 0x5, stream, OK_TRAILERS)
        )
        assert peer.until(PING, 0x1)[3] == b"12345678"
        assert peer.until(SETTINGS, 0x1)[3] == b""
        answer(peer, peer.until(HEADERS)[2], b"again")

    with scripted(script) as port:
        wire = WireConnection.open("127.0.0.1", port)
        assert wire.unary(BLOCK, b"request") == (b"answer", None)
        assert wire.unary(BLOCK, b"request") == (b"again", None)
        wire.close()


def test_trailers_only_error_reset_and_missing_message() -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        stream = peer.until(HEADERS)[2]
        error = (
            b"\x88"
            + literal(b"grpc-status", b"5")
            + literal(b"grpc-message", b"Request for unknown model: %27zzz%27 is not found")
        )
        peer.send(frame(HEADERS, 0x5, stream, error))
        stream = peer.until(HEADERS)[2]
        peer.send(frame(RST_STREAM, 0, stream, (8).to_bytes(4, "big")))
        stream = peer.until(HEADERS)[2]
        peer.send(frame(HEADERS, 0x5, stream, b"\x88" + OK_TRAILERS))
        stream = peer.until(HEADERS)[2]
        peer.send(frame(HEADERS, 0x5, stream, b"\x8e" + OK_TRAILERS))  # :status 500

    with scripted(script) as port:
        wire = WireConnection.open("127.0.0.1", port)
        assert wire.unary(BLOCK, b"x") == (
            None,
            "gRPC NOT_FOUND: Request for unknown model: 'zzz' is not found",
        )
        assert wire.unary(BLOCK, b"x") == (
            None,
            "gRPC error: the server reset the stream (HTTP/2 error 8)",
        )
        assert wire.unary(BLOCK, b"x") == (None, "gRPC error: the response carried no message")
        assert wire.unary(BLOCK, b"x") == (None, "gRPC error: HTTP status 500")
        wire.close()


def test_flow_control_waits_for_window_updates() -> None:
    message = bytes(range(256)) * 400  # 100 KiB: above the default 64 KiB windows

    def script(peer: Peer) -> None:
        peer.handshake()
        stream = peer.until(HEADERS)[2]
        body = b""
        granted = 65535
        while len(body) < len(message) + 5:
            _, flags, _, chunk = peer.until(DATA)
            assert len(chunk) <= 16384  # the default frame size
            body += chunk
            assert len(body) <= granted  # never beyond the window
            if len(body) >= 65535 - 16384:
                granted += len(chunk)
                grant = len(chunk).to_bytes(4, "big")
                peer.send(
                    frame(WINDOW_UPDATE, 0, 0, grant) + frame(WINDOW_UPDATE, 0, stream, grant)
                )
        assert flags & 0x1 and body == grpc_frame(message)
        answer(peer, stream, b"ok")

    with scripted(script) as port:
        wire = WireConnection.open("127.0.0.1", port)
        assert wire.unary(BLOCK, message) == (b"ok", None)
        wire.close()


def test_request_headers_use_the_servers_table_within_its_size() -> None:
    fields = Decoder().decode(BLOCK)

    def script(peer: Peer) -> None:
        decoder = Decoder()
        peer.handshake()
        _, _, stream, block = peer.until(HEADERS)
        assert decoder.decode(block) == fields
        answer(peer, stream, b"one")
        _, _, stream, block = peer.until(HEADERS)
        assert len(block) == 6 and decoder.decode(block) == fields  # all indexed
        peer.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 1, 0)))  # HEADER_TABLE_SIZE 0
        answer(peer, stream, b"two")
        _, _, stream, block = peer.until(HEADERS)
        assert block[:1] == b"\x20" and decoder.decode(block) == fields
        answer(peer, stream, b"three")

    with scripted(script) as port:
        wire = WireConnection.open("127.0.0.1", port)
        for text in (b"one", b"two", b"three"):
            assert wire.unary(BLOCK, b"x") == (text, None)
        wire.close()


def test_streaming_call_messages_and_end() -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        _, flags, stream, _ = peer.until(HEADERS)
        assert not flags & 0x1  # the stream stays open
        peer.send(frame(HEADERS, 0x4, stream, OK_HEADERS))
        for expected in (b"one", b"two"):
            assert peer.until(DATA)[3] == grpc_frame(expected)
            # one answer split over two DATA frames
            framed = grpc_frame(expected.upper())
            peer.send(frame(DATA, 0, stream, framed[:3]) + frame(DATA, 0, stream, framed[3:]))
        assert peer.until(DATA, 0x1)[3] == b""  # END_STREAM from the client
        trailers = literal(b"grpc-status", b"13") + literal(b"grpc-message", b"boom")
        peer.send(frame(HEADERS, 0x5, stream, trailers))

    with scripted(script) as port:
        wire = WireConnection.open("127.0.0.1", port)
        wire.start_stream(BLOCK)
        for text in (b"one", b"two"):
            wire.send_message(text)
            assert wire.receive_message() == (text.upper(), None)
        wire.end_stream()
        assert wire.receive_message() == (None, "gRPC INTERNAL: boom")
        wire.close()


def test_goaway_and_closed_connection_are_errors() -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.until(HEADERS)
        peer.send(frame(GOAWAY, 0, 0, (0).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"bye"))

    with scripted(script) as port:
        wire = WireConnection.open("127.0.0.1", port)
        with pytest.raises(WireError, match="GOAWAY 2 bye"):
            wire.unary(BLOCK, b"x")
        wire.close()

    def closing(peer: Peer) -> None:
        peer.handshake()
        peer.until(HEADERS)

    with scripted(closing) as port:
        wire = WireConnection.open("127.0.0.1", port)
        with pytest.raises(WireError, match="the server closed the connection"):
            wire.unary(BLOCK, b"x")
        wire.close()


def test_a_reset_connection_is_a_closed_connection() -> None:
    def resetting(peer: Peer) -> None:
        peer.handshake()
        peer.until(HEADERS)
        # close with SO_LINGER 0: the client gets a reset instead of an orderly end
        peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with scripted(resetting) as port:
        wire = WireConnection.open("127.0.0.1", port)
        with pytest.raises(WireError, match="the server closed the connection"):
            wire.unary(BLOCK, b"x")
        wire.close()


def test_huffman_headers_keep_the_own_client() -> None:
    import hpack

    def script(peer: Peer) -> None:
        peer.handshake()
        stream = peer.until(HEADERS)[2]
        server = hpack.Encoder()
        head = [(b":status", b"200"), (b"content-type", b"application/grpc")]
        peer.send(
            frame(HEADERS, 0x4, stream, server.encode(head, huffman=True))
            + frame(DATA, 0, stream, grpc_frame(b""))
            + frame(HEADERS, 0x5, stream, server.encode([(b"grpc-status", b"0")], huffman=True))
        )

    with scripted(script) as port:
        transport = GrpcTransport(TransportOptions("grpc", f"127.0.0.1:{port}"), lambda: 0)
        assert transport._probe_wire() is None  # what open() runs: no fallback needed


def test_indexed_only_blocks() -> None:
    assert indexed_only(b"\x88\xbe")
    assert indexed_only(b"\xff\x81\x01")  # index 127 + 129: a multi-byte integer
    assert not indexed_only(b"\x88" + literal(b"a", b"b"))
    assert not indexed_only(b"\x20")  # a table size update
    assert indexed_only(b"")
