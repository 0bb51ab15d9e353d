"""Large tensors between the server and an instance process as shared-memory segments
(repokit.backends.python.segments): frames through a real socket pair and descriptor socket."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from repokit.backends.python import ipc, segments
from repokit.backends.python.channel import Channel
from repokit.backends.python.segments import (
    SEGMENT_LIMIT,
    FdSocket,
    Segment,
    SegmentError,
    fd_socket_pair,
)

BIG = SEGMENT_LIMIT // 4 + 1024  # float32 elements: just over the segment limit


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Pair:
    """Two ends of an instance socket and its descriptor socket (a sends, b receives)."""

    def __init__(self) -> None:
        self.a, self.b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.fds_a, fds_b = fd_socket_pair()
        self.send_fds_sock = FdSocket(self.fds_a)
        self.recv_fds_sock = FdSocket(fds_b)
        self.parser = ipc.FrameParser(self.recv_fds_sock)
        self.ready: list[Any] = []

    def send(self, message: Any) -> list[int]:
        parts, fds, created = ipc.encode_shared(message, self.send_fds_sock)
        try:
            if fds:
                self.send_fds_sock.send_fds(fds, wait=True)
            ipc.send_parts(self.a, parts)
        finally:
            ipc.close_fds(created)
        return created

    def receive(self) -> Any:
        while not self.ready:
            count = self.b.recv_into(self.parser.buffer())
            assert count > 0
            self.ready.extend(self.parser.feed(count))
        return self.ready.pop(0)

    def close(self) -> None:
        for end in (self.a, self.b):
            end.close()
        self.send_fds_sock.close()
        self.recv_fds_sock.close()


@pytest.fixture
def to_server() -> Iterator[Pair]:
    pair = Pair()
    yield pair
    pair.close()


@pytest.fixture
def to_instance() -> Iterator[Pair]:
    pair = Pair()
    yield pair
    pair.close()


def _segment(array: np.ndarray[Any, Any]) -> Segment | None:
    owner: Any = array
    while owner is not None and not isinstance(owner, Segment):
        owner = owner.obj if isinstance(owner, memoryview) else owner.base
    return owner


def test_a_large_buffer_arrives_as_a_view_of_a_segment_at_the_server(
    to_server: Pair,
) -> None:
    big = np.arange(BIG, dtype=np.float32)
    small = np.arange(10, dtype=np.int64)
    middle = np.ones(ipc.INBAND_LIMIT, dtype=np.uint8)  # out of band, through the socket
    created = to_server.send(
        ("out", ipc.pack_array(big), ipc.pack_array(small), ipc.pack_array(middle))
    )
    assert len(created) == 1
    got = to_server.receive()
    dtypes: dict[str, np.dtype[Any]] = {}
    arrays = [ipc.unpack_array(packed, dtypes) for packed in got[1:]]
    np.testing.assert_array_equal(arrays[0], big)
    np.testing.assert_array_equal(arrays[1], small)
    np.testing.assert_array_equal(arrays[2], middle)
    assert _segment(arrays[0]) is not None
    assert arrays[0].flags.writeable  # as the sender's array was
    assert _segment(arrays[2]) is None


def test_the_server_passes_a_received_segment_on_without_copying(to_server: Pair) -> None:
    big = np.arange(3 * BIG, dtype=np.float32)
    to_server.send(("in", ipc.pack_array(big)))
    received = ipc.unpack_array(to_server.receive()[1], {})
    segment = _segment(received)
    assert segment is not None
    onward = Pair()
    try:
        part = received[BIG : 2 * BIG + 7]  # a slice: same segment, at an offset
        parts, fds, created = ipc.encode_shared(("on", ipc.pack_array(part)), onward.send_fds_sock)
        assert created == [] and fds == [segment.fd]
        onward.send_fds_sock.send_fds(fds, wait=True)
        ipc.send_parts(onward.a, parts)
        final = ipc.unpack_array(onward.receive()[1], {})
        np.testing.assert_array_equal(final, big[BIG : 2 * BIG + 7])
    finally:
        onward.close()


def test_an_instance_may_write_its_copy_without_changing_the_segment(
    to_server: Pair, to_instance: Pair
) -> None:
    big = np.full(BIG, 2.0, dtype=np.float32)
    to_server.send(("x", ipc.pack_array(big)))
    at_server = ipc.unpack_array(to_server.receive()[1], {})
    for _ in range(2):  # the server passes one segment on twice: two mappings of one file
        assert to_instance.send(("x", ipc.pack_array(at_server))) == []
    first = ipc.unpack_array(to_instance.receive()[1], {})
    second = ipc.unpack_array(to_instance.receive()[1], {})
    assert first.flags.writeable and second.flags.writeable
    first[:] = 5.0
    assert float(second.max()) == 2.0 and float(at_server.max()) == 2.0


def test_a_segment_whose_pages_were_written_is_copied_into_a_new_one(to_instance: Pair) -> None:
    to_instance.send(("x", ipc.pack_array(np.ones(BIG, dtype=np.float32))))
    received = ipc.unpack_array(to_instance.receive()[1], {})
    received[BIG // 2] = 7.0  # copy-on-write: the file still holds 1.0 there
    back = Pair()
    try:
        assert len(back.send(("y", ipc.pack_array(received)))) == 1
        final = ipc.unpack_array(back.receive()[1], {})
        assert final[BIG // 2] == 7.0 and float(final.sum()) == BIG + 6.0
    finally:
        back.close()


def test_a_segment_only_read_is_passed_on_as_it_is(to_instance: Pair) -> None:
    to_instance.send(("x", ipc.pack_array(np.ones(BIG, dtype=np.float32))))
    received = ipc.unpack_array(to_instance.receive()[1], {})
    assert float(received.sum()) == BIG  # every page read (faulted in), none written
    back = Pair()
    try:
        assert back.send(("y", ipc.pack_array(received))) == []
        np.testing.assert_array_equal(ipc.unpack_array(back.receive()[1], {}), 1.0)
    finally:
        back.close()


def test_small_buffers_never_become_segments(to_server: Pair) -> None:
    parts, fds, created = ipc.encode_shared(
        ("x", ipc.pack_array(np.zeros(SEGMENT_LIMIT // 4 - 1, dtype=np.float32))),
        to_server.send_fds_sock,
    )
    assert fds == [] and created == []
    assert sum(memoryview(p).nbytes for p in parts) > SEGMENT_LIMIT - 8


def test_a_frame_naming_segments_without_a_descriptor_socket_is_refused(to_server: Pair) -> None:
    parts, _, created = ipc.encode_shared(
        ("x", ipc.pack_array(np.zeros(BIG, dtype=np.float32))), to_server.send_fds_sock
    )
    ipc.close_fds(created)
    stream = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    parser = ipc.FrameParser()
    target = parser.buffer()
    target[: len(stream)] = stream
    with pytest.raises(SegmentError, match="without them"):
        parser.feed(len(stream))
    assert issubclass(SegmentError, OSError)  # the channel treats it as a broken connection


def test_a_segment_entry_beyond_its_file_is_refused_and_its_descriptor_closed(
    to_server: Pair,
) -> None:
    before = _open_fds()
    parts, fds, created = ipc.encode_shared(
        ("x", ipc.pack_array(np.zeros(BIG, dtype=np.float32))), to_server.send_fds_sock
    )
    head = bytearray(bytes(parts[0]))
    size, _ = struct.unpack_from("<QQ", head, 12)
    struct.pack_into("<QQ", head, 12, size, 4096)  # the file is only `size` bytes long
    to_server.send_fds_sock.send_fds(fds, wait=True)
    ipc.close_fds(created)
    ipc.send_parts(to_server.a, [bytes(head), *parts[1:]])
    with pytest.raises(SegmentError, match=f"has no {size} bytes at 4096"):
        to_server.receive()
    assert _open_fds() == before


def test_a_missing_descriptor_message_is_refused(to_server: Pair) -> None:
    parts, _, created = ipc.encode_shared(
        ("x", ipc.pack_array(np.zeros(BIG, dtype=np.float32))), to_server.send_fds_sock
    )
    ipc.close_fds(created)
    to_server.fds_a.send(b"s")  # a descriptor-socket message without descriptors
    ipc.send_parts(to_server.a, parts)
    with pytest.raises(SegmentError, match="expected 1 segment descriptors, got 0"):
        to_server.receive()


async def test_the_server_sends_through_the_socket_when_the_descriptor_socket_is_gone() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds_a, fds_b = fd_socket_pair()
    fds_b.close()  # passing descriptors fails: the bytes must still arrive
    lost = asyncio.Event()
    channel = Channel(a, lost.set, fd_socket=FdSocket(fds_a))
    big = np.arange(BIG, dtype=np.float32)
    channel.send(("@x", ipc.pack_array(big)))
    parser = ipc.FrameParser()
    b.settimeout(30)

    def receive() -> list[Any]:
        got: list[Any] = []
        while not got:
            count = b.recv_into(parser.buffer())
            assert count > 0
            got = parser.feed(count)
        return got

    got = await asyncio.to_thread(receive)  # the event loop writes the rest meanwhile
    np.testing.assert_array_equal(ipc.unpack_array(got[0][1], {}), big)
    channel.close()
    b.close()
    assert lost.is_set()


def test_a_read_only_array_arrives_read_only(to_instance: Pair) -> None:
    body = np.arange(BIG, dtype=np.float32).tobytes()
    sent = np.frombuffer(body, dtype=np.float32)  # as the server decodes an HTTP body
    to_instance.send(("x", ipc.pack_array(sent)))
    got = ipc.unpack_array(to_instance.receive()[1], {})
    assert _segment(got) is not None and not got.flags.writeable
    np.testing.assert_array_equal(got, sent)


def test_without_a_page_map_every_segment_is_copied(
    to_instance: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    to_instance.send(("x", ipc.pack_array(np.ones(BIG, dtype=np.float32))))
    received = ipc.unpack_array(to_instance.receive()[1], {})
    monkeypatch.setattr(segments, "_open_pagemap", lambda: None)  # no /proc
    back = Pair()
    try:
        assert len(back.send(("y", ipc.pack_array(received)))) == 1  # a new segment
        np.testing.assert_array_equal(ipc.unpack_array(back.receive()[1], {}), 1.0)
    finally:
        back.close()
