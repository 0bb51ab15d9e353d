"""The instance process's end of its socket, shared by every thread of the model.

Traffic in both directions interleaves on the one socket (every message is listed in
:mod:`repokit.backends.python.messages`):

- server -> instance: operations (``EXECUTE``, ``INIT`` ...) that the main thread answers in
  order, plus ``REPLY`` answering a call the instance made and ``CANCEL``;
- instance -> server: the operation replies (``OK`` / ``ERROR``), calls (``CALL``: BLS
  requests, model control, metric reads) and one-way notes (``LOG``, ``METRIC``, ``RESPONSE``
  of decoupled senders ...).

There is no reader thread: whichever thread waits for something (the main thread for its next
operation, a BLS caller for its reply) reads the socket for everybody while it waits, and
hands what it reads to whom it belongs; the others wait on a condition. A plain ``execute``
therefore costs no thread switch. :meth:`ChildLink.poll` reads whatever already arrived
without blocking (``is_cancelled`` uses it while the model runs). Sends hold a lock, so
threads never interleave frames.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from repokit.backends.python import ipc
from repokit.backends.python.messages import CALL, CANCEL, REPLY
from repokit.backends.python.segments import FdSocket


class ChildLink:
    def __init__(self, sock: socket.socket, fd_socket: FdSocket | None = None) -> None:
        self._sock = sock
        self._fd_socket = fd_socket
        self._parser = ipc.FrameParser(fd_socket)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._reading = False
        self._ops: deque[Any] = deque()
        self._replies: dict[int, deque[tuple[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.cancelled: set[int] = set()
        self.closed = False
        # tells whether bytes (or the end) arrived without reading them: a non-blocking read
        # of an empty socket costs a raised BlockingIOError, several times a poll
        self._arrivals = select.poll()
        self._arrivals.register(sock.fileno(), select.POLLIN)

    # --- sending -----------------------------------------------------------------------------
    def send(self, message: Any) -> None:
        """Send one message (raises if it cannot be pickled; nothing is sent then). Its large
        buffers are copied into segments first, outside the lock."""
        fd_socket = self._fd_socket
        if fd_socket is None:
            parts = ipc.encode(message)
            with self._send_lock:
                ipc.send_parts(self._sock, parts)
            return
        parts, fds, created = ipc.encode_shared(message, fd_socket)
        try:
            with self._send_lock:
                if fds:
                    fd_socket.send_fds(fds, wait=True)
                ipc.send_parts(self._sock, parts)
        finally:
            ipc.close_fds(created)

    def call(self, op: str, payload: Any) -> tuple[str, Any]:
        """Ask the server for something and wait for its ``(status, payload)`` reply."""
        call_id = self.start_call(op, payload)
        try:
            return self.wait_reply(call_id)
        finally:
            self.forget(call_id)

    def start_call(self, op: str, payload: Any) -> int:
        """Send a call now; :meth:`wait_reply` takes its replies (a streamed call gets
        several), :meth:`forget` drops what is left."""
        call_id = next(self._ids)
        with self._cond:
            self._replies[call_id] = deque()
        try:
            self.send((CALL, call_id, op, payload))
        except BaseException:
            self.forget(call_id)
            raise
        return call_id

    def wait_reply(self, call_id: int) -> tuple[str, Any]:
        pending = self._replies[call_id]
        if not pending:
            self._wait(lambda: bool(pending))
        return pending.popleft()

    def wait_pending(self, call_id: int) -> None:
        """Wait until a reply to ``call_id`` is there, leaving it for :meth:`wait_reply`."""
        pending = self._replies[call_id]
        if not pending:
            self._wait(lambda: bool(pending))

    def forget(self, call_id: int) -> None:
        with self._cond:
            self._replies.pop(call_id, None)

    # --- receiving ---------------------------------------------------------------------------
    def next_op(self) -> Any:
        """The next operation for the main thread (raises ChannelClosed at the end)."""
        ops = self._ops
        if not ops:
            self._wait(lambda: bool(ops))
        return ops.popleft()

    def ready_op(self) -> Any:
        """The next operation if it has arrived already (read without blocking), else None."""
        ops = self._ops
        if not ops:
            if not self._arrivals.poll(0):  # nothing arrived (the common case when idle)
                return None
            self.poll()
        return ops.popleft() if ops else None

    def poll(self) -> None:
        """Take in whatever has arrived, without blocking (no-op if a thread is reading)."""
        with self._cond:
            if self._reading or self.closed:
                return
            self._reading = True
        messages: list[Any] = []
        try:
            while True:
                try:
                    count = self._sock.recv_into(self._parser.buffer(), 0, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                if count == 0:
                    self.closed = True
                    break
                messages.extend(self._parser.feed(count))
        except OSError:
            self.closed = True
        finally:
            with self._cond:
                self._reading = False
                self._dispatch(messages)
                self._cond.notify_all()

    def _wait(self, ready: Callable[[], bool]) -> None:
        cond = self._cond
        with cond:
            while not ready():
                if self.closed:
                    raise ipc.ChannelClosed("the server closed the connection")
                if self._reading:
                    cond.wait()
                    continue
                self._reading = True
                cond.release()
                messages: list[Any] = []
                try:
                    count = self._sock.recv_into(self._parser.buffer())
                    if count == 0:
                        self.closed = True
                    else:
                        messages = self._parser.feed(count)
                except OSError:
                    self.closed = True
                finally:
                    cond.acquire()
                    self._reading = False
                self._dispatch(messages)
                cond.notify_all()

    def _dispatch(self, messages: list[Any]) -> None:
        """File received messages (the condition's lock is held)."""
        for message in messages:
            tag = message[0]
            if tag == REPLY:
                pending = self._replies.get(message[1])
                if pending is not None:  # else the caller stopped listening
                    pending.append((message[2], message[3]))
            elif tag == CANCEL:
                self.cancelled.add(message[1])
            else:
                self._ops.append(message)
