"""``ipc.send_parts`` writes a frame whole even when the socket takes it in several pieces (a
pickle larger than the socket's buffer), through its one-call path for frames without
out-of-band buffers as through the general one."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from repokit.backends.python import ipc


def _receive_all(sock: socket.socket, size: int, into: bytearray) -> None:
    while len(into) < size:
        chunk = sock.recv(size - len(into))
        if not chunk:
            return
        into.extend(chunk)


@pytest.mark.parametrize("oob", [False, True], ids=["in-band", "out-of-band"])
def test_a_frame_larger_than_the_socket_buffer_arrives_whole(oob: bool) -> None:
    array = np.arange(300_000, dtype=np.float32)  # 1.2 MB
    packed = ipc.pack_array(array) if oob else (None, None, array.astype(object)[:20_000])
    parts = ipc.encode(("msg", packed))
    assert (len(parts) == 2) != oob
    expected = b"".join(bytes(part) for part in parts)
    sender, receiver = socket.socketpair()
    with sender, receiver:
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
        received = bytearray()
        reader = threading.Thread(target=_receive_all, args=(receiver, len(expected), received))
        reader.start()
        ipc.send_parts(sender, parts)
        reader.join(timeout=30)
    assert bytes(received) == expected
    parser = ipc.FrameParser()
    messages = []
    offset = 0
    while offset < len(expected):
        view = parser.buffer()
        take = min(len(view), len(expected) - offset)
        view[:take] = expected[offset : offset + take]
        messages += parser.feed(take)
        offset += take
    [(tag, back)] = messages
    assert tag == "msg"
    if oob:
        np.testing.assert_array_equal(ipc.unpack_array(back, {}), array)
    else:
        assert list(back[2]) == list(array.astype(object)[:20_000])


class _Trickle:
    """A socket whose ``sendmsg`` takes at most ``limit`` bytes a call (as a blocking socket
    may when a signal interrupts it)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.written = bytearray()
        self.calls = 0

    def sendmsg(self, buffers: list[bytes | memoryview]) -> int:
        self.calls += 1
        data = b"".join(bytes(b) for b in buffers)[: self.limit]
        self.written.extend(data)
        return len(data)


@pytest.mark.parametrize("oob", [False, True], ids=["in-band", "out-of-band"])
def test_partial_writes_continue_where_the_last_one_stopped(oob: bool) -> None:
    array = np.arange(40_000, dtype=np.float32)
    packed = ipc.pack_array(array) if oob else ipc.pack_array(array[:1000])
    parts = ipc.encode(("msg", packed))
    expected = b"".join(bytes(part) for part in parts)
    sock = _Trickle(1000)
    ipc.send_parts(sock, parts)  # type: ignore[arg-type]
    assert bytes(sock.written) == expected
    assert sock.calls == -(-len(expected) // 1000)
