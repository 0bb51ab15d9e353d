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

import socket
from collections.abc import Callable
from typing import Any

from repokit.backends.python import ipc
from repokit.backends.python.frame_socket import FrameSocket


class Link(FrameSocket):
    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[Any], None],
        on_lost: Callable[[], None],
    ) -> None:
        self._on_message = on_message
        self._on_lost = on_lost
        super().__init__(sock, ipc.FrameParser())

    def set_handler(self, on_message: Callable[[Any], None]) -> None:
        self._on_message = on_message

    def send(self, message: Any) -> None:
        """Queue ``message`` (a no-op once the link is closed; raises if it won't pickle)."""
        if self.closed:
            return
        self._queue_parts(ipc.encode(message))

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet written."""
        return sum(part.nbytes for part in self._outbox)

    def _received(self, messages: list[Any]) -> None:
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
        self._close_socket()
        self._on_lost()
