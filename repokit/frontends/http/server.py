"""An HTTP/1.1 server on one listening socket: :class:`~.protocol.HttpConnection` per client,
one handler for every request, the connection limit, and one timer that checks the timeouts of
every connection.

The socket is made by the caller (:func:`bind_socket`, or one inherited from a parent process:
several worker processes can serve one port with ``SO_REUSEPORT``), so port 0 and socket
options stay the caller's choice. TLS: pass an ``ssl.SSLContext``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import ssl
import time

from repokit.frontends.http.connection_limits import ConnectionLimits, default_max_connections
from repokit.frontends.http.protocol import RECEIVE_BUFFER_BYTES, Handler, HttpConnection, Quick

_log = logging.getLogger("repokit.core.service")  # tritonserver logs the stop's steps together
LISTEN_BACKLOG = 1024
# the timeout timer runs at least this often (a timeout is enforced within half its length)
MIN_CHECK_INTERVAL_S = 0.1


def bind_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening, non-blocking TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves ``handler`` on a socket once :meth:`start` ran."""

    def __init__(
        self,
        handler: Handler,
        limits: ConnectionLimits | None = None,
        max_body: int = 1 << 31,
        access_log: bool = False,
        quick: Quick | None = None,
    ) -> None:
        """``quick``: runs a request by callbacks when it can (see :data:`.protocol.Quick`)."""
        self.handler = handler
        self.quick = quick
        self.limits = limits or ConnectionLimits()
        self.max_connections = self.limits.max_connections or default_max_connections()
        self.max_body = max_body
        self.access_log = access_log
        self.connections: set[HttpConnection] = set()
        # every connection reads into this buffer; a read is parsed (its bytes copied where
        # they are kept) before the loop reads again
        self.receive_buffer = bytearray(RECEIVE_BUFFER_BYTES)
        self.receive_view = memoryview(self.receive_buffer)
        self._server: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> int:
        """Serve on ``sock`` (listening); returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpConnection(self), sock=sock, ssl=ssl_context, backlog=LISTEN_BACKLOG
        )
        self._schedule_checks()
        return int(sock.getsockname()[1])

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    # --- connections ---------------------------------------------------------------------
    def admit(self, connection: HttpConnection) -> bool:
        """Room for a new connection: past the limit, the connection idle (or sending a partial
        request) the longest is closed; False when every one is running a request."""
        if len(self.connections) < self.max_connections:
            return True
        victim: HttpConnection | None = None
        for other in self.connections:
            if other.waiting_for_client() and (
                victim is None or other.idle_since < victim.idle_since
            ):
                victim = other
        if victim is None:
            return False
        victim.abort()
        self.connections.discard(victim)
        return True

    def _check_interval(self) -> float:
        limits = self.limits
        shortest = min(
            limits.header_timeout_s,
            limits.body_timeout_s,
            limits.keepalive_timeout_s,
            limits.response_timeout_s,
        )
        return max(MIN_CHECK_INTERVAL_S, shortest / 2)

    def _schedule_checks(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._check_interval(), self._check_timeouts)

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for connection in list(self.connections):
            connection.check_timeouts(now)
        self._schedule_checks()

    # --- stopping --------------------------------------------------------------------------
    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    def open_connections(self) -> int:
        """The connections a client still holds open."""
        return sum(1 for c in self.connections if c.transport is not None)

    async def wait_for_clients(self, deadline: float) -> None:
        """tritonserver's first step when it stops (call :meth:`stop_accepting` first): while
        clients keep connections open, until ``deadline`` (time.monotonic()), requests on them
        are served as usual and the log says once a second how many are left (``Timeout N:
        Found K HTTP service connections``, N in whole seconds as tritonserver counts)."""
        while True:
            remaining = deadline - time.monotonic()
            count = self.open_connections()
            if count == 0 or remaining <= 0:
                return
            _log.info("Timeout %d: Found %d HTTP service connections", math.ceil(remaining), count)
            await asyncio.sleep(min(1.0, remaining))

    def close_idle(self) -> int:
        """Close the connections with nothing running or arriving; the number still open."""
        for connection in list(self.connections):
            connection.close_if_idle()
        return sum(1 for c in self.connections if c.transport is not None)

    def abort_all(self) -> None:
        for connection in list(self.connections):
            connection.abort()

    async def close(self) -> None:
        """Stop accepting, abort every connection, stop the timer."""
        self.stop_accepting()
        self.abort_all()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
