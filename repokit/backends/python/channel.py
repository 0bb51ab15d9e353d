"""The server's end of an instance socket, driven by event-loop callbacks (no tasks, no locks).

Messages are sent in order and the instance process answers each with exactly one reply, so
replies are matched to requests first-in first-out. Messages the instance starts itself (BLS
calls, log lines, metric updates, decoupled responses: a tuple whose first item starts with
``@``; all are listed in :mod:`repokit.backends.python.messages`) go to ``on_message``
instead; :meth:`Channel.send` writes a message that expects no reply (answers to those
calls, cancellations). :meth:`Channel.request` hands the reply
to a callback straight from the socket's reader callback: a reply costs one ``recv_into``
and no task wake-up. A frame that does not fit in the socket buffer is finished by a writer
callback, without copying it. When the process exits (the socket reads EOF or fails) every
pending callback gets :class:`~repokit.backends.python.ipc.ChannelClosed` and ``on_lost`` runs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from repokit.backends.python import ipc
from repokit.backends.python.frame_socket import FrameSocket
from repokit.backends.python.segments import FdSocket

ReplyCallback = Callable[[Any], None]  # gets the reply, or a ChannelClosed instance


class Channel(FrameSocket):
    def __init__(
        self,
        sock: Any,
        on_lost: Callable[[], None],
        on_message: Callable[[Any], None] | None = None,
        fd_socket: FdSocket | None = None,
    ) -> None:
        self._fd_socket = fd_socket
        self._callbacks: deque[ReplyCallback] = deque()
        self._on_lost = on_lost
        self._on_message = on_message
        super().__init__(sock, ipc.FrameParser(fd_socket))

    def set_message_handler(self, on_message: Callable[[Any], None]) -> None:
        self._on_message = on_message

    # --- requests ----------------------------------------------------------------------------
    def request(self, message: Any, on_reply: ReplyCallback) -> None:
        """Send ``message``; ``on_reply`` gets its reply (raises if it cannot be pickled)."""
        if self.closed:
            raise ipc.ChannelClosed("the instance process is gone")
        parts = self._encode(message)
        self._callbacks.append(on_reply)
        self._queue_parts(parts)

    def send(self, message: Any) -> None:
        """Send a message that gets no reply (a no-op once the process is gone)."""
        if self.closed:
            return
        self._queue_parts(self._encode(message))

    def _encode(self, message: Any) -> list[bytes | memoryview]:
        """The frame of ``message``; its large buffers as segments, passed at once (the
        frame follows them, whatever is queued before it)."""
        fd_socket = self._fd_socket
        if fd_socket is None:
            return ipc.encode(message)
        parts, fds, created = ipc.encode_shared(message, fd_socket)
        if not fds:
            return parts
        try:
            fd_socket.send_fds(fds, wait=False)
        except OSError:  # the descriptor socket is full (or gone): the bytes go through the socket
            return ipc.encode(message)
        finally:
            ipc.close_fds(created)
        return parts

    async def call(self, message: Any) -> Any:
        """``request`` as a coroutine (raises ChannelClosed when the process is gone)."""
        future: asyncio.Future[Any] = self._loop.create_future()

        def deliver(reply: Any) -> None:
            if future.done():
                return
            if isinstance(reply, ipc.ChannelClosed):
                future.set_exception(reply)
            else:
                future.set_result(reply)

        self.request(message, deliver)
        return await future

    # --- socket callbacks --------------------------------------------------------------------
    def _received(self, messages: list[Any]) -> None:
        for message in messages:
            if message[0][:1] == "@":
                if self._on_message is not None:
                    self._deliver(self._on_message, message)
            elif self._callbacks:
                self._deliver(self._callbacks.popleft(), message)

    def _deliver(self, callback: ReplyCallback, reply: Any) -> None:
        try:
            callback(reply)
        except Exception as exc:  # a bug in a callback must not stop the channel
            self._loop.call_exception_handler(
                {"message": "python backend reply callback failed", "exception": exc}
            )

    # --- shutdown ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop watching the socket, close it and fail every pending request."""
        if self.closed:
            return
        self._close_socket()
        if self._fd_socket is not None:
            self._fd_socket.close()
        callbacks, self._callbacks = self._callbacks, deque()
        for callback in callbacks:
            self._deliver(callback, ipc.ChannelClosed("the instance process is gone"))
        self._on_lost()
