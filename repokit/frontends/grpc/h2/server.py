"""The native gRPC server: a listening socket, the method handlers, interceptors, and the
graceful stop (GOAWAY, calls drain within the grace, then they are cancelled).

It takes handlers the way a ``grpc.aio.Server`` does (``add_generic_rpc_handlers``,
``add_registered_method_handlers``), so the servicers and their registration are shared by
both transports (:mod:`repokit.frontends.grpc.registration`), and runs
``grpc.aio.ServerInterceptor`` objects per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterable, Sequence
from typing import Any

from repokit.frontends.grpc.h2.call import Call, CallDetails
from repokit.frontends.grpc.h2.connection import Connection

_PATH_CACHE_LIMIT = 4096


def bind_socket(address: str, port: int, reuse_port: bool) -> socket.socket:
    """A listening TCP socket on ``address``:``port`` (OSError when it cannot bind)."""
    host = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, target = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port and hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(target)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def tls_context(cert: str, key: str, root: str | None, mutual: bool) -> ssl.SSLContext:
    """Server TLS offering ALPN ``h2`` (gRPC clients require it); ``mutual``: client
    certificates signed by ``root`` are required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if root:
        context.load_verify_locations(cafile=root)
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
    elif root:
        context.verify_mode = ssl.CERT_OPTIONAL
    else:
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    return context


class NativeServer:
    """Serves gRPC on one bound socket, on the running loop."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        interceptors: Sequence[Any] = (),
        max_receive: int = 2**31 - 1,
        max_send: int = 2**31 - 1,
        max_concurrent_streams: int = 1024,
        compression_level: int = 0,
        keepalive_time: float = 7200.0,
        keepalive_timeout: float = 20.0,
        keepalive_permit_without_calls: bool = False,
        min_recv_ping_interval: float = 300.0,
        max_ping_strikes: int = 2,
        max_pings_without_data: int = 2,
        max_connection_age: float = 0.0,
        max_connection_age_grace: float = 0.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.interceptors = list(interceptors)
        self.max_receive = max_receive
        self.max_send = max_send
        self.max_concurrent_streams = max_concurrent_streams
        self.compression_level = compression_level
        self.keepalive_time = keepalive_time
        self.keepalive_timeout = keepalive_timeout
        self.keepalive_permit_without_calls = keepalive_permit_without_calls
        self.min_recv_ping_interval = min_recv_ping_interval  # seconds
        self.max_ping_strikes = max_ping_strikes
        self.max_pings_without_data = max_pings_without_data
        self.max_connection_age = max_connection_age  # seconds, 0: unlimited
        self.max_connection_age_grace = max_connection_age_grace
        self.tls = tls
        self.connections: set[Connection] = set()
        self._generic: list[Any] = []
        self._paths: dict[str, Any] = {}
        self._server: asyncio.AbstractServer | None = None
        self._stopped: asyncio.Event | None = None
        self._idle: asyncio.Future[None] | None = None  # resolved when no call runs
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the gRPC server has not started")
        return self._loop

    # --- handlers (as grpc.aio.Server) -----------------------------------------------------
    def add_generic_rpc_handlers(self, handlers: Iterable[Any]) -> None:
        self._generic.extend(handlers)
        # forget the paths found unknown so far (the registered methods stay)
        self._paths = {path: h for path, h in self._paths.items() if h is not None}

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        for name, handler in handlers.items():
            self._paths[f"/{service}/{name}"] = handler

    def lookup(self, path: str) -> Any:
        """The method handler for ``path``, or None."""
        try:
            return self._paths[path]
        except KeyError:
            pass
        details = CallDetails(path, ())
        handler = None
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                break
        if len(self._paths) < _PATH_CACHE_LIMIT:
            self._paths[path] = handler
        return handler

    async def intercept(self, call: Call) -> Any:
        """The handler the interceptors choose for ``call`` (None: unknown method)."""
        interceptors = self.interceptors

        async def step(index: int, details: Any) -> Any:
            if index == len(interceptors):
                return self.lookup(details.method)
            return await interceptors[index].intercept_service(
                lambda next_details: step(index + 1, next_details), details
            )

        return await step(0, CallDetails(call.head.path, call.head.metadata))

    # --- lifetime ------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._server = await self.loop.create_server(
            lambda: Connection(self), sock=self.sock, ssl=self.tls, backlog=1024
        )

    async def stop(self, grace: float | None) -> None:
        """Stop taking connections; GOAWAY to every connection; calls still running after
        ``grace`` seconds (at once when None) are cancelled."""
        if self._server is not None:
            self._server.close()
        else:
            self.sock.close()
        connections = list(self.connections)
        for connection in connections:
            connection.goaway()
        if grace and any(c.calls for c in self.connections):
            self._idle = asyncio.get_running_loop().create_future()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._idle), grace)
            self._idle = None
        for connection in list(self.connections):
            connection.abort()
        await asyncio.sleep(0)
        if self._stopped is not None:
            self._stopped.set()

    def call_ended(self) -> None:
        """A connection's last call ended (or the connection closed)."""
        idle = self._idle
        if idle is not None and not idle.done() and not any(c.calls for c in self.connections):
            idle.set_result(None)

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        if self._stopped is None:
            return True
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True
