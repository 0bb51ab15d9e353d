"""Server lifecycle: one asyncio loop hosting the HTTP, metrics and gRPC frontends over one
InferenceService.

:func:`start_server` builds the service (the core's composition root), binds every enabled
frontend (port 0 picks a free port) and returns a :class:`ServerHandle` with the bound ports;
``await handle.stop()`` stops accepting, lets the service drain in-flight requests (up to
``exit_timeout_secs``), closes idle connections and aborts what is left. :func:`run_server`
does the same until SIGINT/SIGTERM. The CLI (``repokit serve``) is a thin layer over these.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from repokit.core.compose import build_service
from repokit.core.model_manager import MODEL_NOT_FOUND, public_name
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings
from repokit.frontends.grpc.options import DEFAULT_TRANSPORT
from repokit.frontends.grpc.server import create_grpc_server
from repokit.frontends.http.app import create_http_server
from repokit.frontends.http.metrics import create_metrics_server
from repokit.frontends.http.server import HttpServer, bind_socket
from repokit.frontends.workers.pool import WorkerPool
from repokit.malloc_settings import keep_freed_memory

_log = logging.getLogger("repokit.core.service")  # tritonserver logs these steps together


@dataclass
class ServeSettings:
    """Everything ``repokit serve`` needs: the core's settings plus the network frontends'."""

    core: ServerSettings = field(default_factory=ServerSettings)
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    http_address: str = "0.0.0.0"
    grpc_address: str = "0.0.0.0"
    metrics_address: str = ""  # "" = the HTTP address, as tritonserver
    allow_http: bool = True
    allow_grpc: bool = True
    allow_metrics: bool = True
    http_restricted_api: list[str] = field(default_factory=list)
    grpc_restricted_protocol: list[str] = field(default_factory=list)
    # --http-header-forward-pattern / --grpc-header-forward-pattern ("" = forward nothing)
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    access_log: bool = False
    reuse_http_port: bool = False  # SO_REUSEPORT on the HTTP socket (--reuse-http-port)
    # repokit.frontends.http.connection_limits (defaults there; 0 connections = from the
    # descriptor limit)
    http_header_timeout_secs: float = 60.0
    http_body_timeout_secs: float = 60.0
    http_keepalive_timeout_secs: float = 75.0
    http_response_timeout_secs: float = 3600.0
    http_max_connections: int = 0
    # gRPC options read by repokit.frontends.grpc.options (tritonserver's flags and defaults)
    reuse_grpc_port: bool = False
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    grpc_keepalive_time: int = 7_200_000  # ms
    grpc_keepalive_timeout: int = 20_000  # ms
    grpc_keepalive_permit_without_calls: bool = False
    grpc_http2_max_pings_without_data: int = 2
    grpc_http2_min_recv_ping_interval_without_data: int = 300_000  # ms
    grpc_http2_max_ping_strikes: int = 2
    grpc_max_connection_age: int = 0  # ms, 0 = unlimited
    grpc_max_connection_age_grace: int = 0  # ms, 0 = unlimited
    grpc_infer_response_compression_level: str = "none"
    grpc_transport: str = DEFAULT_TRANSPORT  # native | grpcio (repokit.frontends.grpc.options)
    # tritonserver's --exit-on-error as the CLI applies it: a model that fails to load while
    # starting stops the server before any port opens (embedders and tests see the index)
    stop_on_load_failure: bool = False
    # processes doing the HTTP and gRPC work (repokit.frontends.workers): 1 = this one
    workers: int = 1
    # stopping, as tritonserver: while clients hold HTTP connections open (up to the exit
    # timeout), requests on them are served before the models stop; off for harnesses that
    # stop servers with their own clients still connected
    wait_for_http_connections: bool = True

    # the HTTP frontend reads these two from the core settings
    @property
    def http_max_input_size(self) -> int:
        return self.core.http_max_input_size

    @property
    def allow_client_shm(self) -> bool:
        return self.core.allow_client_shm

    @property
    def exit_timeout_secs(self) -> float:
        return self.core.exit_timeout_secs


ServiceFactory = Callable[[ServerSettings], InferenceService]  # the core's build_service


@dataclass
class ServerHandle:
    """A running server: the service, the bound ports (None when a frontend is disabled)."""

    service: InferenceService
    settings: ServeSettings
    http_port: int | None = None
    metrics_port: int | None = None
    metrics_host: str = ""  # where the metrics listen (metrics_host(settings))
    grpc_port: int | None = None
    _http: HttpServer | None = None
    _grpc: Any = None
    _metrics: HttpServer | None = None
    _pool: WorkerPool | None = None
    _stopped: bool = False
    exit_timeout_expired: bool = False  # stop() had to abort requests still running
    _stop_requested: asyncio.Event = field(default_factory=asyncio.Event)

    def request_stop(self) -> None:
        """Ask :func:`run_server` to shut down (as SIGTERM does). Unless open HTTP connections
        are to be served first (or worker processes hold them), new requests are refused from
        this moment, as tritonserver's models stop taking requests when the signal lands: the
        shutdown sequence starts a few loop turns later, and requests arriving meanwhile (a
        client that goes on sending after the signal) would still have run."""
        self._stop_requested.set()
        self.stop_taking_requests()

    def stop_taking_requests(self) -> None:
        """The first step of :meth:`request_stop` alone (no asyncio call: a signal handler may
        run it between two bytecodes of the loop's own code)."""
        http = self._http if self.settings.wait_for_http_connections else None
        if self._pool is None and (http is None or http.open_connections() == 0):
            self.service.refuse_new_requests()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    def addresses(self) -> list[tuple[str, str]]:
        """(service, "host:port") for each started frontend."""
        s = self.settings
        out: list[tuple[str, str]] = []
        if self.http_port is not None:
            out.append(("HTTP", f"{s.http_address}:{self.http_port}"))
        if self.grpc_port is not None:
            out.append(("gRPC", f"{s.grpc_address}:{self.grpc_port}"))
        if self.metrics_port is not None:
            out.append(("Metrics", f"{self.metrics_host}:{self.metrics_port}"))
        return out

    async def stop(self) -> None:
        """Graceful shutdown within ``exit_timeout_secs`` as tritonserver 2.51 (main.cc): the
        HTTP port stops accepting, the service refuses new requests and waits for in-flight
        ones and open streams, unloads the models (finalize runs), then idle connections
        close and what is left at the deadline is aborted. gRPC serves on (a request is
        refused by its model's scheduler, a sequence under way goes on) until the models are
        unloaded, and stops then, as tritonserver stops it after the server. Metrics answer
        until the end."""
        if self._stopped:
            return
        self._stopped = True
        timeout = max(0.0, float(self.settings.exit_timeout_secs))
        deadline = time.monotonic() + timeout
        wait_for_clients = self.settings.wait_for_http_connections
        if self._http is not None:
            self._http.stop_accepting()
            if wait_for_clients:
                await self._http.wait_for_clients(deadline)
        if self._pool is not None:
            # each worker stops accepting and (wait_for_clients) serves the HTTP connections
            # its clients hold open; the service stops after that, as in one process
            await self._pool.begin_stop(deadline, wait_for_clients=wait_for_clients)
        service_stop = asyncio.ensure_future(self.service.stop(deadline))
        if self._pool is not None:  # the workers drain meanwhile
            await self._pool.stop(deadline)
        drained = await service_stop
        self.exit_timeout_expired = drained is False
        grpc_stop = None
        if self._grpc is not None:
            grpc_stop = asyncio.ensure_future(
                self._grpc.stop(max(0.0, deadline - time.monotonic()))
            )
        servers = [s for s in (self._http, self._metrics) if s is not None]
        await _close_connections(servers, deadline)
        if grpc_stop is not None:
            await grpc_stop
        for server in servers:
            await server.close()
        self._http = self._metrics = None


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _close_connections(servers: list[HttpServer], deadline: float) -> None:
    """Close idle keep-alive connections until none is left or the deadline
    (time.monotonic()) passes, then abort the rest."""
    while True:
        still_open = sum(server.close_idle() for server in servers)
        if not still_open or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)
    for server in servers:
        server.abort_all()


class ModelsFailedToLoad(Exception):
    """Some model (or version) failed to load at startup and ``--exit-on-error`` is on."""

    def __init__(
        self, index: list[dict[str, Any]], failures: list[str], unknown: list[str] | None = None
    ) -> None:
        super().__init__("failed to load all models")
        self.index = index
        self.failures = failures
        self.unknown = unknown or []  # --load-model names found in no repository


def startup_failures(service: InferenceService) -> list[str]:
    """``name: reason`` of each model version that failed to load while starting (fatal with
    ``--exit-on-error`` in every control mode: an explicit ``--load-model`` that fails stops
    tritonserver too)."""
    failed = [
        f"{e['name']}: {e.get('reason', '')}"
        for e in service.repository_index()
        if e.get("state") == "UNAVAILABLE" and e.get("reason") != "unloaded"
    ]
    return failed + [
        f"{public_name(name)}: {MODEL_NOT_FOUND}" for name in service.manager.unknown_startup_models
    ]


def metrics_host(settings: ServeSettings) -> str:
    """Where the metrics service listens: ``--metrics-address``, else the HTTP address, as
    tritonserver. With HTTP disabled, an HTTP address that names no host (qa/L0_socket's
    ``--http-address -47 --allow-http 0``, which tritonserver starts with) is not used: the
    metrics listen on 0.0.0.0, tritonserver's default without HTTP, and a warning says so."""
    if settings.metrics_address:
        return settings.metrics_address
    host = settings.http_address
    if settings.allow_http or _names_a_host(host):
        return host
    _log.warning(
        "--http-address '%s' is not an address and HTTP is disabled: the metrics service "
        "listens on 0.0.0.0 (set --metrics-address to choose)",
        host,
    )
    return "0.0.0.0"


def _names_a_host(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return False
    return True


def _bind(service: str, host: str, port: int, reuse_port: bool) -> socket.socket:
    """``bind_socket`` whose failure names the service and its address."""
    try:
        return bind_socket(host, port, reuse_port=reuse_port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OSError(f"failed to start {service} service at {host}:{port}: {reason}") from None


async def start_server(
    settings: ServeSettings, service_factory: ServiceFactory | None = None
) -> ServerHandle:
    """Build the service, then bind and start every enabled frontend on the running loop."""
    service = (service_factory or build_service)(settings.core)
    await service.start()
    failures = startup_failures(service) if settings.stop_on_load_failure else []
    if failures:  # --exit-on-error: tritonserver exits before it opens any port
        index = service.repository_index()
        await service.stop()
        unknown = [public_name(name) for name in service.manager.unknown_startup_models]
        raise ModelsFailedToLoad(index, failures, unknown)
    handle = ServerHandle(service=service, settings=settings)
    try:
        if settings.workers > 1:  # N processes serve HTTP and gRPC over this one's service
            pool = handle._pool = WorkerPool(service, settings, settings.workers)
            await pool.start()
            handle.http_port, handle.grpc_port = pool.http_port, pool.grpc_port
        elif settings.allow_http:
            http, _frontend = create_http_server(service, settings, access_log=settings.access_log)
            sock = _bind(
                "HTTP", settings.http_address, settings.http_port, settings.reuse_http_port
            )
            handle._http = http
            handle.http_port = await http.start(sock)
        if settings.allow_metrics:
            metrics = create_metrics_server(service)
            handle._metrics = metrics
            host = handle.metrics_host = metrics_host(settings)
            handle.metrics_port = await metrics.start(
                _bind("Metrics", host, settings.metrics_port, False)
            )
        # --- gRPC hook: the gRPC frontend (repokit/frontends/grpc/) shares this loop --------
        if settings.allow_grpc and settings.workers <= 1:
            grpc_server = create_grpc_server(service, settings)
            await grpc_server.start()
            handle._grpc = grpc_server
            handle.grpc_port = int(grpc_server.port)
    except BaseException:
        await handle.stop()
        raise
    return handle


def freeze_startup_objects() -> None:
    """Move everything alive after startup (modules, descriptors, configs, loaded models) out of
    the cyclic garbage collector's reach. Under load, requests in flight survive the young
    collections, so full collections come often, and each one walked every startup object
    while the model sat idle; frozen, a full collection walks only what requests made
    (figures in ``benchmarks/README.md``). Objects frozen
    here are still freed by reference counting when they go away; only reference cycles among
    them (say, of a model unloaded later) stay, once: models loaded later are not frozen."""
    gc.collect()
    gc.freeze()


async def run_server(
    settings: ServeSettings,
    ready_callback: Callable[[ServerHandle], Awaitable[None] | None] | None = None,
    service_factory: ServiceFactory | None = None,
) -> bool:
    """Serve until SIGINT/SIGTERM (or ``handle.request_stop()``), then shut down gracefully.
    Signal handlers are installed before the models load, so an early SIGTERM still exits
    cleanly once startup is done. False when the exit timeout expired with requests still
    running (tritonserver then exits with 1)."""
    keep_freed_memory()
    loop = asyncio.get_running_loop()
    early_stop = asyncio.Event()
    target: list[ServerHandle] = []

    def on_signal(number: int) -> None:
        # as tritonserver; stderr may be a pipe nobody reads any more: the server still stops
        with contextlib.suppress(OSError, ValueError):
            print(f"Signal ({number}) received.", file=sys.stderr, flush=True)
        early_stop.set()
        for handle in target:
            handle.request_stop()

    def on_signal_now(_number: int, _frame: object) -> None:
        # Python runs this in the main thread at once, between two bytecodes; the loop learns
        # of the signal (on_signal) only after the callbacks it has already queued, among them
        # requests that arrived with the signal: those are refused from here
        for handle in target:
            handle.stop_taking_requests()

    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, int(sig))
            installed.append(sig)
            # the loop's wakeup fd stays set: on_signal still runs as the loop reads it
            signal.signal(sig, on_signal_now)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread
            pass
    try:
        handle = await start_server(settings, service_factory)
        target.append(handle)
        freeze_startup_objects()
        try:
            if not early_stop.is_set():
                if ready_callback is not None:
                    await _maybe_await(ready_callback(handle))
                await handle.wait_stop_requested()
        finally:
            await handle.stop()
        return not handle.exit_timeout_expired
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
