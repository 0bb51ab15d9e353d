"""A non-blocking socket carrying :mod:`.ipc` frames, driven by event-loop callbacks.

The common part of the server's end of an instance socket (:class:`.channel.Channel`) and of a
serve worker's link (:class:`repokit.frontends.workers.link.Link`): frames are queued as
memoryviews and written with ``sendmsg`` (a frame that does not fit in the socket buffer is
finished by a writer callback, without copying it); what arrives is read into the
:class:`~.ipc.FrameParser`'s buffer and the complete messages go to :meth:`_received`. A
socket that reads EOF or fails, or a frame that does not parse (a broken peer), closes it.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from repokit.backends.python import ipc

_IOV_MAX = 512  # buffers per sendmsg (the kernel's limit is 1024)


class FrameSocket:
    def __init__(self, sock: socket.socket, parser: ipc.FrameParser) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd: int = sock.fileno()
        self._loop = asyncio.get_running_loop()
        self._parser = parser
        self._outbox: list[memoryview] = []
        self.closed = False
        self._loop.add_reader(self._fd, self._readable)

    def _received(self, messages: list[Any]) -> None:
        """The messages of one read, in order (subclasses dispatch them)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _queue_parts(self, parts: list[bytes | memoryview]) -> None:
        if self._outbox:
            self._outbox.extend(memoryview(p) for p in parts)
            return
        self._outbox = [memoryview(p) for p in parts]
        self._write()
        if self._outbox and not self.closed:
            self._loop.add_writer(self._fd, self._write)

    def _write(self) -> None:
        outbox = self._outbox
        while outbox:
            try:
                sent = self._sock.sendmsg(outbox[:_IOV_MAX])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close()
                return
            outbox = self._outbox = ipc.advance(outbox, sent)
        self._loop.remove_writer(self._fd)

    def _readable(self) -> None:
        parser = self._parser
        try:
            count = self._sock.recv_into(parser.buffer())
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if count == 0:
            self.close()
            return
        try:
            messages = parser.feed(count)
        except Exception:  # a frame that does not unpickle, or names segments it did not pass
            self.close()
            return
        self._received(messages)

    def _close_socket(self) -> None:
        """Stop watching the socket and close it (queued frames are dropped)."""
        self.closed = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._outbox = []
        self._sock.close()
