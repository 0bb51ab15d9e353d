"""Framed pickle messages over a Unix socket between the server and an instance process.

A frame is ``<pickle length: u64><buffer count: u32><buffer lengths: u64 * n>``, the pickle
(protocol 5), then the out-of-band buffers. numpy arrays of 64 KiB and more travel out of band:
the sender writes their memory straight to the socket and the receiver reads each into its own
``bytearray`` that the unpickled array then uses, so a large tensor is copied only by the kernel.
Small arrays stay inside the pickle, which keeps a frame to one ``send`` and two ``recv`` calls.

The instance process uses the blocking functions; the server uses the asyncio ones on a
non-blocking socket, so a hung or dead instance never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from typing import Any

INBAND_LIMIT = 64 * 1024
_PREFIX = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")


class ChannelClosed(Exception):
    """The other end closed the socket (the process exited or crashed)."""


def encode(message: Any) -> list[bytes | memoryview]:
    """The parts of one frame (to be written in order)."""
    buffers: list[memoryview] = []

    def keep_small_inband(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < INBAND_LIMIT:
            return True
        buffers.append(raw)
        return False

    body = pickle.dumps(message, protocol=5, buffer_callback=keep_small_inband)
    head = _PREFIX.pack(len(body), len(buffers)) + b"".join(_LENGTH.pack(b.nbytes) for b in buffers)
    if not buffers:
        return [head + body]
    return [head + body, *buffers]


def _decode(body: bytes | bytearray, buffers: list[bytearray]) -> Any:
    return pickle.loads(body, buffers=buffers)


# --- blocking (instance process) ------------------------------------------------------------
def _recv_exact(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise ChannelClosed("connection closed")
        got += n
    return buffer


def send(sock: socket.socket, message: Any) -> None:
    for part in encode(message):
        sock.sendall(part)


def recv(sock: socket.socket) -> Any:
    body_size, count = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size))
    rest = _recv_exact(sock, _LENGTH.size * count + body_size)
    sizes = [_LENGTH.unpack_from(rest, i * _LENGTH.size)[0] for i in range(count)]
    body = rest[_LENGTH.size * count :]
    return _decode(body, [_recv_exact(sock, size) for size in sizes])


# --- asyncio (server) ---------------------------------------------------------------------
async def _arecv_exact(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int
) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = await loop.sock_recv_into(sock, view[got:])
        if n == 0:
            raise ChannelClosed("connection closed")
        got += n
    return buffer


async def asend(sock: socket.socket, message: Any) -> None:
    loop = asyncio.get_running_loop()
    try:
        for part in encode(message):
            await loop.sock_sendall(sock, part)
    except OSError as exc:
        raise ChannelClosed(str(exc)) from exc


async def arecv(sock: socket.socket) -> Any:
    loop = asyncio.get_running_loop()
    try:
        prefix = await _arecv_exact(loop, sock, _PREFIX.size)
        body_size, count = _PREFIX.unpack(prefix)
        rest = await _arecv_exact(loop, sock, _LENGTH.size * count + body_size)
        sizes = [_LENGTH.unpack_from(rest, i * _LENGTH.size)[0] for i in range(count)]
        buffers = [await _arecv_exact(loop, sock, size) for size in sizes]
    except OSError as exc:
        raise ChannelClosed(str(exc)) from exc
    return _decode(rest[_LENGTH.size * count :], buffers)
