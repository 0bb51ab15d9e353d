"""Large tensors between the server and an instance process as shared-memory segments.

A buffer of :data:`SEGMENT_LIMIT` bytes or more does not travel through the instance socket:
the sender puts it in an anonymous shared-memory file (``memfd_create``; nothing appears in
``/dev/shm`` and the kernel frees it when the last holder closes it, also when a process
crashes), passes the file's descriptor over a second socket of the pair, the :class:`FdSocket`
(``SCM_RIGHTS``, one small message per frame, sent before the frame), and the frame names the
segment, its offset and length in place of the bytes. The receiver maps the file: its array is a
view of the segment, not a copy, and untouched pages cost it no memory.

Both ends map segments copy-on-write: the arrays are writable as before (a write stays in the
process that made it), and whether an array arrives writable still follows the sender's array
(pickle's read-only buffer flag).

An array that is a view of a received segment is passed on as that same segment when none of
its pages was written in this process (the page map, ``/proc/self/pagemap``, still shows them
as the file's pages, or not faulted in): a BLS caller's input goes to the called model, and an
identity-like model's output back to the caller, without a copy anywhere. A written page (a
private copy the file would not show) makes the sender copy the bytes into a new segment.

Why only from :data:`SEGMENT_LIMIT` (32 MiB) up: a new segment per tensor costs more CPU than
the socket's two kernel copies (a new file, its pages allocated, mapped, faulted in, unmapped
and freed for every message): through the dynamic batcher, 1 MiB and 16 MiB tensors took 1.2x
and 2x the CPU per request with segments (``benchmarks/README.md``). The memory a segment
saves matters for the large tensors the limit is meant for (the 64 MiB round trip below,
Triton's 1 GiB ``bls_memory``).

A BLS round trip of a 64 MiB FP32 tensor to a python identity model holds 2 copies of it at
peak over the three processes (the caller's own array and the response it reads), where the
socket alone held 5: ``tests/backends/test_python_bls_memory.py`` keeps it below 3.
"""

from __future__ import annotations

import array
import contextlib
import mmap
import os
import socket
import weakref
from typing import Any

import numpy as np

SEGMENT_LIMIT = 32 * 1024 * 1024
MAX_SEGMENTS = 32  # per frame (one SCM_RIGHTS message); more large buffers go through the socket
_WRITE_CHUNK = 1 << 30
_FD_SIZE = array.array("i").itemsize


class SegmentError(ConnectionError):
    """A frame named a segment that was not passed or does not hold the bytes it names (an
    ``OSError``: the channel treats it as a broken connection)."""


class Segment(mmap.mmap):
    """A mapped segment; it keeps the segment's descriptor (``fd``) to pass it on."""

    fd: int
    address: int


def _address(buffer: Any) -> int:
    address: int = np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0]
    return address


def _segment_of(buffer: memoryview) -> Segment | None:
    """The segment a buffer (an array's memory) lies in, if it is a view of one."""
    owner: Any = buffer.obj
    for _ in range(64):
        if isinstance(owner, Segment):
            return owner
        if isinstance(owner, np.ndarray):
            owner = owner.base
        elif isinstance(owner, memoryview):
            owner = owner.obj
        else:
            return None
    return None


_PRESENT = np.uint64(1 << 63)
_SWAPPED = np.uint64(1 << 62)
_FILE_PAGE = np.uint64(1 << 61)


def _unwritten(pagemap: int, address: int, size: int) -> bool:
    """Whether no page of ``[address, address + size)`` of a private file mapping was written
    (a written page is the process's own: present or swapped, and not the file's)."""
    first = address // mmap.PAGESIZE
    count = (address + size - 1) // mmap.PAGESIZE - first + 1
    try:
        raw = os.pread(pagemap, 8 * count, 8 * first)
    except OSError:
        return False
    if len(raw) != 8 * count:
        return False
    entries = np.frombuffer(raw, dtype=np.uint64)
    own = ((entries & _PRESENT) != 0) & ((entries & _FILE_PAGE) == 0)
    return not (own.any() or ((entries & _SWAPPED) != 0).any())


def _open_pagemap() -> int | None:
    try:
        return os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no /proc: every segment is copied
        return None


def _new_segment(buffer: memoryview) -> int:
    """A new segment file holding ``buffer``'s bytes (its descriptor)."""
    fd = os.memfd_create("repokit-tensor", os.MFD_CLOEXEC)
    try:
        data = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
        done, total = 0, data.nbytes
        while done < total:
            done += os.write(fd, data[done : done + _WRITE_CHUNK])
    except BaseException:
        os.close(fd)
        raise
    return fd


class FdSocket:
    """One end of the descriptor socket beside an instance socket."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        self._sock = sock
        self._pagemap = _open_pagemap()

    # --- sending -------------------------------------------------------------------------------
    def share(self, buffer: memoryview, fds: list[int], created: list[int]) -> int | None:
        """Put ``buffer`` in a segment: appends its descriptor to ``fds`` (and to ``created``
        when it is a new file) and returns its offset there; None to send it through the
        socket instead (a full frame, or no memory for a segment)."""
        if len(fds) >= MAX_SEGMENTS:
            return None
        segment = _segment_of(buffer)
        if segment is not None and self._pagemap is not None:
            address = _address(buffer)
            if _unwritten(self._pagemap, address, buffer.nbytes):
                fds.append(segment.fd)
                return address - segment.address
        try:
            fd = _new_segment(buffer)
        except OSError:
            return None
        fds.append(fd)
        created.append(fd)
        return 0

    def send_fds(self, fds: list[int], *, wait: bool) -> None:
        """Pass ``fds`` (one message) ahead of the frame that names them; raises
        BlockingIOError when ``wait`` is false and the socket is full."""
        flags = 0 if wait else socket.MSG_DONTWAIT
        self._sock.sendmsg(
            [b"s"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))], flags
        )

    # --- receiving -----------------------------------------------------------------------------
    def receive(self, entries: list[tuple[int, int]]) -> list[memoryview]:
        """The buffers of a frame's segment ``entries`` (length, offset), mapped from the
        descriptors passed for that frame."""
        fds = self._recv_fds(len(entries))
        views: list[memoryview] = []
        try:
            for fd, (size, offset) in zip(fds, entries, strict=True):
                views.append(self._map(fd, size, offset))
        except BaseException:  # the mapped ones are closed with their segment
            for fd in fds[len(views) :]:
                os.close(fd)
            raise
        return views

    def _recv_fds(self, count: int) -> list[int]:
        space = socket.CMSG_SPACE(count * _FD_SIZE)
        data, ancillary, flags, _ = self._sock.recvmsg(1, space)
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % _FD_SIZE])
        if not data or len(fds) != count or flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            raise SegmentError(f"expected {count} segment descriptors, got {len(fds)}")
        return list(fds)

    def _map(self, fd: int, size: int, offset: int) -> memoryview:
        file_size = os.fstat(fd).st_size
        if offset < 0 or size <= 0 or offset + size > file_size:
            raise SegmentError(f"segment of {file_size} bytes has no {size} bytes at {offset}")
        segment = Segment(fd, file_size, access=mmap.ACCESS_COPY)
        segment.address = _address(segment)
        segment.fd = fd
        weakref.finalize(segment, os.close, fd)
        return memoryview(segment)[offset : offset + size]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._pagemap is not None:
            with contextlib.suppress(OSError):
                os.close(self._pagemap)
            self._pagemap = None


def fd_socket_pair() -> tuple[socket.socket, socket.socket]:
    """The two ends of a descriptor socket (server end first)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
