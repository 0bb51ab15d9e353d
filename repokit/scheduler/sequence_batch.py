"""The sequence batcher: Direct and Oldest strategies over ``SequenceSlots`` (asyncio driver).

Each request names its sequence with ``correlation_id`` (uint64 or string) and carries
``flags`` (1 = START, 2 = END), as ``BackendRequest`` does. The scheduler checks it (Triton's
request-time rules), queues it on its sequence, and a worker per instance sends batches:

* Direct: the instance's slots in layout order; an empty slot is a *filler* request: the inputs
  of a real request of the batch with all-zero data, zero implicit state, START/END false,
  READY false and CORRID 0 (Triton's null request). Its result is discarded.
* Oldest: the head request of every idle candidate sequence of the instance goes into a
  per-instance dynamic batcher (``StrategyOldest`` preferred sizes and delay), oldest first;
  as in the dynamic batcher, requests whose shapes differ (inputs without
  ``allow_ragged_batch``) do not share a batch.

Control tensors and implicit state are added to each request before execution; the state
output of request i becomes the state input of request i+1 and is not returned to the client.
``TRITONSERVER_DELAY_SCHEDULER=N`` (Triton's test hook, read by ``core.scheduling``) holds every
worker back until N requests wait in slots and, with ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M``,
M requests in the backlog (Triton's ``SequenceBatchScheduler::DelayScheduler``), once.

A reaper frees the slot of a sequence idle for ``max_sequence_idle_microseconds`` (1 s default),
and rejects backlogged sequences whose request ``timeout`` passed (UNAVAILABLE ``timeout of the
corresponding sequence has been expired``, every request of the sequence; the timeout only
applies while the sequence waits in the backlog, as in Triton).

Iterative sequences (``iterative_sequence: true``, Triton's ``IterativeSequencer``):

* a request without a correlation id gets the next generated id (1, 2, ...; ids of live
  sequences are skipped) and the START flag;
* the backend may put a request it is executing back into its sequence's queue by calling
  :meth:`SequenceBatchScheduler.reschedule` with the ``BackendRequest`` object it received,
  before its ``execute()`` returns (what the python backend does for
  ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``). The result of that execution for the request is
  discarded (responses of decoupled models already went out through the request's control);
  the request runs again in a later batch with START and END false, and its client waits until
  an execution does not reschedule it;
* a request that finishes without being rescheduled ends its sequence (the slot is freed; other
  requests queued on that sequence are CANCELLED), as Triton ends it with a null END request.

A request cancelled while it waits (its caller's task is cancelled: the client went away)
cancels its whole sequence, as Triton 2.51's sequence batcher does: the sequence leaves the
backlog or frees its slot (a request of it that runs now still finishes), its other queued
requests are answered CANCELLED and, like the cancelled one, counted as failures with reason
CANCELED; a later request of that id needs START again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.base import Backend, BackendRequest, BackendResult
from repokit.errors import Code, RepokitError, internal, unavailable, unsupported
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor
from repokit.scheduler.base import (
    CANCELLED_MESSAGE,
    CancelledInQueue,
    Retiring,
    ScheduledResult,
    Scheduler,
)
from repokit.scheduler.batch_tensors import (
    BatchingRules,
    batching_key,
    merge_requests,
    split_result,
)
from repokit.scheduler.default import active_instances
from repokit.scheduler.dynamic_batch import BatchPlanner, DynamicBatchSettings
from repokit.scheduler.runtime import (
    BatchHook,
    Clock,
    Waker,
    execute_batch,
    monotonic_clock,
    settle,
)
from repokit.scheduler.sequence_controls import (
    FLAG_END,
    FLAG_START,
    ImplicitStates,
    SequenceControls,
    missing_start_error,
)
from repokit.scheduler.sequence_slots import Dispatched, LiveSequence, SeqEntry, SequenceSlots

DEFAULT_IDLE_US = 1_000_000
BACKLOG_TIMEOUT_MESSAGE = "timeout of the corresponding sequence has been expired"

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    request: BackendRequest
    future: asyncio.Future[ScheduledResult]
    enqueue_ns: int


class SequenceBatchScheduler(Scheduler):
    updates_instances = True

    def __init__(
        self,
        backend: Backend,
        config: mc.ModelConfig | None = None,
        *,
        model_dir: Path | None = None,
        clock: Clock = monotonic_clock,
        merge_batches: bool = False,
        instances: Sequence[int] | None = None,
        on_execution: BatchHook | None = None,
        hold_until_queued: int = 0,
        hold_until_backlog: int = 0,
    ) -> None:
        config = config if config is not None else backend.context.config
        sb = config.sequence_batching
        self._backend = backend
        self._clock = clock
        self._merge = merge_batches and config.max_batch_size > 0
        self._on_execution = on_execution
        self._rules = BatchingRules.from_config(config)
        self._controls = SequenceControls(config)
        self._states = ImplicitStates(config, model_dir or backend.context.model_dir)
        self._state_outputs = tuple(s.output_name for s in self._states.specs)
        self._config_outputs = tuple(o.name for o in config.output)
        self._listed_states = frozenset(self._state_outputs).intersection(self._config_outputs)
        self._oldest = sb.HasField("oldest")
        self._config = config
        self._direct_delay_ns = int(sb.direct.max_queue_delay_microseconds) * 1000
        self._direct_min_util = float(sb.direct.minimum_slot_utilization)
        # inputs whose shapes must match to batch: a Direct batch holds one shape of them
        self._direct_key: Callable[[_Job], Hashable] | None = (
            (lambda job: batching_key(job.request, self._rules))
            if self._rules.checks_inputs
            else None
        )
        instance_ids = (
            list(instances)
            if instances is not None
            else active_instances(config, backend.instance_count)
        )
        per_instance = max(1, int(config.max_batch_size))
        if self._oldest and sb.oldest.max_candidate_sequences > 0:
            per_instance = int(sb.oldest.max_candidate_sequences)
        idle_us = int(sb.max_sequence_idle_microseconds) or DEFAULT_IDLE_US
        self.slots: SequenceSlots[_Job] = SequenceSlots(
            config.name, instance_ids, per_instance, idle_us * 1000
        )
        self._planners: dict[int, BatchPlanner[Dispatched[_Job]]] = {}
        if self._oldest:
            settings = DynamicBatchSettings.for_oldest_sequences(config)
            self._planners = {i: BatchPlanner(settings) for i in instance_ids}
        self._iterative = bool(sb.iterative_sequence)
        self._next_id = 1
        # prepared requests of the batches executing now -> their job; reschedule() marks them
        self._executing: dict[int, tuple[BackendRequest, Dispatched[_Job]]] = {}
        self._rescheduled: set[int] = set()
        self._waker = Waker(clock)
        self._tasks: list[asyncio.Task[None]] = []
        self._by_instance: dict[int, asyncio.Task[None]] = {}  # each instance's worker
        self._running = False
        self._stopping = False
        # Triton's test hooks (TRITONSERVER_DELAY_SCHEDULER, ..._BACKLOG_DELAY_SCHEDULER)
        self._hold_until = hold_until_queued
        self._hold_backlog = hold_until_backlog if hold_until_queued else 0

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        self._running, self._stopping = True, False
        self._by_instance = {
            i: asyncio.create_task(self._worker(i), name=f"sequence-{i}")
            for i in self.slots.instances
        }
        self._tasks = list(self._by_instance.values())
        self._tasks.append(asyncio.create_task(self._reaper(), name="sequence-reaper"))

    async def stop(self) -> None:
        """Run what is dispatchable, then fail requests still waiting for a slot."""
        self._stopping = True
        self._waker.poke()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._running = False
        error = unavailable("model is not accepting requests: its scheduler is stopped")
        for seq in list(self.slots.backlog):
            for entry in seq.queue:
                if not entry.payload.future.done():
                    entry.payload.future.set_exception(error)

    def add_instances(self, instances: list[int]) -> None:
        for instance in instances:
            if self._oldest:
                settings = DynamicBatchSettings.for_oldest_sequences(self._config)
                self._planners[instance] = BatchPlanner(settings)
            self.slots.add_instance(instance)
            task = asyncio.create_task(self._worker(instance), name=f"sequence-{instance}")
            self._by_instance[instance] = task
            self._tasks.append(task)
        self._waker.poke()

    def retire_instances(self, instances: list[int]) -> list[Retiring]:
        """Their slots take no new sequence; each worker ends once the sequences it holds
        ended (Triton keeps a removed instance until then)."""
        retiring = []
        loop = asyncio.get_running_loop()
        for instance in instances:
            self.slots.retire(instance)
            done: asyncio.Future[None] = loop.create_future()
            task = self._by_instance.pop(instance, None)
            if task is None:
                done.set_result(None)
            else:
                task.add_done_callback(functools.partial(_settle_done, done))
            lingers = not self.slots.vacant(instance)
            retiring.append(Retiring(instance, done, lingers))
        self._waker.poke()
        return retiring

    @property
    def pending_count(self) -> int:
        return self.slots.queued_count + sum(len(p) for p in self._planners.values())

    @property
    def open_sequences(self) -> int | None:
        return self.slots.live_count

    def wake(self) -> None:
        """Re-evaluate slots, delays and idle sequences now (after moving an injected clock)."""
        self._waker.poke()

    # --- requests -----------------------------------------------------------------------
    async def submit(
        self,
        request: BackendRequest,
        batch_size: int,
        *,
        priority: int = 0,
        timeout_us: int = 0,
    ) -> ScheduledResult:
        if not self._running or self._stopping:
            raise unavailable("model is not accepting requests: its scheduler is stopped")
        if self._iterative and (request.correlation_id == 0 or request.correlation_id == ""):
            request.correlation_id = self._generated_id()
            request.flags = FLAG_START
        self._controls.check_request(request.correlation_id, batch_size)
        now = self._clock()
        job = _Job(request, asyncio.get_running_loop().create_future(), now)
        seq = self.slots.enqueue(
            request.correlation_id,
            job,
            start=bool(request.flags & FLAG_START),
            end=bool(request.flags & FLAG_END),
            now_ns=now,
            timeout_ns=max(0, timeout_us) * 1000,
        )
        self._waker.poke()
        try:
            return await job.future
        except asyncio.CancelledError:
            left = self.slots.cancel(seq, job)
            if left is None:
                raise
            _answer_cancelled(seq.corrid, left)
            self._waker.poke()  # a backlogged sequence may have got the slot
            raise CancelledInQueue from None

    def reschedule(self, request: BackendRequest) -> None:
        """Run ``request`` (a request the backend is executing now) again in a later batch of
        its sequence instead of answering it (iterative sequences only, see the module doc)."""
        if not self._iterative:
            raise unsupported(
                f"model '{self.slots.model}' cannot reschedule requests: its sequence batching "
                "is not iterative_sequence"
            )
        if id(request) not in self._executing:
            raise internal("cannot reschedule a request that is not executing")
        self._rescheduled.add(id(request))

    def _generated_id(self) -> int:
        while self.slots.is_live(self._next_id):
            self._next_id += 1
        corrid = self._next_id
        self._next_id += 1
        return corrid

    # --- workers ------------------------------------------------------------------------
    async def _held_back(self) -> None:
        """Triton's test hook: no batch until ``hold_until_queued`` requests wait in slots
        (and ``hold_until_backlog`` in the backlog), once per scheduler."""
        slots = self.slots
        while self._hold_until and not self._stopping:
            if slots.slotted_count >= self._hold_until and (
                slots.backlog_count >= self._hold_backlog
            ):
                break
            await self._waker.sleep()
        self._hold_until = 0

    async def _worker(self, instance: int) -> None:
        if self._hold_until:
            await self._held_back()
        while True:
            now = self._clock()
            if self._oldest:
                planner = self._planners[instance]
                for dispatched in self.slots.ready_heads(instance):
                    planner.enqueue(
                        dispatched,
                        now_ns=dispatched[1].enqueue_ns,
                        key=batching_key(dispatched[1].payload.request, self._rules),
                    )
                decision = planner.poll(now)
                if not decision.batch and self._stopping and len(planner):
                    decision.batch = planner.queues.pop_front(len(planner))
                wake = decision.wake_at_ns
                batch: list[Dispatched[_Job] | None] = [item.payload for item in decision.batch]
            else:
                delay = 0 if self._stopping else self._direct_delay_ns
                batch, wake = self.slots.direct_batch(
                    instance, now, delay, self._direct_min_util, self._direct_key
                )
            if batch:
                await self._run(instance, batch)
                continue
            if self._stopping:
                return
            if (
                instance in self.slots.retired
                and self.slots.vacant(instance)
                and not (self._oldest and len(self._planners[instance]))
            ):
                return
            await self._waker.sleep(wake)

    async def _reaper(self) -> None:
        while not self._stopping:
            now = self._clock()
            reaped, next_ns = self.slots.reap(now)
            if reaped:
                self._waker.poke()  # backlogged sequences may have got a slot
            expired, deadline_ns = self.slots.expire_backlog(now)
            for seq in expired:
                _fail_all(seq, unavailable(BACKLOG_TIMEOUT_MESSAGE))
            if deadline_ns and (next_ns == 0 or deadline_ns < next_ns):
                next_ns = deadline_ns
            await self._waker.sleep(next_ns)

    async def _run(self, instance: int, batch: list[Dispatched[_Job] | None]) -> None:
        """Run a batch and answer its requests. Whatever goes wrong around the backend's
        execution (preparing, joining or splitting the batch, its states) fails the batch's
        requests with INTERNAL and the worker goes on: the model's other requests are served."""
        try:
            await self._run_batch(instance, batch)
        except Exception as exc:
            log.exception("model '%s': a sequence batch failed", self.slots.model)
            error = internal(f"sequence batch failed: {type(exc).__name__}: {exc}")
            now = self._clock()
            for dispatched in batch:
                if dispatched is None:
                    continue
                seq, entry = dispatched
                for key in [k for k, (_, d) in self._executing.items() if d is dispatched]:
                    del self._executing[key]
                self.slots.complete(seq, now)
                settle_error(entry.payload, error)
            self._waker.poke()

    async def _run_batch(self, instance: int, batch: list[Dispatched[_Job] | None]) -> None:
        real = {i: self._prepare(d) for i, d in enumerate(batch) if d is not None}
        template = next(iter(real.values()))
        requests = [real[i] if i in real else self._filler(template) for i in range(len(batch))]
        if self._iterative:
            for prepared, dispatched in zip(requests, batch, strict=True):
                if dispatched is not None:
                    self._executing[id(prepared)] = (prepared, dispatched)
        start_ns = self._clock()
        if self._merge:
            merged = merge_requests(requests, self._rules)
            results, timing = await execute_batch(self._backend, instance, [merged])
            results = split_result(results[0], requests, [1] * len(requests), self._rules)
        else:
            results, timing = await execute_batch(self._backend, instance, requests)
        if self._on_execution is not None:
            self._on_execution(len(requests), timing)
        now = self._clock()
        for dispatched, prepared, result in zip(batch, requests, results, strict=True):
            if dispatched is None:
                continue
            seq, entry = dispatched
            job = entry.payload
            if result.error is None and self._states:
                outputs, seq.data = self._states.take_outputs(
                    result.outputs, seq.data, self._shown_states(job.request)
                )
                result = BackendResult(outputs=outputs, parameters=result.parameters)
            self.slots.complete(seq, now)
            if self._iterative and self._after_iteration(seq, entry.end, job, prepared, now):
                continue
            settle(job.future, ScheduledResult(result, start_ns - job.enqueue_ns, timing))
        self._waker.poke()

    def _after_iteration(
        self, seq: LiveSequence[_Job], end: bool, job: _Job, prepared: BackendRequest, now: int
    ) -> bool:
        """Iterative sequences: requeue a rescheduled request (True: do not answer it yet), or
        end the sequence of a request that finished."""
        key = id(prepared)
        self._executing.pop(key, None)
        if key in self._rescheduled:
            self._rescheduled.discard(key)
            if self.slots.requeue(seq, job, now):
                return True
            settle_error(job, missing_start_error(seq.corrid, self.slots.model))
            return True
        if not end:
            _answer_cancelled(seq.corrid, self.slots.end(seq))
        return False

    def _shown_states(self, request: BackendRequest) -> frozenset[str]:
        """The state outputs the client gets too: those the config lists as outputs (Triton
        2.51 answers them then, L0_implicit_state test_request_output), when asked for or
        when the client asked for no outputs in particular (all of them)."""
        listed = self._listed_states
        if not listed:
            return listed
        asked = request.requested_outputs
        return listed if not asked else listed.intersection(asked)

    def _prepare(self, dispatched: Dispatched[_Job]) -> BackendRequest:
        seq, entry = dispatched
        request = entry.payload.request
        inputs = dict(request.inputs)
        inputs.update(
            self._controls.tensors(start=entry.start, end=entry.end, ready=True, corrid=seq.corrid)
        )
        requested = request.requested_outputs
        if self._states:
            if entry.start or seq.data is None:
                seq.data = self._states.initial()
            inputs.update(seq.data)
            # the state outputs are asked for too, also when the client asked for none (all
            # of the config's outputs): a backend answers those only (onnxruntime)
            requested = tuple(
                dict.fromkeys((requested or self._config_outputs) + self._state_outputs)
            )
        return BackendRequest(
            inputs=inputs,
            requested_outputs=requested,
            parameters=request.parameters,
            request_id=request.request_id,
            correlation_id=request.correlation_id,
            # the entry's flags: a rescheduled request runs again with START and END false
            flags=(FLAG_START if entry.start else 0) | (FLAG_END if entry.end else 0),
            control=request.control,
        )

    def _filler(self, template: BackendRequest) -> BackendRequest:
        """The request standing in an empty Direct slot: zeros and READY=0, shaped as the
        batch's first request as prepared (with its controls and states: a state of variable
        shape may have grown past its initial shape, and the batch must concatenate)."""
        inputs = {
            name: InferTensor(name, t.datatype, t.shape, _zeros_like(t))
            for name, t in template.inputs.items()
        }
        inputs.update(self._controls.tensors(start=False, end=False, ready=False, corrid=0))
        if self._states:
            states = {s.input_name for s in self._states.specs}
            current = {n: t for n, t in template.inputs.items() if n in states}
            inputs.update(self._states.null(current or self._states.initial()))
        return BackendRequest(inputs=inputs, requested_outputs=template.requested_outputs)


def _settle_done(done: asyncio.Future[None], _task: object = None) -> None:
    if not done.done():
        done.set_result(None)


def settle_error(job: _Job, error: RepokitError) -> None:
    if not job.future.done():
        job.future.set_exception(error)


def _answer_cancelled(corrid: int | str, left: Sequence[SeqEntry[_Job]]) -> None:
    """Answer a cancelled (or ended iterative) sequence's queued requests CANCELLED, with
    Triton's empty message and its --log-verbose 1 line saying why."""
    if left and log.isEnabledFor(logging.DEBUG):
        log.debug("Releasing canceled sequence CORRID %s", corrid)
    for entry in left:
        settle_error(entry.payload, RepokitError(Code.CANCELLED, CANCELLED_MESSAGE))


def _fail_all(seq: LiveSequence[_Job], error: RepokitError) -> None:
    for entry in seq.queue:
        settle_error(entry.payload, error)
    seq.queue.clear()


def _zeros_like(tensor: InferTensor) -> npt.NDArray[Any]:
    if tensor.datatype == "BYTES":
        return np.full(tensor.shape, b"", dtype=object)
    return np.zeros(tensor.shape, dtype=tensor.data.dtype)
