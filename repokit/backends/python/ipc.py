"""Framed pickle messages over a Unix socket between the server and an instance process.

A frame is ``<pickle length: u64><buffer count: u32>``, then ``<length: u64><segment offset:
u64>`` per out-of-band buffer, the pickle (protocol 5), then the bytes of the out-of-band
buffers that travel in the stream. Tensors travel as ``(dtype string, shape, buffer)``
(:func:`pack_array` / :func:`unpack_array`), which pickles and unpickles several times faster
than a numpy array; buffers of 64 KiB and more go out of band: the sender writes their memory
straight to the socket (one ``sendmsg`` for the whole frame) and the receiver reads each into
its own uninitialised buffer that the unpacked array then uses, so a large tensor is copied only by
the kernel. Buffers of :data:`~repokit.backends.python.segments.SEGMENT_LIMIT` and more go as
shared-memory segments when the channel has a descriptor socket (:mod:`.segments`; their offset
field is not :data:`IN_STREAM`). Small frames are read whole by one ``recv_into`` into a
reusable buffer.

:class:`FrameParser` is the socket-free decoding state machine both sides share: the instance
process drives it with blocking reads (:class:`BlockingChannel`), the server from an event-loop
reader callback (:mod:`repokit.backends.python.channel`), so a hung or dead instance never
blocks the event loop.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import socket
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.python.segments import SEGMENT_LIMIT, FdSocket, SegmentError

INBAND_LIMIT = 64 * 1024
_PREFIX = struct.Struct("<QI")
_ENTRY = struct.Struct("<QQ")  # length, segment offset (IN_STREAM: the bytes follow the pickle)
IN_STREAM = (1 << 64) - 1
_INITIAL_INBOX = 64 * 1024
_MIN_FREE = 4096
SOCKET_BUFFER = 4 * 1024 * 1024
# numpy kinds sent as raw bytes: bool, signed/unsigned integers, floats, complex
_RAW_KINDS = frozenset("biufc")
# a packed tensor: (dtype string, shape, buffer) or (None, None, array) for other dtypes
PackedArray = tuple[str | None, tuple[int, ...] | None, Any]


class ChannelClosed(Exception):
    """The other end closed the socket (the process exited or crashed)."""


# --- tensors ----------------------------------------------------------------------------------
@functools.cache
def _raw_dtype_text(dtype: np.dtype[Any]) -> str | None:
    """The dtype string a numeric dtype travels as (``dtype.str`` costs a quarter of a
    microsecond each time), None for the others."""
    return dtype.str if dtype.kind in _RAW_KINDS else None


def pack_array(array: npt.NDArray[Any]) -> PackedArray:
    """A numeric array as (dtype, shape, buffer); anything else (BYTES) as itself. A small
    array's bytes are copied into a bytearray (cheaper to pickle than a PickleBuffer, and
    unpickled as a writable bytearray all the same); a large one goes as a PickleBuffer, out
    of band."""
    text = _raw_dtype_text(array.dtype)
    if text is None:
        return (None, None, array)
    if array.nbytes < INBAND_LIMIT:
        return (text, array.shape, bytearray(array))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return (text, array.shape, pickle.PickleBuffer(array.data))


def unpack_array(packed: PackedArray, dtypes: dict[str, np.dtype[Any]]) -> npt.NDArray[Any]:
    """The array of :func:`pack_array` (``dtypes`` caches parsed dtype strings)."""
    dtype_text, shape, data = packed
    if dtype_text is None:
        array: npt.NDArray[Any] = data
        return array
    dtype = dtypes.get(dtype_text)
    if dtype is None:
        dtype = dtypes[dtype_text] = np.dtype(dtype_text)
    assert shape is not None  # a numeric array travels with its shape
    # the array over the buffer in one call (half what frombuffer and reshape cost)
    array = np.ndarray(shape, dtype, data)
    return array


# --- frames -----------------------------------------------------------------------------------
def encode(message: Any) -> list[bytes | memoryview]:
    """The parts of one frame, to be written in order (raises if ``message`` won't pickle)."""
    return _encode(message, None, [], [])


def encode_shared(
    message: Any, fd_socket: FdSocket | None
) -> tuple[list[bytes | memoryview], list[int], list[int]]:
    """:func:`encode` with large buffers put in segments of ``fd_socket``: the frame's parts, the
    descriptors to pass (``fd_socket.send_fds``) before it, and those of them created for it (to
    close once passed)."""
    fds: list[int] = []
    created: list[int] = []
    try:
        parts = _encode(message, fd_socket, fds, created)
    except BaseException:
        close_fds(created)
        raise
    return parts, fds, created


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _encode(
    message: Any, fd_socket: FdSocket | None, fds: list[int], created: list[int]
) -> list[bytes | memoryview]:
    buffers: list[memoryview] = []
    entries: list[bytes] = []

    def keep_small_inband(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        size = raw.nbytes
        if size < INBAND_LIMIT:
            return True
        if fd_socket is not None and size >= SEGMENT_LIMIT:
            offset = fd_socket.share(raw, fds, created)
            if offset is not None:
                entries.append(_ENTRY.pack(size, offset))
                return False
        buffers.append(raw)
        entries.append(_ENTRY.pack(size, IN_STREAM))
        return False

    body = pickle.dumps(message, protocol=5, buffer_callback=keep_small_inband)
    if not entries:
        return [_PREFIX.pack(len(body), 0), body]
    head = _PREFIX.pack(len(body), len(entries)) + b"".join(entries)
    return [head, body, *buffers]


def _uninitialised(size: int) -> npt.NDArray[np.uint8]:
    """A writable buffer for an out-of-band tensor (not zero-filled: it is received into)."""
    return np.empty(size, dtype=np.uint8)


def enlarge_buffers(sock: socket.socket) -> None:
    """Socket buffers that hold a few MiB, so a large tensor needs fewer send/receive rounds
    (the kernel caps the size at ``net.core.wmem_max`` / ``rmem_max``)."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):  # refused by the kernel: keep its default
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)


class FrameParser:
    """Decodes frames from bytes the caller receives into :meth:`buffer`.

    Receive into ``buffer()``, then call ``feed(n)`` with the byte count; it returns the
    messages completed by those bytes. Frame heads and pickles accumulate in one reusable
    buffer; out-of-band buffers are received directly into their final buffer, segments are
    mapped from the descriptors ``fd_socket`` received (a frame naming segments without one
    raises :class:`~repokit.backends.python.segments.SegmentError`, an ``OSError``).
    """

    def __init__(self, fd_socket: FdSocket | None = None) -> None:
        self._fd_socket = fd_socket
        self._inbox = bytearray(_INITIAL_INBOX)
        self._view = memoryview(self._inbox)
        self._start = 0  # first unconsumed byte
        self._end = 0  # end of received bytes
        self._frame: tuple[int, int, tuple[int, ...]] | None = None  # head size, body, entries
        # an out-of-band read in progress: the pickle, every buffer of the frame, those that
        # come in the stream, current index among them, bytes in it
        self._body: bytes = b""
        self._all: list[Any] = []
        self._buffers: list[npt.NDArray[np.uint8]] = []
        self._index = 0
        self._got = 0

    def buffer(self) -> memoryview:
        """Where the next received bytes go."""
        if self._buffers:
            return self._buffers[self._index].data[self._got :]
        if len(self._inbox) - self._end < _MIN_FREE:
            self._reserve(self._end - self._start + _MIN_FREE)
        return self._view[self._end :]

    def feed(self, count: int) -> list[Any]:
        """Account for ``count`` bytes received into :meth:`buffer`; the finished messages."""
        messages: list[Any] = []
        if self._buffers:
            self._got += count
            if self._got < len(self._buffers[self._index]):
                return messages
            self._index += 1
            self._got = 0
            if self._index < len(self._buffers):
                return messages
            self._buffers = []
            every, self._all = self._all, []
            body, self._body = self._body, b""
            messages.append(pickle.loads(body, buffers=every))
            return messages
        self._end += count
        while self._parse_one(messages):
            pass
        if self._start == self._end:
            self._start = self._end = 0
        return messages

    def _frame_buffers(self, entries: tuple[int, ...]) -> tuple[list[Any], list[Any]]:
        """Every out-of-band buffer of a frame (for the unpickler) and those of them that come
        in the stream, to receive into."""
        pairs = [(entries[i], entries[i + 1]) for i in range(0, len(entries), 2)]
        shared = [pair for pair in pairs if pair[1] != IN_STREAM]
        if not shared:
            buffers = [_uninitialised(size) for size, _ in pairs]
            return buffers, buffers
        if self._fd_socket is None:
            raise SegmentError("a frame names shared-memory segments on a channel without them")
        mapped = iter(self._fd_socket.receive(shared))
        every: list[Any] = []
        stream: list[Any] = []
        for size, offset in pairs:
            if offset == IN_STREAM:
                stream.append(_uninitialised(size))
                every.append(stream[-1])
            else:
                every.append(next(mapped))
        return every, stream

    def _parse_one(self, messages: list[Any]) -> bool:
        available = self._end - self._start
        frame = self._frame
        if frame is None:
            if available < _PREFIX.size:
                return False
            body_size, count = _PREFIX.unpack_from(self._inbox, self._start)
            head_size = _PREFIX.size + _ENTRY.size * count
            if available < head_size:
                self._reserve(head_size)
                return False
            entries = struct.unpack_from(f"<{2 * count}Q", self._inbox, self._start + _PREFIX.size)
            frame = self._frame = (head_size, body_size, entries)
        head_size, body_size, entries = frame
        if available < head_size + body_size:
            self._reserve(head_size + body_size)
            return False
        body_start = self._start + head_size
        position = body_start + body_size
        self._frame = None
        if not entries:
            self._start = position
            messages.append(pickle.loads(self._view[body_start:position]))
            return True
        every, buffers = self._frame_buffers(entries)
        index = got = 0
        while index < len(buffers) and position < self._end:  # bytes already in the inbox
            take = min(len(buffers[index]) - got, self._end - position)
            buffers[index][got : got + take] = self._view[position : position + take]
            position += take
            got += take
            if got == len(buffers[index]):
                index += 1
                got = 0
        body = self._view[body_start : body_start + body_size]
        self._start = position
        while index < len(buffers) and len(buffers[index]) == 0:
            index += 1
        if index == len(buffers):
            messages.append(pickle.loads(body, buffers=every))
            return True
        self._body = bytes(body)  # the inbox is reused while the buffers arrive
        self._all = every
        self._buffers, self._index, self._got = buffers, index, got
        return False

    def _reserve(self, size: int) -> None:
        """Make room for ``size`` bytes from the first unconsumed one."""
        if self._start + size <= len(self._inbox):
            return
        pending = self._end - self._start
        if size <= len(self._inbox):
            self._inbox[:pending] = self._view[self._start : self._end]
        else:
            inbox = bytearray(max(size, 2 * len(self._inbox)))
            inbox[:pending] = self._view[self._start : self._end]
            self._inbox, self._view = inbox, memoryview(inbox)
        self._start, self._end = 0, pending


# --- blocking (instance process) ------------------------------------------------------------
class BlockingChannel:
    """The instance process's end: blocking ``recv`` of whole messages, one ``sendmsg`` each."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._parser = FrameParser()
        self._ready: list[Any] = []

    def recv(self) -> Any:
        while not self._ready:
            count = self._sock.recv_into(self._parser.buffer())
            if count == 0:
                raise ChannelClosed("connection closed")
            self._ready = self._parser.feed(count)
        return self._ready.pop(0)

    def send(self, message: Any) -> None:
        send_parts(self._sock, encode(message))


def send_parts(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    """Write every part with as few ``sendmsg`` calls as the socket allows (blocking)."""
    if len(parts) == 2 and type(parts[0]) is bytes and type(parts[1]) is bytes:
        # a frame without out-of-band buffers (encode's head and pickle): usually written
        # whole by the first call
        sent = sock.sendmsg(parts)
        if sent == len(parts[0]) + len(parts[1]):
            return
        pending = advance([memoryview(p) for p in parts], sent)
    else:
        pending = [memoryview(p) for p in parts]
    while pending:
        sent = sock.sendmsg(pending[:512])
        pending = advance(pending, sent)


def advance(parts: list[memoryview], sent: int) -> list[memoryview]:
    """``parts`` without their first ``sent`` bytes."""
    index = 0
    while index < len(parts) and sent >= parts[index].nbytes:
        sent -= parts[index].nbytes
        index += 1
    rest = parts[index:]
    if sent and rest:
        rest[0] = rest[0][sent:]
    return rest
