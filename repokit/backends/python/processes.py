"""The instance processes of one python model: start, watch, restart, stop.

How instances run, and why
--------------------------
Every instance is a separate Python process (``python -m repokit.backends.python.stub <fd>``,
started with ``subprocess`` - a fresh interpreter, never ``fork``, because the server runs an
event loop and threads). This is what Triton does with its stub process, and for the same
reasons: a model that raises, calls ``sys.exit``, segfaults, leaks or hangs only affects its
own instance; instances of one model really run in parallel (no shared GIL); and a model's
global state (``sys.path``, module imports, ``triton_python_backend_utils``) cannot collide with
the server's or another model's. The child imports only numpy and the standard library, so an
instance starts in about 0.1 s; the instances of a model start concurrently.

The server talks to an instance over a Unix socketpair (4 MiB socket buffers) with framed
pickle-5 messages (:mod:`repokit.backends.python.ipc`; every message is listed in
:mod:`repokit.backends.python.messages`): tensors travel as (dtype, shape, buffer), those of
64 KiB and more out of band, written from and read into their own memory without extra copies
(the largest in shared-memory segments: :mod:`repokit.backends.python.segments`). The server's end
(:mod:`repokit.backends.python.channel`) is driven by event-loop reader/writer callbacks, so a
busy or hung instance never blocks the loop.

Lifecycle
---------
- load: :meth:`InstanceProcesses.spawn` starts the processes, :meth:`~InstanceProcesses.exchange`
  runs ``auto_complete_config`` (on the first) and ``initialize`` (on each). An exception (or
  ``sys.exit``) in the model import, ``auto_complete_config`` or ``initialize`` fails the load
  with INTERNAL and Triton's text (``RuntimeError: ...`` and the ``At:`` frames); a process
  that dies or does not answer in time fails it too.
- liveness: an instance whose process exited, or whose socket closed, is lost
  (:meth:`~InstanceProcesses.lost`): its decoupled requests get INTERNAL ``Stub process
  '<instance>' is not healthy.`` and what waited for it fails; meanwhile the model is not
  healthy (not ready, and the index says why: :meth:`~InstanceProcesses.problem`).
- restart: a lost instance is reaped and restarted at once (``initialize`` runs again); new
  requests for it wait for the new process (:meth:`~InstanceProcesses.usable`). An ``execute``
  that takes longer than ``execute_timeout_s`` (``--python-execute-timeout-secs``, off by
  default) kills the process, which is then restarted the same way. A model that keeps dying
  (:mod:`repokit.backends.python.restarts`) is no longer restarted: the backend's ``on_failed``
  tells the core, which marks the version UNAVAILABLE with the reason.
- stop: on unload every instance runs ``finalize`` (within ``stub-timeout-seconds``, and the
  shutdown deadline) and its process is reaped; one that does not end is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import repokit
from repokit.backends.base import (
    Backend,
    BackendResult,
    instance_count,
    instance_names,
)
from repokit.backends.python import ipc, segments
from repokit.backends.python.channel import Channel
from repokit.backends.python.instance_queue import InstanceQueues, Queued
from repokit.backends.python.messages import FINALIZE, INIT, OK, PackedResult
from repokit.backends.python.restarts import (
    UNHEALTHY_LOG,
    RestartBudget,
    exit_description,
    hang_description,
    not_healthy,
)
from repokit.backends.python.server_link import ServerLink
from repokit.backends.server_api import RequestControl
from repokit.backends.wire_plan import WirePlan
from repokit.errors import Code, RepokitError

log = logging.getLogger(__name__)
_STUB_MODULE = "repokit.backends.python.stub"
# The instance process ignores SIGINT and SIGTERM from its first statement, as Triton's stub
# does: Ctrl-C in a terminal, and orchestrators that signal the whole process group (systemd,
# Triton's qa kill_server), reach every process, and the server (not each instance) decides how
# to shut down: it lets requests finish, then has every instance run finalize. An instance
# ends when the server tells it to or when its socket closes (the server is gone).
# the instance dies with the server (SIGKILL when the thread that started it ends: its event
# loop's, which lives as long as the server), even one busy in execute when the server is
# killed; an idle one would also see its socket close
_STUB_BOOT = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "from repokit.parent_death import tie_to_parent; tie_to_parent({parent}); import runpy; "
    f"runpy.run_module({_STUB_MODULE!r}, run_name='__main__', alter_sys=True)"
)
_PACKAGE_PARENT = str(Path(repokit.__file__).resolve().parent.parent)


@dataclass(eq=False)
class Instance:
    """One instance process and the messages waiting while its current exchange runs."""

    name: str
    process: subprocess.Popen[bytes]
    sock: socket.socket
    channel: Channel | None = None
    queue: list[Queued] = field(default_factory=list)  # its message queue (instance_queue)
    in_flight: int = 0  # messages at the process whose replies have not arrived yet
    dead: bool = False
    link: ServerLink | None = None  # what the process asks of the server
    streams: dict[int, RequestControl] = field(default_factory=dict)  # decoupled requests
    wire_plan: WirePlan | None = None  # the plan the process has for wire requests
    stopping: bool = False  # stopped on purpose (unload): not restarted
    death: str = ""  # why the server killed it (a hung execute), for the error and the log
    # hang timers of the execute messages at the process, in the order they were sent
    timers: deque[asyncio.TimerHandle | None] = field(default_factory=deque)
    slot: int = 0  # its place among the model's instances (a restart keeps it)

    def alive(self) -> bool:
        return not self.dead and self.process.poll() is None


class InstanceProcesses:
    """The instance processes of one backend (``owner``: its context, ``unload_deadline`` and
    ``on_failed`` as the core set them) and their message queues."""

    def __init__(
        self,
        owner: Backend,
        unpack: Callable[[PackedResult | None], BackendResult],
        *,
        init_timeout_s: float,
        finalize_timeout_s: float,
        execute_timeout_s: float,
        restart_budget: RestartBudget,
    ) -> None:
        self._owner = owner
        self._unpack = unpack  # packed results -> BackendResults (the ServerLinks' answers)
        self.names = instance_names(owner.context)
        self.count = max(instance_count(owner.context.config), len(self.names))
        # the serving instances, by slot: one list for the backend's life (never rebound, so
        # the backend keeps a reference to it for its execute calls)
        self.instances: list[Instance] = []
        self.init_timeout_s = init_timeout_s
        self.finalize_timeout_s = finalize_timeout_s
        self.execute_timeout_s = execute_timeout_s
        self.queues = InstanceQueues(execute_timeout_s, self._hung, self.instance_at)
        self._budget = restart_budget
        self._restarts: dict[int, asyncio.Task[None]] = {}  # instance slot -> its restart
        self.failure = ""  # set when the instances are no longer restarted
        self._unloading = False
        self.removed: set[int] = set()  # slots of instances an update removed

    # --- liveness --------------------------------------------------------------------------
    def serving(self) -> list[Instance]:
        """The instances not removed by an update."""
        removed = self.removed
        if not removed:
            return self.instances
        return [i for slot, i in enumerate(self.instances) if slot not in removed]

    def health(self) -> bool:
        serving = self.serving()
        return bool(serving) and all(self._alive(i) for i in serving)

    def _alive(self, instance: Instance) -> bool:
        """Whether the instance serves; a process found exited is handled as its socket
        closing would be (its requests fail and it is restarted)."""
        if instance.alive():
            return True
        if not instance.dead and instance.channel is not None:
            instance.channel.close()
        return False

    def problem(self) -> str:
        if self.failure:
            return self.failure
        for instance in self.serving():
            if not self._alive(instance):
                why = instance.death or "its process died"
                return f"instance '{instance.name}' is restarting: {why}"
        return ""

    def instance_at(self, slot: int) -> Instance | None:
        return self.instances[slot] if slot < len(self.instances) else None

    # --- start -----------------------------------------------------------------------------
    def model_file(self) -> Path:
        context = self._owner.context
        return context.version_dir / (context.config.default_model_filename or "model.py")

    def _args(self, name: str) -> dict[str, str]:
        context = self._owner.context
        return {
            "model_config": context.config_json,
            "model_instance_kind": "CPU",
            "model_instance_name": name,
            "model_instance_device_id": "0",
            "model_repository": str(context.model_dir),
            "model_version": str(context.version),
            "model_name": context.name,
        }

    def spawn(self, name: str, slot: int | None = None) -> Instance:
        """Start the process of one instance (it then waits for AUTO_COMPLETE or INIT);
        ``slot``: its place (by default, that of its name among the config's instances)."""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (parent_sock, child_sock):
            ipc.enlarge_buffers(end)
        parent_fds, child_fds = segments.fd_socket_pair()  # large tensors' segment descriptors
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
        )
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _STUB_BOOT.format(parent=os.getpid()),
                    str(child_sock.fileno()),
                    str(child_fds.fileno()),
                ],
                pass_fds=(child_sock.fileno(), child_fds.fileno()),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            parent_fds.close()
            raise
        finally:
            child_sock.close()
            child_fds.close()
        if slot is None:
            slot = self.names.index(name) if name in self.names else 0
        instance = Instance(name=name, process=process, sock=parent_sock, slot=slot)
        fd_socket = segments.FdSocket(parent_fds)
        channel = Channel(parent_sock, lambda: self.lost(instance), fd_socket=fd_socket)
        instance.channel = channel
        context = self._owner.context
        instance.link = ServerLink(
            name, context.name, context.server, channel.send, instance.streams, self._unpack
        )
        channel.set_message_handler(instance.link.handle)
        return instance

    async def exchange(self, instance: Instance, op: str, phase: str) -> dict[str, Any]:
        """Run ``auto_complete`` or ``init`` on a started process; Triton's load errors."""
        name = instance.name
        payload = {"model_file": str(self.model_file()), "args": self._args(name)}
        try:
            reply = await asyncio.wait_for(
                self.queues.call(instance, op, payload), self.init_timeout_s
            )
        except TimeoutError:
            await self.stop(instance, graceful=False)
            raise RepokitError(
                Code.INTERNAL,
                f"python model instance '{name}' did not finish {phase} within "
                f"{self.init_timeout_s:g} s",
            ) from None
        except ipc.ChannelClosed:
            code = await asyncio.to_thread(instance.process.wait)
            await self.stop(instance, graceful=False)
            raise RepokitError(
                Code.INTERNAL,
                f"{not_healthy(name)} (It {exit_description(code)} during {phase}.)",
            ) from None
        status, body = reply
        if status != OK:
            await self.stop(instance, graceful=False)
            raise RepokitError(Code.INTERNAL, str(body))
        result: dict[str, Any] = body
        return result

    async def initialize(self, spawned: list[Instance]) -> None:
        """Run ``initialize`` on every started process; they serve when all succeeded, else
        every one is stopped and the first failure raised."""
        started = await asyncio.gather(
            *(self.exchange(instance, INIT, "initialize") for instance in spawned),
            return_exceptions=True,
        )
        failures = [r for r in started if isinstance(r, BaseException)]
        self.instances[:] = spawned
        if failures:
            await self.stop_each(spawned)
            self.instances.clear()
            first = failures[0]
            if isinstance(first, RepokitError):
                raise first
            raise RepokitError(Code.INTERNAL, f"failed to start python model instance: {first}")

    async def add(self, names: list[str]) -> list[int]:
        """Start and initialize more instances (an in-place update); their slots. When one
        fails, every one of them is stopped and the first failure raised."""
        first = len(self.instances)
        spawned = [self.spawn(name, first + k) for k, name in enumerate(names)]
        started = await asyncio.gather(
            *(self.exchange(instance, INIT, "initialize") for instance in spawned),
            return_exceptions=True,
        )
        failures = [r for r in started if isinstance(r, BaseException)]
        if failures:
            await self.stop_each(spawned)
            failure = failures[0]
            if isinstance(failure, RepokitError):
                raise failure
            raise RepokitError(Code.INTERNAL, f"failed to start python model instance: {failure}")
        self.instances.extend(spawned)
        self.count = len(self.serving())
        return list(range(first, first + len(spawned)))

    async def remove(self, slots: list[int]) -> None:
        """Removed by an update: each runs ``finalize`` and ends (its slot stays taken)."""
        self.removed.update(slots)
        self.count = len(self.serving())
        restarts = [self._restarts[s] for s in slots if s in self._restarts]
        for restart in restarts:
            restart.cancel()
        await asyncio.gather(*restarts, return_exceptions=True)
        await asyncio.gather(*(self.stop(self.instances[s], graceful=True) for s in slots))

    # --- a lost instance and its restart ---------------------------------------------------
    def lost(self, instance: Instance) -> None:
        """The instance's socket closed (its process is gone): fail what waited for it and
        restart it unless it was stopped on purpose."""
        instance.dead = True
        streams = list(instance.streams.values())
        instance.streams.clear()
        error = RepokitError(Code.INTERNAL, f"Stub process '{instance.name}' is not healthy.")
        for control in streams:
            if control.sink is not None:
                control.sink(BackendResult(error=error), True)
        if instance.link is not None:
            instance.link.close()
        self.queues.fail_waiting(instance)
        if instance.stopping or self._unloading or instance not in self.instances:
            return
        slot = self.instances.index(instance)
        if slot not in self._restarts:
            task = asyncio.get_running_loop().create_task(self._restart(slot, instance))
            self._restarts[slot] = task

    async def _restart(self, slot: int, old: Instance) -> None:
        """Reap a dead instance process and start a new one in its place (``initialize``
        runs again), unless the model keeps dying."""
        try:
            await self.stop(old, graceful=False)  # reaps it (kills it first if it hangs)
            why = old.death or exit_description(old.process.returncode)
            old.death = why
            if not self._budget.allow():
                self._fail(self._budget.exhausted_reason(old.name, why))
                return
            log.error(UNHEALTHY_LOG, old.name, why)
            new = self.spawn(old.name, old.slot)
            try:
                await self.exchange(new, INIT, "initialize")
            except RepokitError as exc:
                self._fail(f"restarting model instance '{old.name}' failed: {exc.message}")
                return
            except asyncio.CancelledError:  # unloaded meanwhile: the new process goes too
                await self.stop(new, graceful=False)
                raise
            if self._unloading or self.failure or slot in self.removed:
                await self.stop(new, graceful=False)
                return
            self.instances[slot] = new
        finally:
            self._restarts.pop(slot, None)

    def _fail(self, reason: str) -> None:
        """The instances are not restarted again: the core marks the version UNAVAILABLE."""
        if self.failure:
            return
        self.failure = reason
        log.error("python model '%s' is unavailable: %s", self._owner.context.name, reason)
        on_failed = self._owner.on_failed
        if on_failed is not None:
            on_failed(reason)

    async def usable(self, slot: int) -> Instance | None:
        """The instance at ``slot``, after its restart when one runs; None when it is gone."""
        restart = self._restarts.get(slot)
        if restart is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(restart)
        if not self.instances or self.failure:
            return None
        target = self.instances[slot % len(self.instances)]
        return None if target.dead else target

    def _hung(self, instance: Instance) -> None:
        """An execute message got no reply within the limit: kill the process (its requests
        fail, and it is restarted)."""
        if instance.dead or instance.process.poll() is not None:
            return
        instance.death = hang_description(self.execute_timeout_s)
        instance.process.kill()

    # --- stop ------------------------------------------------------------------------------
    async def stop_all(self) -> None:
        """Unload: cancel the restarts, then every instance runs ``finalize`` and ends."""
        self._unloading = True
        restarts = list(self._restarts.values())
        for restart in restarts:
            restart.cancel()
        await asyncio.gather(*restarts, return_exceptions=True)
        instances = list(self.serving())  # those an update removed were stopped then
        self.instances.clear()
        await asyncio.gather(*(self.stop(i, graceful=True) for i in instances))

    async def stop_each(self, instances: list[Instance]) -> None:
        """Stop these processes without ``finalize`` (a load that failed)."""
        await asyncio.gather(*(self.stop(i, graceful=False) for i in instances))

    async def stop(self, instance: Instance, *, graceful: bool) -> None:
        instance.stopping = True
        limit = self.finalize_timeout_s
        deadline = self._owner.unload_deadline
        if deadline is not None:  # shutdown: finalize within the exit timeout
            limit = min(limit, deadline - time.monotonic())
            graceful = graceful and limit > 0
        if graceful and instance.alive():
            with contextlib.suppress(ipc.ChannelClosed, TimeoutError):
                await asyncio.wait_for(self.queues.call(instance, FINALIZE, None), limit)
        process = instance.process
        if process.poll() is None:
            try:
                await asyncio.to_thread(process.wait, 2.0 if graceful else 0.2)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)
        # the process is gone: a hung exchange and everything queued get ChannelClosed
        if instance.channel is not None:
            instance.channel.close()
        else:
            instance.sock.close()
        instance.dead = True
