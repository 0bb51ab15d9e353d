"""One end of a worker socket, driven by event-loop callbacks.

Frames are the python backend's (:func:`repokit.backends.python.ipc.encode`, parsed by its
:class:`~repokit.backends.python.ipc.FrameParser`): a message of :mod:`.messages` pickled with
protocol 5, buffers of 64 KiB and more written to the socket straight from their memory.
Unlike the instance channel, nothing here is matched first-in first-out: every received
message goes to ``on_message`` (calls carry their id). A frame that does not fit in the socket
buffer is finished by a writer callback. When the other process exits (EOF or an error)
``on_lost`` runs once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from repokit.backends.python import ipc

_IOV_MAX = 512


class Link:
    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[Any], None],
        on_lost: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = asyncio.get_running_loop()
        self._parser = ipc.FrameParser()
        self._outbox: list[memoryview] = []
        self._on_message = on_message
        self._on_lost = on_lost
        self.closed = False
        self._loop.add_reader(self._fd, self._readable)

    def set_handler(self, on_message: Callable[[Any], None]) -> None:
        self._on_message = on_message

    def send(self, message: Any) -> None:
        """Queue ``message`` (a no-op once the link is closed; raises if it won't pickle)."""
        if self.closed:
            return
        parts = ipc.encode(message)
        if self._outbox:
            self._outbox.extend(memoryview(p) for p in parts)
            return
        self._outbox = [memoryview(p) for p in parts]
        self._write()
        if self._outbox and not self.closed:
            self._loop.add_writer(self._fd, self._write)

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet written."""
        return sum(part.nbytes for part in self._outbox)

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
        except Exception:  # a frame that does not unpickle: a broken peer
            self.close()
            return
        for message in messages:
            try:
                self._on_message(message)
            except Exception as exc:  # a bug in a handler must not stop the link
                self._loop.call_exception_handler(
                    {"message": "worker link handler failed", "exception": exc}
                )

    def close(self) -> None:
        """Stop watching the socket, close it and run ``on_lost`` (once)."""
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._outbox = []
        self._sock.close()
        self._on_lost()
