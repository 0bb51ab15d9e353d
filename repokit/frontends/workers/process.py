"""A frontend worker process: ``python -m repokit.frontends.workers.process DATA_FD CONTROL_FD``.

Started by :class:`.pool.WorkerPool` with the two socketpair ends it inherits. It waits for
:class:`.messages.WorkerStart`, binds the HTTP and gRPC ports the scheduling process reserved
(``SO_REUSEPORT``), runs the same frontends as a one-process server over a
:class:`.client.ServiceClient`, and says :class:`.messages.WorkerReady`. SIGTERM: it stops
accepting, lets its requests finish until ``exit_timeout_secs``, closes its connections and
exits. SIGINT is ignored (a terminal's Ctrl-C reaches the whole process group; the scheduling
process then stops its workers with SIGTERM). It exits too when the scheduling process goes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Coroutine
from typing import Any, cast

from repokit.core import server_log
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings
from repokit.frontends.grpc.server import create_grpc_server
from repokit.frontends.http.app import create_http_server
from repokit.frontends.http.server import HttpServer, bind_socket
from repokit.frontends.workers.client import ServiceClient
from repokit.frontends.workers.messages import (
    ClientsGone,
    WorkerFailed,
    WorkerReady,
    WorkerStart,
)

_POLL_S = 0.02
# how long past its own deadline a worker still holds the calls in flight: the scheduling
# process (whose deadline is a little earlier) decides whether the exit timeout expired with
# requests in flight; a worker that left at its own deadline would cancel its calls first, and
# the server would exit 0 as if they had finished (its instances' stop then ends them)
_HOLD_PAST_DEADLINE_S = 0.5


async def serve(data: socket.socket, control: socket.socket) -> int:
    """Serve until SIGTERM or the scheduling process is gone; the exit code."""
    loop = asyncio.get_running_loop()
    client = ServiceClient(ServerSettings(), data, control)
    start = await client.first_message()
    if not isinstance(start, WorkerStart):
        raise RuntimeError(f"expected WorkerStart, got {type(start).__name__}")
    settings: Any = start.settings  # ServeSettings
    client.settings = settings.core
    client.apply(start.state)
    handler = server_log.install(settings.core.log)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # the frontends take the service's interface; the client has every method they call
    service = cast(InferenceService, client)
    http: HttpServer | None = None
    grpc_server: Any = None
    try:
        try:
            if settings.allow_http:
                http, _ = create_http_server(service, settings, access_log=settings.access_log)
                await http.start(bind_socket(settings.http_address, settings.http_port, True))
            if settings.allow_grpc:
                grpc_server = create_grpc_server(service, settings)
                await grpc_server.start()
        except (OSError, ValueError, RuntimeError) as exc:  # said by the scheduling process
            client.send(WorkerFailed(str(exc)))
            await _drain(client, http, grpc_server, 0.0, wait_for_clients=False)
            return 1
        client.send(WorkerReady(os.getpid()))
        lost = asyncio.ensure_future(client.lost.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([lost, stopped], return_when=asyncio.FIRST_COMPLETED)
        lost.cancel()
        stopped.cancel()
        await _drain(
            client,
            http,
            grpc_server,
            float(settings.core.exit_timeout_secs),
            wait_for_clients=settings.wait_for_http_connections,
        )
    finally:
        client.close()
        server_log.uninstall(handler)
    return 0


async def _drain(
    client: ServiceClient,
    http: HttpServer | None,
    grpc_server: Any,
    timeout: float,
    *,
    wait_for_clients: bool,
) -> None:
    """Stop accepting HTTP; with ``wait_for_clients`` serve the HTTP connections clients hold
    open (as one process does, until ``timeout``); wait for the requests in flight, gRPC
    still serving meanwhile (a new request is refused by the scheduling process in its
    scheduler's words, as one process keeps gRPC until its models are unloaded); close."""
    deadline = time.monotonic() + max(0.0, timeout)
    if http is not None:
        http.stop_accepting()
        if wait_for_clients and not client.lost.is_set():
            await _until_lost(client, http.wait_for_clients(deadline))
    if not client.lost.is_set():
        client.send(ClientsGone())  # the scheduling process may stop the service now
    hold_until = deadline + _HOLD_PAST_DEADLINE_S
    # what runs now (requests that come meanwhile are refused at once; a steady stream of
    # them must not hold the worker)
    running = client.running()
    while (
        client.any_running(running) and not client.lost.is_set() and time.monotonic() < hold_until
    ):
        await asyncio.sleep(_POLL_S)
    grpc_stop = (
        asyncio.ensure_future(grpc_server.stop(max(0.0, deadline - time.monotonic())))
        if grpc_server
        else None
    )
    if http is not None:
        while http.close_idle() and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)
        http.abort_all()
    if grpc_stop is not None:
        await grpc_stop
    if http is not None:
        await http.close()


async def _until_lost(client: ServiceClient, step: Coroutine[Any, Any, None]) -> None:
    """Run ``step`` unless the scheduling process goes meanwhile (nothing is served then)."""
    task = asyncio.ensure_future(step)
    lost = asyncio.ensure_future(client.lost.wait())
    await asyncio.wait([task, lost], return_when=asyncio.FIRST_COMPLETED)
    for future in (task, lost):
        future.cancel()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    data = socket.socket(fileno=int(args[0]))
    control = socket.socket(fileno=int(args[1]))
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run(serve(data, control))
    return uvloop.run(serve(data, control))


if __name__ == "__main__":
    sys.exit(main())
