"""Triton python-backend models, each instance in its own process: the ``Backend`` interface.

This module is the glue between the scheduler and three rooms of its own:

- :mod:`repokit.backends.python.processes`: the instance processes (spawn, the
  ``auto_complete_config`` / ``initialize`` exchange, liveness, restarts, stop and
  ``finalize``), and why every instance is a process;
- :mod:`repokit.backends.python.instance_queue`: the message queue of each instance
  (pipelining, merging, hang timers, ``--rate-limit`` turns);
- :mod:`repokit.backends.python.results`: what an instance answered as ``BackendResult``
  objects (packed results, rescheduled requests, dead or gone instances).

Every message between the server and an instance process is listed in
:mod:`repokit.backends.python.messages`. :meth:`PythonBackend.execute` packs a batch into one
EXECUTE item; :meth:`PythonBackend.execute_wire` sends one request as its protocol bytes (the
wire lane: the instance decodes, checks, runs and encodes it).

Pipelining: one message per instance is at the process at a time, or two when the second is a
batch of several requests; further ``execute`` calls for a busy instance queue up and go out
together when a reply arrives (:mod:`repokit.backends.python.instance_queue`). The process
still runs ``execute`` once per batch, in order, and times each (building the pb_utils
requests, ``execute``, converting the responses: the batch's ``Timing``), so models see exactly
the batches the scheduler formed (one request per call with the default scheduler, which hands
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

Failures
--------
- execute: an exception, a wrong number of responses or a non-InferenceResponse gives every
  request of the batch INTERNAL ``Failed to process the request(s) for model '<instance>',
  message: ...``; a response with ``error=TritonError(msg, code)`` gives that request ``msg``
  with ``code``; an instance process that dies gives INTERNAL ``Stub process '<instance>' is not
  healthy.`` to the requests that were at it (and those queued for it).
- load, a dead or hung instance, restarts: :mod:`repokit.backends.python.processes`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Awaitable, Sequence
from typing import Any, NamedTuple, cast

from repokit.backends.base import (
    Backend,
    BackendRequest,
    BackendResult,
    ModelContext,
    RateSlots,
    Timing,
    WireEntry,
    WireRequest,
    WireRun,
)
from repokit.backends.instance_log import log_instance_failure
from repokit.backends.python import ipc
from repokit.backends.python.channel import Channel
from repokit.backends.python.messages import (
    AUTO_COMPLETE,
    BODY,
    CANCEL,
    EXECUTE,
    FALLBACK,
    OK,
    RESCHEDULED,
    SENT_LATER,
    WIRE,
    RequestBatch,
    RequestItem,
    WireEntryItem,
    WireItem,
)
from repokit.backends.python.processes import Instance, InstanceProcesses
from repokit.backends.python.restarts import RestartBudget
from repokit.backends.python.results import (
    ResultUnpacker,
    answers_later,
    dead,
    gone,
    rescheduled,
    wire_failure,
)
from repokit.backends.python.server_link import ServerLink
from repokit.backends.wire_plan import WirePlan
from repokit.errors import Code, RepokitError


def _cancel_at_instance(channel: Channel, link: ServerLink, key: int) -> None:
    """A request of this instance was cancelled: tell the process (``is_cancelled()``) and
    cancel the BLS requests it made."""
    channel.send((CANCEL, key))
    link.parent_cancelled(key)


class PythonBackend(Backend):
    """Runs ``model.py`` (``class TritonPythonModel``) in one process per instance."""

    pipelines_executions = True  # and requests as their bytes: execute_wire (WireBackend)
    updates_instances = True

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
        self._auto_complete = auto_complete
        self._all_outputs = tuple(o.name for o in context.config.output)
        # packed results -> BackendResults (bound once: it runs for every request)
        self._result = ResultUnpacker().unpack
        self.completed_config_json: str | None = None  # set when auto_complete_config ran
        self._decoupled = context.config.model_transaction_policy.decoupled
        self._keys = itertools.count(1)  # request keys (cancellation, decoupled responses)
        processes = InstanceProcesses(
            self,
            self._result,
            init_timeout_s=init_timeout_s,
            finalize_timeout_s=finalize_timeout_s,
            execute_timeout_s=(
                context.execute_timeout_s if execute_timeout_s is None else execute_timeout_s
            ),
            restart_budget=restart_budget or RestartBudget(),
        )
        self._processes = processes
        # what execute and execute_wire use, bound once (the list is never rebound)
        self._instances: list[Instance] = processes.instances
        self._queues = processes.queues

    @property
    def instance_count(self) -> int:
        return self._processes.count

    def health(self) -> bool:
        return self._processes.health()

    def problem(self) -> str:
        return self._processes.problem()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "python",
            "instances": self._processes.count,
            "pids": [i.process.pid for i in self._processes.serving()],
        }

    async def add_instances(self, names: list[str]) -> list[int]:
        return await self._processes.add(names)

    async def remove_instances(self, instances: list[int]) -> None:
        await self._processes.remove(instances)

    # --- load ----------------------------------------------------------------------------
    async def load(self) -> None:
        processes = self._processes
        model_file = processes.model_file()
        if not model_file.is_file():
            raise RepokitError(
                Code.UNAVAILABLE,
                f"unable to find '{model_file}' for model '{self.context.name}'",
            )
        spawned = [processes.spawn(name) for name in processes.names[: processes.count]]
        try:
            if self._auto_complete:
                body = await processes.exchange(
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
            await processes.stop_each(spawned)
            raise
        try:
            await processes.initialize(spawned)
        except RepokitError as exc:
            log_instance_failure(exc.message)
            raise

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
            self._processes.finalize_timeout_s = seconds

    def _adopt_context(self) -> None:
        config = self.context.config
        self._all_outputs = tuple(o.name for o in config.output)
        self._decoupled = config.model_transaction_policy.decoupled

    # --- the message queues of the instances (repokit.backends.python.instance_queue) -----
    @property
    def rate_slots(self) -> RateSlots | None:
        queues = self.__dict__.get("_queues")
        return None if queues is None else queues.rate_slots

    @rate_slots.setter
    def rate_slots(self, slots: RateSlots | None) -> None:
        queues = self.__dict__.get("_queues")
        if queues is not None:
            queues.rate_slots = slots
        elif slots is not None:
            raise RuntimeError("rate slots set before the backend's queues exist")

    # --- execute -------------------------------------------------------------------------
    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        return await self.execute_entries(instance, requests)

    async def execute_entries(
        self, instance: int, requests: Sequence[BackendRequest | WireEntry]
    ) -> tuple[list[BackendResult], Timing]:
        """``execute`` of a batch whose requests may be wire entries (the dynamic batcher's
        wire lane): the instance decodes those itself and encodes their responses; one that
        it does not take gets :data:`~repokit.backends.base.WIRE_FALLBACK`."""
        if not self._instances:
            error = RepokitError(Code.UNAVAILABLE, f"model '{self.context.name}' is not loaded")
            return [BackendResult(error=error) for _ in requests], Timing()
        slot = instance % len(self._instances)
        target = self._instances[slot]
        if target.dead:
            usable = await self._processes.usable(slot)
            if usable is None:
                failure = self._processes.failure
                return gone(target, list(requests), self.context.name, failure), Timing()
            target = usable
        batch: RequestBatch = []
        size = 0
        wired: list[WireEntry] | None = None
        for request in requests:
            if type(request) is WireEntry:
                batch.append(self._wire_entry(target, request))
                size += len(request.request.raw)
                if wired is None:
                    wired = []
                wired.append(request)
                continue
            assert isinstance(request, BackendRequest)
            batch.append(self._request_item(target, request))
            for tensor in request.inputs.values():
                size += tensor.data.nbytes
        try:
            status, body, (input_ns, infer_ns, output_ns, started_ns) = await self._queues.call(
                target, EXECUTE, batch, size
            )
        except ipc.ChannelClosed:
            return dead(target, list(requests)), Timing()
        finally:
            link = target.link
            if link is not None and link.traces:  # BLS calls of execute have been taken
                for item in batch:
                    link.traces.pop(item[-1], None)
            if wired is not None:
                for entry in wired:
                    entry.cancel = None
        if wired is not None:
            target.wire_plan = wired[0].request.plan
        if target.link is not None and not self._decoupled:
            target.link.requests_done(batch)
        timing = Timing(input_ns, infer_ns, output_ns, started_ns)
        if status != OK:
            if status == RESCHEDULED:
                items, indexes = body
                results = rescheduled(
                    cast("list[BackendRequest]", list(requests)),  # wire entries: no hook
                    batch,
                    items,
                    indexes,
                    unpack=self._result,
                    hook=self.on_reschedule,
                    streams=target.streams if self._decoupled else None,
                    server=self.context.server,
                )
                return await answers_later(target, batch, items, results), timing
            error = RepokitError(Code.INTERNAL, str(body))
            return [BackendResult(error=error) for _ in requests], timing
        results = [self._result(item) for item in body]
        return await answers_later(target, batch, body, results), timing

    async def execute_wire(self, instance: int, request: WireRequest) -> WireRun | None:
        """One request as its bytes: the instance decodes, checks, runs and encodes it
        (:mod:`repokit.backends.python.wire_grpc`, :mod:`.wire_http`); None when it does not
        take it (nothing ran). The plan goes along the first time each instance process gets
        it. A client that goes away cancels the request at the instance (``is_cancelled()``),
        as for :meth:`execute`. The steps are :meth:`send_wire`, :meth:`wire_reply` and
        :meth:`wire_cancelled`, which the callback lane (:mod:`repokit.core.quick_wire`) calls
        itself."""
        sent = self.send_wire(instance, request)
        if sent is None:
            return None
        try:
            await sent.reply
        except ipc.ChannelClosed:
            pass  # wire_reply answers it
        except asyncio.CancelledError:
            self.wire_cancelled(sent)
            raise
        run = self.wire_reply(sent)
        if run is None or isinstance(run, WireRun):
            return run
        return await run

    def send_wire(self, instance: int, request: WireRequest) -> SentWire | None:
        """Queue one request as its bytes for an instance; None when it does not take it
        (nothing sent: the standard path waits for a restart or gives the error). The reply
        comes in the returned ``reply`` future, for :meth:`wire_reply`."""
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
        reply = self._queues.call(target, EXECUTE, item, len(raw))
        return SentWire(target, key, plan, reply)

    def wire_cancelled(self, sent: SentWire) -> None:
        """The client of a request :meth:`send_wire` sent went away before its reply was
        taken: the instance is told (the model sees ``is_cancelled()``)."""
        target = sent.target
        if target.channel is not None and target.link is not None:
            _cancel_at_instance(target.channel, target.link, sent.key)

    def wire_reply(self, sent: SentWire) -> WireRun | Awaitable[WireRun] | None:
        """The run of a request :meth:`send_wire` sent, once its ``reply`` is done (not
        cancelled); None when the instance did not take it (nothing ran); an awaitable when
        the instance sends the result on its own later."""
        try:
            status, body, (input_ns, infer_ns, output_ns, started_ns) = sent.reply.result()
        except ipc.ChannelClosed:
            return WireRun(dead(sent.target, [None])[0], 0, Timing())
        target = sent.target
        target.wire_plan = sent.plan
        if target.link is not None:
            target.link.request_done(sent.key)
        if status == FALLBACK:
            return None
        timing = Timing(input_ns, infer_ns, output_ns, started_ns)
        if status != WIRE:  # the instance failed the message as a whole
            return WireRun(BackendResult(error=RepokitError(Code.INTERNAL, str(body))), 0, timing)
        kind, payload, batch_size = body
        if kind == BODY:  # (positional arguments: a third cheaper than encoded=payload)
            return WireRun(BackendResult([], None, {}, payload), batch_size, timing)
        if kind == OK:
            result = self._result(payload[0])
            if payload[0] == SENT_LATER and target.link is not None:
                return _answered_later(target.link.answer(sent.key), batch_size, timing)
        else:
            result = wire_failure(kind, payload, self.context.server)
        return WireRun(result, batch_size, timing)

    def _wire_entry(self, target: Instance, entry: WireEntry) -> WireEntryItem:
        """A wire entry of a batch as the instance gets it (the plan goes along until a
        reply shows the process has it); a client that goes away meanwhile cancels it at the
        instance (``is_cancelled()``)."""
        key = next(self._keys)
        codec, raw, plan, limit = entry.request
        channel, link = target.channel, target.link
        if channel is not None and link is not None:
            entry.cancel = lambda: _cancel_at_instance(channel, link, key)
        return (codec, raw, None if target.wire_plan is plan else plan, limit, key)

    def _request_item(self, target: Instance, request: BackendRequest) -> RequestItem:
        inputs = []  # a loop, not a comprehension: most requests have one or two inputs
        for name, tensor in request.inputs.items():
            bf16 = "BF16" if tensor.datatype == "BF16" else None
            inputs.append((name, ipc.pack_array(tensor.data), bf16))
        key = next(self._keys)
        if request.trace is not None and target.link is not None:
            target.link.traces[key] = request.trace  # its BLS requests are traced under it
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
            _parameters_json(request.parameters) if request.parameters else "{}",
            key,
        )

    # --- unload --------------------------------------------------------------------------
    async def unload(self) -> None:
        await self._processes.stop_all()


class SentWire(NamedTuple):
    """A wire request queued for an instance (:meth:`PythonBackend.send_wire`)."""

    target: Instance
    key: int
    plan: WirePlan
    reply: asyncio.Future[Any]  # the instance's reply (ChannelClosed when it died)


async def _answered_later(answer: Awaitable[BackendResult], batch: int, timing: Timing) -> WireRun:
    """The run of a wire request whose result the instance sends on its own."""
    return WireRun(await answer, batch, timing)


def _parameters_json(parameters: dict[str, Any]) -> str:
    """``request.parameters()`` as Triton's python backend gives it: compact JSON, text as
    UTF-8 (``{"g":"é","n":-5}``), not json.dumps' spaced ASCII."""
    return json.dumps(parameters, separators=(",", ":"), ensure_ascii=False)
