"""Reads of a large request's small DATA frames straight into its message
(``Connection._unpack``): a connection of the native transport is driven read by read, with
the read sizes a test chooses, through the asyncio buffered-protocol calls the event loop makes
(``get_buffer``, then ``buffer_updated``). Whatever the reads' sizes, frame sizes, padding and
the frames of other streams or of the connection between a message's DATA frames, every call
gets its message whole and answers it (the echo model returns its input), and a DATA frame that
breaks the protocol still ends the connection."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import hpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repokit.frontends.grpc.h2 import connection as h2_connection
from repokit.frontends.grpc.h2 import frames as f
from repokit.frontends.grpc.h2.connection import Connection
from repokit.protocol.generated import grpc_service_pb2 as pb
from tests.frontends.grpc.test_native_transport import INFER, _serve

SMALL_FRAME = 16 * 1024


class Transport:
    """What the connection writes, kept; the rest of an asyncio transport it asks for."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data: bytes | memoryview) -> None:
        self.data += data

    def writelines(self, parts: list[bytes | memoryview]) -> None:
        for part in parts:
            self.data += part

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.fixture
async def native() -> AsyncIterator[Any]:
    server = await _serve()
    yield server.server
    await server.stop(None)


def _request(values: np.ndarray) -> bytes:
    msg = pb.ModelInferRequest(model_name="echo", raw_input_contents=[values.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[values.size])
    raw = msg.SerializeToString()
    return b"\0" + len(raw).to_bytes(4, "big") + raw


def _frames(stream: int, body: bytes, sizes: list[int], padded: set[int]) -> list[bytes]:
    """``body`` as DATA frames of ``sizes`` (repeated), the last with END_STREAM; the frames
    whose index is in ``padded`` carry 3 bytes of padding."""
    out: list[bytes] = []
    pos = 0
    while pos < len(body):
        size = sizes[len(out) % len(sizes)]
        chunk = body[pos : pos + size]
        pos += size
        flags = f.END_STREAM if pos >= len(body) else 0
        if len(out) in padded:
            out.append(f.frame(f.DATA, flags | f.PADDED, stream, b"\x03" + chunk + b"\0\0\0"))
        else:
            out.append(f.frame(f.DATA, flags, stream, chunk))
    return out


def _feed(conn: Connection, data: bytes, reads: list[int]) -> None:
    """``data`` as the socket would give it: each read at most the next of ``reads`` (in turn)
    and at most the buffer the connection offers."""
    pos = 0
    turn = 0
    while pos < len(data) and not conn.closed:
        buffer = conn.get_buffer(-1)
        n = min(len(buffer), reads[turn % len(reads)], len(data) - pos)
        turn += 1
        buffer[:n] = data[pos : pos + n]
        pos += n
        conn.buffer_updated(n)


def _responses(written: bytes) -> tuple[dict[int, bytes], dict[int, str], int | None]:
    """The DATA each stream got, its grpc-status, and the GOAWAY error code (None: none)."""
    decoder = hpack.Decoder()
    data: dict[int, bytearray] = {}
    status: dict[int, str] = {}
    goaway = None
    pos = 0
    while pos + 9 <= len(written):
        length = int.from_bytes(written[pos : pos + 3], "big")
        kind = written[pos + 3]
        stream = struct.unpack(">I", written[pos + 5 : pos + 9])[0] & 0x7FFFFFFF
        payload = bytes(written[pos + 9 : pos + 9 + length])
        pos += 9 + length
        if kind == f.DATA:
            data.setdefault(stream, bytearray()).extend(payload)
        elif kind == f.HEADERS:
            fields = {str(k): str(v) for k, v in decoder.decode(payload)}
            if "grpc-status" in fields:
                status[stream] = fields["grpc-status"]
        elif kind == f.GOAWAY:
            goaway = struct.unpack(">II", payload[:8])[1]
    return {k: bytes(v) for k, v in data.items()}, status, goaway


async def _run(native: Any, data: bytes, reads: list[int], streams: int) -> Transport:
    conn = Connection(native)
    transport = Transport()
    conn.connection_made(transport)
    client_settings = {f.MAX_FRAME_SIZE: 1 << 20, f.INITIAL_WINDOW_SIZE: (1 << 31) - 1}
    opening = f.PREFACE + f.settings_frame(client_settings) + f.window_update(0, 1 << 30)
    _feed(conn, opening + data, reads)
    for _ in range(500):  # the handlers answer in tasks of the loop
        await asyncio.sleep(0.01)
        if len(_responses(bytes(transport.data))[1]) >= streams or conn.closed:
            break
    conn.connection_lost(None)
    return transport


def _head(encoder: hpack.Encoder, stream: int) -> bytes:
    block = encoder.encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", INFER),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    return f.frame(f.HEADERS, f.END_HEADERS, stream, block)


def _echoed(got: bytes, values: np.ndarray) -> bool:
    reply = pb.ModelInferResponse.FromString(got[5:])
    return bool(reply.raw_output_contents[0] == values.tobytes())


@pytest.fixture
def unpacked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each packed read brought (the test sees the packed path was taken)."""
    seen: list[int] = []
    original = Connection._unpack

    def spy(self: Connection, call: Any, view: memoryview, nbytes: int) -> None:
        seen.append(nbytes)
        original(self, call, view, nbytes)

    monkeypatch.setattr(Connection, "_unpack", spy)
    return seen


@pytest.mark.parametrize("read", [7, 9, 100, 16 * 1024 + 9, 65536, 1 << 22])
async def test_small_frames_of_a_large_message_are_read_into_it(
    native: Any, unpacked: list[int], read: int
) -> None:
    values = np.random.default_rng(read).random(1 << 18, dtype=np.float32)  # 1 MiB
    encoder = hpack.Encoder()
    data = _head(encoder, 1) + b"".join(_frames(1, _request(values), [SMALL_FRAME], set()))
    transport = await _run(native, data, [read], 1)
    got, status, goaway = _responses(bytes(transport.data))
    assert goaway is None
    assert status == {1: "0"}
    assert _echoed(got[1], values)
    assert sum(unpacked) > len(data) // 2  # most of it came by packed reads


async def test_frames_of_other_streams_and_the_connection_between_the_frames(
    native: Any, unpacked: list[int]
) -> None:
    """A second call's HEADERS and DATA, PINGs, WINDOW_UPDATEs and a padded DATA frame of the
    large call in the middle of its message: both calls answered, the PINGs acknowledged."""
    big = np.random.default_rng(1).random(1 << 17, dtype=np.float32)
    small = np.arange(16, dtype=np.float32)
    encoder = hpack.Encoder()
    frames = _frames(1, _request(big), [SMALL_FRAME, 5000], padded={6})
    data = _head(encoder, 1) + b"".join(frames[:4])  # (heads are encoded in the order sent)
    others = [
        _head(encoder, 3),
        f.frame(f.PING, 0, 0, b"12345678"),
        f.frame(f.DATA, f.END_STREAM, 3, _request(small)),
        f.window_update(0, 1000),
    ]
    for frame in others:
        data += frame + b"".join(frames[4:8])
        frames = frames[:4] + frames[8:]
    data += b"".join(frames[4:])
    transport = await _run(native, data, [70000, 20000, 13], 2)
    got, status, goaway = _responses(bytes(transport.data))
    assert goaway is None
    assert status == {1: "0", 3: "0"}
    assert _echoed(got[1], big) and _echoed(got[3], small)
    assert b"12345678" in transport.data  # the PING's ACK
    assert unpacked


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40000), min_size=1, max_size=4),
    reads=st.lists(st.integers(1, 300000), min_size=1, max_size=5),
    padded=st.sets(st.integers(0, 30), max_size=4),
    elements=st.integers(1100, 70000),
)
def test_any_frames_and_reads_give_the_message_whole(
    sizes: list[int], reads: list[int], padded: set[int], elements: int
) -> None:
    values = np.random.default_rng(elements).random(elements, dtype=np.float32)

    async def run() -> None:
        server = await _serve()
        try:
            encoder = hpack.Encoder()
            data = _head(encoder, 1) + b"".join(_frames(1, _request(values), sizes, padded))
            transport = await _run(server.server, data, reads, 1)
        finally:
            await server.stop(None)
        got, status, goaway = _responses(bytes(transport.data))
        assert goaway is None
        assert status == {1: "0"}
        assert _echoed(got[1], values)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (f.frame(f.DATA, 0, 5, b"x" * 10), f.PROTOCOL_ERROR),  # an idle stream
        (f.frame(f.DATA, 0, 1, b"x" * 10) + f.frame(f.PING, 0, 0, b"1234"), f.FRAME_SIZE_ERROR),
    ],
    ids=["data_on_idle_stream", "short_ping_after_data"],
)
async def test_a_bad_frame_inside_a_packed_read_ends_the_connection(
    native: Any, unpacked: list[int], bad: bytes, code: int
) -> None:
    values = np.random.default_rng(2).random(1 << 18, dtype=np.float32)
    frames = _frames(1, _request(values), [SMALL_FRAME], set())
    # past what the first read (into the connection's own buffer) takes
    data = _head(hpack.Encoder(), 1) + b"".join(frames[:30]) + bad + b"".join(frames[30:])
    transport = await _run(native, data, [1 << 20], 1)
    assert _responses(bytes(transport.data))[2] == code
    assert unpacked


async def test_data_after_the_end_of_the_stream_in_a_packed_read(
    native: Any, unpacked: list[int]
) -> None:
    """A DATA frame on a stream whose client side ended resets that stream (STREAM_CLOSED) and
    the connection goes on: a second call on it is answered."""
    values = np.random.default_rng(3).random(1 << 16, dtype=np.float32)
    small = np.arange(4, dtype=np.float32)
    encoder = hpack.Encoder()
    frames = _frames(1, _request(values), [SMALL_FRAME], set())
    data = _head(encoder, 1) + b"".join(frames) + f.frame(f.DATA, 0, 1, b"y" * 100)
    data += _head(encoder, 3) + f.frame(f.DATA, f.END_STREAM, 3, _request(small))
    transport = await _run(native, data, [1 << 20], 2)
    got, status, goaway = _responses(bytes(transport.data))
    assert goaway is None
    assert status.get(3) == "0" and _echoed(got[3], small)


def test_the_threshold_between_packed_and_direct_reads() -> None:
    assert h2_connection.DIRECT_FRAME_MIN > SMALL_FRAME
