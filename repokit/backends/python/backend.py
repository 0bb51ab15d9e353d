"""Triton python-backend models, each instance in its own process.

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
:mod:`repokit.backends.python.messages`): tensors travel as (dtype, shape,
buffer), those of 64 KiB and more out of band, written from and read into their own memory
without extra copies. The server's end (:mod:`repokit.backends.python.channel`) is driven by
event-loop reader/writer callbacks, so a busy or hung instance never blocks the loop.
An instance's packed results become ``BackendResult`` objects in
:mod:`repokit.backends.python.results`.

Pipelining: one message per instance is at the process at a time, or two when the second is a
batch of several requests (``MESSAGES_IN_FLIGHT``: it waits in the process's socket, so the
process starts it as soon as it has answered the first); further ``execute`` calls for a busy
instance queue up, and when a reply arrives every queued batch (up to
``MERGE_LIMIT_BYTES`` of tensors) goes out in ONE message (both in
:mod:`repokit.backends.python.instance_queue`, the queue of each instance). The process still runs
``execute`` once per batch, in order, and times each (building the pb_utils requests,
``execute``, converting the responses: the batch's ``Timing``), so models see exactly the
batches the scheduler formed (one request per call with the default scheduler, which hands
requests straight to this backend: ``pipelines_executions``). A queued call that is cancelled
is never sent.

What isolation costs (the socket round trip, pickling, building the pb_utils objects around
the model's ``execute``) and how it compares with Triton is measured by
``benchmarks/http_vs_triton.py``; the figures behind the design are in ``benchmarks/README.md``.

Cancellation
------------
A request whose caller goes away (HTTP client disconnect, gRPC cancel, stream closed) is
cancelled: a queued one is never sent to the instance; a running one is told to the process
(``request.is_cancelled()`` becomes True) and every BLS request its ``execute`` made (or makes
from then on) is cancelled with it (see :mod:`repokit.backends.python.server_link`). BLS
requests made from threads the model started are not tied to a request and keep running.

Rescheduling
------------
A model may release a request with ``set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``
in ``execute`` (Triton's iterative sequences). The instance process lists such requests in the
batch's reply; this backend hands each one to :attr:`Backend.on_reschedule` (the iterative
sequence batcher's ``reschedule``) before ``execute`` returns, so the request runs again in a
later batch instead of being answered (a decoupled model's responses so far already went to
the client; the next execution gets a new request key). When the model's scheduler cannot
reschedule (no ``sequence_batching { iterative_sequence: true }``), the request gets UNSUPPORTED
``Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not
configured to handle such a flag.`` and the server log says ``Failed to release request: ...``.
Triton 2.51 only logs that line and never answers the request (the client waits until its
deadline); answering it with the error is deliberate.

Failures
--------
- load: an exception (or ``sys.exit``) in the model import, ``auto_complete_config`` or
  ``initialize`` fails the load with INTERNAL and Triton's text (``RuntimeError: ...`` and the
  ``At:`` frames); a process that dies or does not answer in time fails it too.
- execute: an exception, a wrong number of responses or a non-InferenceResponse gives every
  request of the batch INTERNAL ``Failed to process the request(s) for model '<instance>',
  message: ...``; a response with ``error=TritonError(msg, code)`` gives that request ``msg``
  with ``code``; an instance process that dies gives INTERNAL ``Stub process '<instance>' is not
  healthy.`` to the requests that were at it (and those queued for it).
- a dead instance is reaped and restarted at once (``initialize`` runs again); meanwhile the
  model is not healthy (not ready, and the index says why) and new requests for that instance
  wait for the new process. An ``execute`` that takes longer than ``execute_timeout_s``
  (``--python-execute-timeout-secs``, off by default) kills the process, which is then restarted
  the same way. A model that keeps dying (:mod:`repokit.backends.python.restarts`) is no longer
  restarted: ``on_failed`` tells the core, which marks the version UNAVAILABLE with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import repokit
from repokit.backends.base import (
    Backend,
    BackendRequest,
    BackendResult,
    ModelContext,
    Timing,
    WireRequest,
    WireRun,
    instance_count,
)
from repokit.backends.python import ipc, segments
from repokit.backends.python.channel import Channel
from repokit.backends.python.instance_queue import InstanceQueues, Queued
from repokit.backends.python.messages import (
    AUTO_COMPLETE,
    BODY,
    CANCEL,
    EXECUTE,
    FALLBACK,
    FINALIZE,
    INIT,
    OK,
    RESCHEDULED,
    SENT_LATER,
    WIRE,
    RequestBatch,
    RequestItem,
    WireItem,
)
from repokit.backends.python.restarts import (
    UNHEALTHY_LOG,
    RestartBudget,
    exit_description,
    hang_description,
    not_healthy,
)
from repokit.backends.python.results import ResultUnpacker
from repokit.backends.python.server_link import ServerLink
from repokit.backends.server_api import RequestControl
from repokit.backends.wire_plan import WirePlan
from repokit.errors import Code, RepokitError

if TYPE_CHECKING:
    from repokit.scheduler.rate_limiter import ModelSlots

log = logging.getLogger(__name__)
_STUB_MODULE = "repokit.backends.python.stub"
# The instance process ignores SIGINT and SIGTERM from its first statement, as Triton's stub
# does: Ctrl-C in a terminal, and orchestrators that signal the whole process group (systemd,
# Triton's qa kill_server), reach every process, and the server (not each instance) decides how
# to shut down: it lets requests finish, then has every instance run finalize. An instance
# ends when the server tells it to or when its socket closes (the server is gone).
_STUB_BOOT = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); import runpy; "
    f"runpy.run_module({_STUB_MODULE!r}, run_name='__main__', alter_sys=True)"
)
_PACKAGE_PARENT = str(Path(repokit.__file__).resolve().parent.parent)
NOT_ITERATIVE = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


def _cancel_at_instance(channel: Channel, link: ServerLink, key: int) -> None:
    """A request of this instance was cancelled: tell the process (``is_cancelled()``) and
    cancel the BLS requests it made."""
    channel.send((CANCEL, key))
    link.parent_cancelled(key)


@dataclass(eq=False)
class _Instance:
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


def instance_names(context: ModelContext) -> list[str]:
    """``<group name>_<i>`` for every instance, as Triton names them (``add_sub_0_0`` ...)."""
    names: list[str] = []
    for index, group in enumerate(context.config.instance_group):
        group_name = group.name or f"{context.name}_{index}"
        names.extend(f"{group_name}_{i}" for i in range(max(0, group.count)))
    return names or [f"{context.name}_0_0"]


class PythonBackend(Backend):
    """Runs ``model.py`` (``class TritonPythonModel``) in one process per instance."""

    pipelines_executions = True  # and requests as their bytes: execute_wire (WireBackend)

    def __init__(
        self,
        context: ModelContext,
        *,
        init_timeout_s: float = 600.0,
        finalize_timeout_s: float = 10.0,
        auto_complete: bool = True,
        execute_timeout_s: float | None = None,
        restart_budget: RestartBudget | None = None,
    ) -> None:
        super().__init__(context)
        self._names = instance_names(context)
        self._count = max(instance_count(context.config), len(self._names))
        self._instances: list[_Instance] = []
        self._init_timeout_s = init_timeout_s
        self._finalize_timeout_s = finalize_timeout_s
        self._auto_complete = auto_complete
        self._all_outputs = tuple(o.name for o in context.config.output)
        # packed results -> BackendResults (bound once: it runs for every request)
        self._result = ResultUnpacker().unpack
        self.completed_config_json: str | None = None  # set when auto_complete_config ran
        self._decoupled = context.config.model_transaction_policy.decoupled
        self._keys = itertools.count(1)  # request keys (cancellation, decoupled responses)
        self._execute_timeout_s = (
            context.execute_timeout_s if execute_timeout_s is None else execute_timeout_s
        )
        self._queues = InstanceQueues(self._execute_timeout_s, self._hung, self._instance_at)
        self._budget = restart_budget or RestartBudget()
        self._restarts: dict[int, asyncio.Task[None]] = {}  # instance slot -> its restart
        self._failure = ""  # set when the instances are no longer restarted
        self._unloading = False

    @property
    def instance_count(self) -> int:
        return self._count

    def health(self) -> bool:
        return bool(self._instances) and all(self._alive(i) for i in self._instances)

    def _alive(self, instance: _Instance) -> bool:
        """Whether the instance serves; a process found exited is handled as its socket
        closing would be (its requests fail and it is restarted)."""
        if instance.alive():
            return True
        if not instance.dead and instance.channel is not None:
            instance.channel.close()
        return False

    def problem(self) -> str:
        if self._failure:
            return self._failure
        for instance in self._instances:
            if not self._alive(instance):
                why = instance.death or "its process died"
                return f"instance '{instance.name}' is restarting: {why}"
        return ""

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "python",
            "instances": self._count,
            "pids": [i.process.pid for i in self._instances],
        }

    # --- load ----------------------------------------------------------------------------
    def _model_file(self) -> Path:
        return self.context.version_dir / (self.context.config.default_model_filename or "model.py")

    def _args(self, name: str) -> dict[str, str]:
        return {
            "model_config": self.context.config_json,
            "model_instance_kind": "CPU",
            "model_instance_name": name,
            "model_instance_device_id": "0",
            "model_repository": str(self.context.model_dir),
            "model_version": str(self.context.version),
            "model_name": self.context.name,
        }

    async def load(self) -> None:
        model_file = self._model_file()
        if not model_file.is_file():
            raise RepokitError(
                Code.UNAVAILABLE,
                f"unable to find '{model_file}' for model '{self.context.name}'",
            )
        spawned = [self._spawn(name) for name in self._names[: self._count]]
        try:
            if self._auto_complete:
                body = await self._exchange(
                    spawned[0], AUTO_COMPLETE, "initialize (auto_complete_config)"
                )
                completed = body.get("config")
                if completed:
                    self.completed_config_json = completed
                    adopt = self.on_config_completed
                    if adopt is not None:
                        self.context = adopt(completed)
                    else:  # no server to normalise it: initialize gets it as completed
                        self.context = dataclasses.replace(self.context, config_json=completed)
                    self._adopt_context()
        except BaseException:
            await asyncio.gather(*(self._stop(i, graceful=False) for i in spawned))
            raise
        started = await asyncio.gather(
            *(self._exchange(instance, INIT, "initialize") for instance in spawned),
            return_exceptions=True,
        )
        failures = [r for r in started if isinstance(r, BaseException)]
        self._instances = spawned
        if failures:
            await asyncio.gather(*(self._stop(i, graceful=False) for i in spawned))
            self._instances = []
            first = failures[0]
            if isinstance(first, RepokitError):
                raise first
            raise RepokitError(Code.INTERNAL, f"failed to start python model instance: {first}")

    def configure(self, settings: dict[str, str]) -> None:
        """``--backend-config python,stub-timeout-seconds=N``: the time an instance process
        gets to answer finalize when its model unloads (Triton's stub timeout). The
        shared-memory sizes mean nothing here: tensors travel over a socket."""
        text = settings.get("stub-timeout-seconds")
        if text is not None:
            try:
                seconds = float(text)
            except ValueError:
                seconds = -1.0
            if seconds <= 0:
                raise ValueError(f"stub-timeout-seconds must be a positive number, got '{text}'")
            self._finalize_timeout_s = seconds

    def _adopt_context(self) -> None:
        config = self.context.config
        self._all_outputs = tuple(o.name for o in config.output)
        self._decoupled = config.model_transaction_policy.decoupled

    def _spawn(self, name: str) -> _Instance:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (parent_sock, child_sock):
            ipc.enlarge_buffers(end)
        parent_lane, child_lane = segments.lane_pair()  # large tensors' segment descriptors
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p
        )
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _STUB_BOOT,
                    str(child_sock.fileno()),
                    str(child_lane.fileno()),
                ],
                pass_fds=(child_sock.fileno(), child_lane.fileno()),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            parent_lane.close()
            raise
        finally:
            child_sock.close()
            child_lane.close()
        slot = self._names.index(name) if name in self._names else 0
        instance = _Instance(name=name, process=process, sock=parent_sock, slot=slot)
        lane = segments.FdLane(parent_lane)
        channel = Channel(parent_sock, lambda: self._lost(instance), lane=lane)
        instance.channel = channel
        instance.link = ServerLink(
            name,
            self.context.name,
            self.context.server,
            channel.send,
            instance.streams,
            self._result,
        )
        channel.set_message_handler(instance.link.handle)
        return instance

    async def _exchange(self, instance: _Instance, op: str, phase: str) -> dict[str, Any]:
        """Run ``auto_complete`` or ``init`` on a started process; Triton's load errors."""
        name = instance.name
        payload = {"model_file": str(self._model_file()), "args": self._args(name)}
        try:
            reply = await asyncio.wait_for(
                self._queues.call(instance, op, payload), self._init_timeout_s
            )
        except TimeoutError:
            await self._stop(instance, graceful=False)
            raise RepokitError(
                Code.INTERNAL,
                f"python model instance '{name}' did not finish {phase} within "
                f"{self._init_timeout_s:g} s",
            ) from None
        except ipc.ChannelClosed:
            code = await asyncio.to_thread(instance.process.wait)
            await self._stop(instance, graceful=False)
            raise RepokitError(
                Code.INTERNAL,
                f"{not_healthy(name)} (It {exit_description(code)} during {phase}.)",
            ) from None
        status, body = reply
        if status != OK:
            await self._stop(instance, graceful=False)
            raise RepokitError(Code.INTERNAL, str(body))
        result: dict[str, Any] = body
        return result

    def _lost(self, instance: _Instance) -> None:
        instance.dead = True
        streams = list(instance.streams.values())
        instance.streams.clear()
        error = RepokitError(Code.INTERNAL, f"Stub process '{instance.name}' is not healthy.")
        for control in streams:
            if control.sink is not None:
                control.sink(BackendResult(error=error), True)
        if instance.link is not None:
            instance.link.close()
        self._queues.fail_waiting(instance)
        if instance.stopping or self._unloading or instance not in self._instances:
            return
        slot = self._instances.index(instance)
        if slot not in self._restarts:
            task = asyncio.get_running_loop().create_task(self._restart(slot, instance))
            self._restarts[slot] = task

    # --- restarts ------------------------------------------------------------------------
    async def _restart(self, slot: int, old: _Instance) -> None:
        """Reap a dead instance process and start a new one in its place (``initialize``
        runs again), unless the model keeps dying."""
        try:
            await self._stop(old, graceful=False)  # reaps it (kills it first if it hangs)
            why = old.death or exit_description(old.process.returncode)
            old.death = why
            if not self._budget.allow():
                self._fail(self._budget.exhausted_reason(old.name, why))
                return
            log.error(UNHEALTHY_LOG, old.name, why)
            new = self._spawn(old.name)
            try:
                await self._exchange(new, INIT, "initialize")
            except RepokitError as exc:
                self._fail(f"restarting model instance '{old.name}' failed: {exc.message}")
                return
            except asyncio.CancelledError:  # unloaded meanwhile: the new process goes too
                await self._stop(new, graceful=False)
                raise
            if self._unloading or self._failure:
                await self._stop(new, graceful=False)
                return
            self._instances[slot] = new
        finally:
            self._restarts.pop(slot, None)

    def _fail(self, reason: str) -> None:
        """The instances are not restarted again: the core marks the version UNAVAILABLE."""
        if self._failure:
            return
        self._failure = reason
        log.error("python model '%s' is unavailable: %s", self.context.name, reason)
        if self.on_failed is not None:
            self.on_failed(reason)

    async def _usable(self, slot: int) -> _Instance | None:
        """The instance at ``slot``, after its restart when one runs; None when it is gone."""
        restart = self._restarts.get(slot)
        if restart is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(restart)
        if not self._instances or self._failure:
            return None
        target = self._instances[slot % len(self._instances)]
        return None if target.dead else target

    def _hung(self, instance: _Instance) -> None:
        """An execute message got no reply within the limit: kill the process (its requests
        fail, and it is restarted)."""
        if instance.dead or instance.process.poll() is not None:
            return
        instance.death = hang_description(self._execute_timeout_s)
        instance.process.kill()

    # --- the message queues of the instances (repokit.backends.python.instance_queue) -----
    @property
    def rate_slots(self) -> ModelSlots | None:
        queues = self.__dict__.get("_queues")
        return None if queues is None else queues.rate_slots

    @rate_slots.setter
    def rate_slots(self, slots: ModelSlots | None) -> None:
        queues = self.__dict__.get("_queues")
        if queues is not None:
            queues.rate_slots = slots
        elif slots is not None:
            raise RuntimeError("rate slots set before the backend's queues exist")

    def _instance_at(self, slot: int) -> _Instance | None:
        return self._instances[slot] if slot < len(self._instances) else None

    # --- execute -------------------------------------------------------------------------
    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        if not self._instances:
            error = RepokitError(Code.UNAVAILABLE, f"model '{self.context.name}' is not loaded")
            return [BackendResult(error=error) for _ in requests], Timing()
        slot = instance % len(self._instances)
        target = self._instances[slot]
        if target.dead:
            usable = await self._usable(slot)
            if usable is None:
                return self._gone(target, requests), Timing()
            target = usable
        batch: RequestBatch = [self._request_item(target, r) for r in requests]
        size = sum(t.data.nbytes for r in requests for t in r.inputs.values())
        try:
            status, body, (input_ns, infer_ns, output_ns) = await self._queues.call(
                target, EXECUTE, batch, size
            )
        except ipc.ChannelClosed:
            return self._dead(target, requests), Timing()
        if target.link is not None and not self._decoupled:
            target.link.requests_done(batch)
        timing = Timing(input_ns, infer_ns, output_ns)
        if status != OK:
            if status == RESCHEDULED:
                items, indexes = body
                results = self._reschedule(target, requests, batch, items, indexes)
                return await self._answers_later(target, batch, items, results), timing
            error = RepokitError(Code.INTERNAL, str(body))
            return [BackendResult(error=error) for _ in requests], timing
        results = [self._result(item) for item in body]
        return await self._answers_later(target, batch, body, results), timing

    @staticmethod
    async def _answers_later(
        target: _Instance,
        batch: RequestBatch,
        items: list[Any],
        results: list[BackendResult],
    ) -> list[BackendResult]:
        """Wait for the answers a non-decoupled model sends through response senders after
        its ``execute`` returned (the item :data:`~repokit.backends.python.messages.SENT_LATER`)."""
        link = target.link
        if link is None or SENT_LATER not in items:
            return results
        for index, item in enumerate(items):
            if item == SENT_LATER:
                results[index] = await link.answer(batch[index][-1])
        return results

    async def execute_wire(self, instance: int, request: WireRequest) -> WireRun | None:
        """One request as its bytes: the instance decodes, checks, runs and encodes it
        (:mod:`repokit.backends.python.wire_grpc`, :mod:`.wire_http`); None when it does not
        take it (nothing ran). The plan goes along the first time each instance process gets
        it. A client that goes away cancels the request at the instance (``is_cancelled()``),
        as for :meth:`execute`."""
        if not self._instances:
            return None  # the standard path gives the error
        target = self._instances[instance % len(self._instances)]
        if target.dead:
            return None  # the standard path waits for the restart or gives the error
        key = next(self._keys)
        codec, raw, plan, limit = request
        # the plan goes along until a reply shows the process has it (a message cancelled
        # before it was sent never reached the process)
        item: WireItem = (codec, raw, key, None if target.wire_plan is plan else plan, limit)
        try:
            status, body, (input_ns, infer_ns, output_ns) = await self._queues.call(
                target, EXECUTE, item, len(raw)
            )
        except ipc.ChannelClosed:
            return WireRun(self._dead(target, [None])[0], 0, Timing())
        except asyncio.CancelledError:
            if target.channel is not None and target.link is not None:
                _cancel_at_instance(target.channel, target.link, key)
            raise
        target.wire_plan = plan
        if target.link is not None:
            target.link.request_done(key)
        if status == FALLBACK:
            return None
        timing = Timing(input_ns, infer_ns, output_ns)
        if status != WIRE:  # the instance failed the message as a whole
            return WireRun(BackendResult(error=RepokitError(Code.INTERNAL, str(body))), 0, timing)
        kind, payload, batch_size = body
        if kind == BODY:
            return WireRun(BackendResult(encoded=payload), batch_size, timing)
        if kind == OK:
            result = self._result(payload[0])
            if payload[0] == SENT_LATER and target.link is not None:
                result = await target.link.answer(key)
        elif kind == RESCHEDULED:  # only the sequence batcher can run a request again
            result = BackendResult(error=RepokitError(Code.UNSUPPORTED, NOT_ITERATIVE))
            self._log_release_failure(result.error)
        else:
            result = BackendResult(error=RepokitError(Code.INTERNAL, str(payload)))
        return WireRun(result, batch_size, timing)

    def _log_release_failure(self, error: RepokitError | None) -> None:
        server = self.context.server
        if server is not None and error is not None:
            server.model_log.error("Failed to release request: %s", error.message)

    def _reschedule(
        self,
        target: _Instance,
        requests: list[BackendRequest],
        batch: RequestBatch,
        items: list[Any],
        indexes: tuple[int, ...],
    ) -> list[BackendResult]:
        """Hand the requests the model released with RESCHEDULE to the scheduler; the others
        get their results. A request that cannot be rescheduled gets the error instead."""
        results = [self._result(item) for item in items]
        hook = self.on_reschedule
        for index in indexes:
            if self._decoupled:  # its next execution registers a new key
                target.streams.pop(batch[index][-1], None)
            try:
                if hook is None:
                    raise RepokitError(Code.UNSUPPORTED, NOT_ITERATIVE)
                hook(requests[index])
            except RepokitError as exc:
                self._log_release_failure(exc)
                results[index] = BackendResult(error=exc)
        return results

    def _request_item(self, target: _Instance, request: BackendRequest) -> RequestItem:
        inputs = [
            (name, ipc.pack_array(tensor.data), "BF16" if tensor.datatype == "BF16" else None)
            for name, tensor in request.inputs.items()
        ]
        key = next(self._keys)
        control = request.control
        if control is not None:
            if self._decoupled:
                target.streams[key] = control
            channel, link = target.channel, target.link
            if channel is not None and link is not None:
                control.on_cancel(lambda: _cancel_at_instance(channel, link, key))
        return (
            inputs,
            request.requested_outputs or self._all_outputs,
            request.request_id,
            request.correlation_id,
            request.flags,
            json.dumps(request.parameters) if request.parameters else "{}",
            key,
        )

    @staticmethod
    def _dead(target: _Instance, requests: list[Any]) -> list[BackendResult]:
        """The results of requests that were at (or queued for) a process that died."""
        target.dead = True
        message = not_healthy(target.name)
        if target.death:
            message = f"{message} {target.death[:1].upper()}{target.death[1:]}."
        error = RepokitError(Code.INTERNAL, message)
        return [BackendResult(error=error) for _ in requests]

    def _gone(self, target: _Instance, requests: list[Any]) -> list[BackendResult]:
        """The results of requests for an instance that could not be restarted."""
        if not self._failure:
            return self._dead(target, requests)
        error = RepokitError(
            Code.UNAVAILABLE, f"model '{self.context.name}' is unavailable: {self._failure}"
        )
        return [BackendResult(error=error) for _ in requests]

    # --- unload --------------------------------------------------------------------------
    async def unload(self) -> None:
        self._unloading = True
        restarts = list(self._restarts.values())
        for restart in restarts:
            restart.cancel()
        await asyncio.gather(*restarts, return_exceptions=True)
        instances, self._instances = self._instances, []
        await asyncio.gather(*(self._stop(i, graceful=True) for i in instances))

    async def _stop(self, instance: _Instance, *, graceful: bool) -> None:
        instance.stopping = True
        limit = self._finalize_timeout_s
        if self.unload_deadline is not None:  # shutdown: finalize within the exit timeout
            limit = min(limit, self.unload_deadline - time.monotonic())
            graceful = graceful and limit > 0
        if graceful and instance.alive():
            with contextlib.suppress(ipc.ChannelClosed, TimeoutError):
                await asyncio.wait_for(self._queues.call(instance, FINALIZE, None), limit)
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
