"""The frontend workers of a scheduling process: started once the models are loaded,
restarted when one dies, stopped first when the server stops.

The scheduling process reserves the HTTP and gRPC ports (bound with ``SO_REUSEPORT``, not
listening: the kernel hands connections only to the workers' listening sockets) so that port
0 picks one port for every worker, and a worker that restarts binds it again. Each worker
gets two socketpairs (the data link and the control socket, :mod:`.host`) and a
:class:`.messages.WorkerStart`; it answers :class:`.messages.WorkerReady` once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from repokit.backends.python.ipc import enlarge_buffers
from repokit.core.service import InferenceService
from repokit.frontends.workers.host import ServiceHost, service_state
from repokit.frontends.workers.messages import ServiceState, WorkerStart

log = logging.getLogger(__name__)
START_TIMEOUT_S = 60.0
# a worker that dies sooner than this after it started is restarted after this delay
RESTART_DELAY_S = 1.0


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT and not listening: it holds the
    port (port 0: a free one) for the workers, and takes no connections itself."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@dataclasses.dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    host: ServiceHost
    started: float


class WorkerPool:
    def __init__(self, service: InferenceService, settings: Any, count: int) -> None:
        self._service = service
        self._settings = settings  # ServeSettings
        self._count = count
        self._workers: dict[int, _Worker] = {}
        self._reserved: list[socket.socket] = []
        self._worker_settings: Any = None
        self._seq = 0
        self._stopping = False
        self._restarts: set[asyncio.Task[None]] = set()
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.restarted = 0  # workers restarted after dying

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers.values()]

    def state(self) -> ServiceState:
        self._seq += 1
        return service_state(self._service, self._seq)

    async def publish(self, skip: ServiceHost | None = None) -> ServiceState:
        """Push the service's state to every worker (but ``skip``) and wait until each
        acknowledged it; the state."""
        state = self.state()
        hosts = [w.host for w in list(self._workers.values()) if w.host is not skip]
        await asyncio.gather(*(host.push(state) for host in hosts))
        return state

    async def start(self) -> None:
        s = self._settings
        changes: dict[str, Any] = {"allow_metrics": False, "workers": 1}
        if s.allow_http:
            sock = reserve_port(s.http_address, s.http_port)
            self._reserved.append(sock)
            self.http_port = changes["http_port"] = sock.getsockname()[1]
            changes["reuse_http_port"] = True
        if s.allow_grpc:
            sock = reserve_port(s.grpc_address, s.grpc_port)
            self._reserved.append(sock)
            self.grpc_port = changes["grpc_port"] = sock.getsockname()[1]
            changes["reuse_grpc_port"] = True
        self._worker_settings = dataclasses.replace(s, **changes)
        started = await asyncio.gather(
            *(self._spawn(i) for i in range(self._count)), return_exceptions=True
        )
        failures = [r for r in started if isinstance(r, BaseException)]
        if failures:
            await self.stop(time.monotonic())
            raise failures[0]

    async def _spawn(self, index: int) -> None:
        data, data_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        control, control_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for sock in (data, data_child):
            enlarge_buffers(sock)
        fds = (data_child.fileno(), control_child.fileno())
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "repokit.frontends.workers.process", *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            for sock in (data, control):
                sock.close()
            raise
        finally:
            data_child.close()
            control_child.close()
        host = ServiceHost(self._service, data, control, self.publish, lambda: self._lost(index))
        worker = self._workers[index] = _Worker(index, process, host, time.monotonic())
        host.send(WorkerStart(self._worker_settings, self.state()))
        try:
            await asyncio.wait_for(asyncio.shield(host.ready), START_TIMEOUT_S)
        except BaseException:
            if self._workers.get(index) is worker:
                del self._workers[index]
            host.close()
            _kill(process)
            raise
        log.debug("frontend worker %d started (pid %d)", index, process.pid)

    def _lost(self, index: int) -> None:
        """A worker's link closed: its calls are cancelled (ServiceHost); restart it."""
        worker = self._workers.get(index)
        if worker is None or not worker.host.lost:
            return
        if self._stopping or not worker.host.ready.done():
            return  # stop() or _spawn() deal with it
        del self._workers[index]
        task = asyncio.ensure_future(self._restart(worker))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _restart(self, worker: _Worker) -> None:
        code = await asyncio.to_thread(worker.process.wait)
        log.error(
            "frontend worker %d (pid %d) exited with %s; restarting it",
            worker.index,
            worker.process.pid,
            code,
        )
        if time.monotonic() - worker.started < RESTART_DELAY_S:
            await asyncio.sleep(RESTART_DELAY_S)
        if self._stopping:
            return
        try:
            await self._spawn(worker.index)
        except Exception as exc:
            log.error("frontend worker %d could not restart: %s", worker.index, exc)
            return
        self.restarted += 1

    async def begin_stop(self, deadline: float, *, wait_for_clients: bool = False) -> None:
        """SIGTERM every worker: each stops accepting and drains its requests. With
        ``wait_for_clients``, first until each worker has served the HTTP connections its
        clients held open (they closed, or ``deadline``, time.monotonic(), passed), as one
        process does before the service stops."""
        if self._stopping:
            return
        self._stopping = True
        for task in list(self._restarts):
            task.cancel()
        workers = list(self._workers.values())
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
        if wait_for_clients and workers:
            remaining = max(0.0, deadline - time.monotonic())
            await asyncio.wait([w.host.clients_gone for w in workers], timeout=remaining)

    async def stop(self, deadline: float) -> None:
        """:meth:`begin_stop` (unless begun), wait for the workers until ``deadline``
        (time.monotonic()), then kill what is left."""
        await self.begin_stop(deadline)
        workers = list(self._workers.values())
        for worker in workers:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                await asyncio.to_thread(worker.process.wait, remaining + 1.0)
            except subprocess.TimeoutExpired:
                log.error("frontend worker %d did not stop in time; killed", worker.index)
                _kill(worker.process)
            worker.host.close()
        self._workers.clear()
        for sock in self._reserved:
            sock.close()
        self._reserved = []


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()
