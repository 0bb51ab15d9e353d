"""The asyncio driver of the dynamic batcher: one worker per instance pulls batches.

Each active instance has a worker coroutine. A free worker asks the pure ``BatchPlanner`` for a
batch; if there is none yet it sleeps until a request arrives or until the planner's wake time
(queue delay or the nearest queue timeout). Each instance runs one batch at a time, and each
free instance takes the next batch.

A backend that pipelines executions (the python backend queues the batches of a busy instance
and sends them the moment it is free) also gets the next batch of a busy instance as soon as
that batch is final (``BatchPlanner.poll_final``: it reached ``max_batch_size`` or nothing
queued can join it), as Triton's batcher hands a saturated payload to the instance queue.
Nothing that could still grow is sent early, so batches are the ones Triton forms; and only
models whose batches Triton prefetches too (no priority levels, no queue timeouts, no
max_queue_size) do this, so no request that could have gone first (a higher priority) or been
rejected in the queue (a timeout, a full queue) is affected. Requests sent early still count
as pending until their batch starts, as Triton's prefetched payloads do. What
changes is that the instance starts the next batch without waiting for this loop to turn
around. Such a worker also hands the instance its next batch before the answers of the batch
that just finished go out (the loop would otherwise write those first). With these and the
garbage-collector freeze in ``repokit.frontends.runner`` the instance's own time per batch is
most of the cycle (figures in ``benchmarks/README.md``).

A worker whose instance comes free tells the planner (``BatchPlanner.instance_freed``) how many
requests it just answered and how long their batch ran, so that requests still pending can wait
for those clients instead of leaving without them (the grace, see ``dynamic_batch``).

**Triton's test hook.** ``TRITONSERVER_DELAY_SCHEDULER=N`` in the server's environment (Triton
core's ``DynamicBatchScheduler::BatcherThread`` reads it; its qa tests such as L0_batcher use it
to queue requests before batching starts) holds every worker back until ``N`` requests are
queued, once per scheduler; after that the batcher runs as usual. Unset (or not a positive
number) it costs nothing: the workers never look at it again.

**The wire lane** (:mod:`repokit.core.wire_lane`). Over a backend that runs wire entries in
its batches (:class:`~repokit.backends.base.WireBatchBackend`, the python backend) and where no
batching key is needed, ``submit_wire`` queues a plain request as its bytes with the batch size
read from them (:mod:`repokit.protocol.wire_batch_size`), at the default priority level with the
default queue policy (a request with parameters never comes here). It batches like any other
request; the instance decodes it, runs it in the batch and encodes its response. One the
instance does not take comes back as None (nothing ran for it; the standard path answers it,
and the execution counts only the requests that ran).

``merge_batches=True`` (backends that take one tensor per input, e.g. onnxruntime): the batch is
concatenated into one BackendRequest, executed, and the outputs split back into views.
``merge_batches=False`` (the python backend, which receives the list of requests as Triton's
does): the requests are passed as a list.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from repokit.backends.base import (
    WIRE_FALLBACK,
    Backend,
    BackendRequest,
    BackendResult,
    Timing,
    WireBatchBackend,
    WireEntry,
    WireRequest,
)
from repokit.errors import RepokitError, internal, unavailable
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.wire_batch_size import wire_batch_size
from repokit.scheduler.base import CancelledInQueue, Retiring, ScheduledResult, Scheduler
from repokit.scheduler.batch_tensors import (
    BatchingRules,
    batching_key,
    merge_requests,
    split_result,
)
from repokit.scheduler.default import active_instances
from repokit.scheduler.dynamic_batch import BatchDecision, BatchPlanner, DynamicBatchSettings
from repokit.scheduler.queue_policy import QueuedItem, timeout_error
from repokit.scheduler.runtime import (
    BatchHook,
    Clock,
    OrderedRelease,
    Waker,
    execute_batch,
    monotonic_clock,
    with_request_id,
)

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Job:
    request: BackendRequest | WireEntry
    # None: a wire entry the instance did not take (the standard path answers it)
    future: asyncio.Future[ScheduledResult | None]


class DynamicBatchScheduler(Scheduler):
    """Dynamic batching (and, without ``dynamic_batching`` in the config, plain FIFO)."""

    updates_instances = True

    def __init__(
        self,
        backend: Backend,
        config: mc.ModelConfig | None = None,
        *,
        clock: Clock = monotonic_clock,
        merge_batches: bool = False,
        instances: Sequence[int] | None = None,
        on_execution: BatchHook | None = None,
        settings: DynamicBatchSettings | None = None,
        hold_until_queued: int = 0,
    ) -> None:
        config = config if config is not None else backend.context.config
        self._backend = backend
        self._name = backend.context.name
        self._clock = clock
        self._merge = merge_batches
        self._settings = settings or DynamicBatchSettings.from_config(config)
        self._rules = BatchingRules.from_config(config)
        self._instances = (
            list(instances)
            if instances is not None
            else active_instances(config, backend.instance_count)
        )
        self._on_execution = on_execution
        self._planner: BatchPlanner[_Job] = BatchPlanner(self._settings)
        self._waker = Waker(clock)
        self._ordered: OrderedRelease[ScheduledResult | None] | None = (
            OrderedRelease() if self._settings.preserve_ordering else None
        )
        self._workers: list[asyncio.Task[None]] = []
        self._expires = _has_timeouts(config)
        self._batching = self._settings.max_batch_size > 0
        self._keyed = self._batching and self._rules.checks_inputs
        # Final batches go early only where Triton 2.51's batcher prefetches payloads
        # (PriorityQueue's support_prefetching): no priority levels, no queue timeouts and no
        # max_queue_size (a request with a deadline or a bounded queue stays in the queue).
        self._early = (
            self._batching
            and backend.pipelines_executions
            and backend.rate_slots is None  # rate limited: the batch forms once it may run
            and not self._expires
            and _prefetches(config)
        )
        self._running = False
        self._stopping = False
        self._held: dict[int, int] = {}  # pipelined workers: batches each instance holds
        # pipelined workers: the sizes of the batches each instance holds, the running one
        # first (the others still count as pending, as Triton's prefetched payloads do)
        self._handed: dict[int, deque[int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hold_until = hold_until_queued  # TRITONSERVER_DELAY_SCHEDULER (module docstring)
        self._by_instance: dict[int, asyncio.Task[None]] = {}  # each instance's worker
        self._retired: set[int] = set()  # instances whose workers take no new batch
        # the wire lane (module docstring): requests queued as their bytes, for a backend that
        # runs them beside the standard path's in one batch, where no batching key is needed
        self._entries: WireBatchBackend | None = (
            backend
            if isinstance(backend, WireBatchBackend) and not merge_batches and not self._keyed
            else None
        )

    # --- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        # Triton's verbose line (one per model; its batcher is a thread, here asyncio tasks)
        log.debug("Starting dynamic-batcher thread for %s at default nice...", self._name)
        self._loop = asyncio.get_running_loop()
        self._running = True
        self._stopping = False
        self._by_instance = {
            instance: asyncio.create_task(self._worker(instance), name=f"batcher-{instance}")
            for instance in self._instances
        }
        self._workers = list(self._by_instance.values())
        if self._expires:  # rejects timed-out requests while every instance is busy
            self._workers.append(asyncio.create_task(self._expiry(), name="batcher-timeouts"))

    async def stop(self) -> None:
        """Finish what is queued (ignoring the queue delay), then stop the workers."""
        if self._running:
            log.debug("Stopping dynamic-batcher thread for %s...", self._name)
        self._stopping = True
        self._waker.poke()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        self._running = False

    def add_instances(self, instances: list[int]) -> None:
        for instance in instances:
            task = asyncio.create_task(self._worker(instance), name=f"batcher-{instance}")
            self._by_instance[instance] = task
            self._workers.append(task)
            self._instances.append(instance)

    def retire_instances(self, instances: list[int]) -> list[Retiring]:
        """Their workers finish the batches they hold and end (the queue stays with the
        others)."""
        retiring = []
        for instance in instances:
            self._retired.add(instance)
            task = self._by_instance.pop(instance, None)
            if instance in self._instances:
                self._instances.remove(instance)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if task is None:
                done.set_result(None)
            else:
                task.add_done_callback(functools.partial(_settle, done))
            retiring.append(Retiring(instance, done))
        self._waker.poke()
        return retiring

    @property
    def pending_count(self) -> int:
        """Requests queued or handed to a busy instance, not yet executing."""
        waiting = sum(sum(sizes) - sizes[0] for sizes in self._handed.values() if sizes)
        return len(self._planner) + waiting

    def wake(self) -> None:
        """Re-evaluate the queue now (after moving an injected clock)."""
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
        """Queue one request and wait for its result.

        Scheduler errors are raised as RepokitError (queue full and queue timeout: UNAVAILABLE;
        not running); what the model returned, including a model error, is in the result.
        """
        if not self._running or self._stopping:
            raise unavailable("model is not accepting requests: its scheduler is stopped")
        loop = self._loop  # set by start(); get_running_loop() costs a getpid() each time
        assert loop is not None
        future: asyncio.Future[ScheduledResult | None] = loop.create_future()
        try:
            item = self._planner.queues.enqueue(
                _Job(request, future),
                now_ns=self._clock(),
                batch_size=batch_size if self._batching and batch_size > 1 else 1,
                priority=priority,
                timeout_us=timeout_us,
                key=batching_key(request, self._rules) if self._keyed else None,
            )
        except RepokitError as exc:  # queue full: Triton prefixes the request id
            raise with_request_id(exc, request.request_id) from None
        scheduled = await self._result(item, future)
        assert scheduled is not None  # (only a wire entry falls back)
        return scheduled

    async def _result(
        self,
        item: QueuedItem[_Job],
        future: asyncio.Future[ScheduledResult | None],
        entry: WireEntry | None = None,
    ) -> ScheduledResult | None:
        """Wait for a queued request's result. A caller that goes away while the request
        waits in the queue takes it out (``CancelledInQueue``); a wire ``entry`` whose batch
        is running is cancelled at the instance (``is_cancelled()`` becomes True there)."""
        self._waker.poke()
        try:
            return await future
        except asyncio.CancelledError:
            if self._planner.queues.remove(item):
                raise CancelledInQueue from None
            if entry is not None and entry.cancel is not None:
                entry.cancel()
            raise

    @property
    def takes_wire(self) -> bool:
        """True when requests may come as their bytes (:meth:`submit_wire`, the wire lane)."""
        return self._entries is not None and self._running

    async def submit_wire(self, request: WireRequest) -> tuple[ScheduledResult, int] | None:
        """Queue a request given as its bytes, as :meth:`submit` queues one, with the batch
        size read from them (:mod:`repokit.protocol.wire_batch_size`); its result and that
        batch size, or None when it did not run (the standard path then answers it: bytes
        the lane cannot queue, a full queue, an entry the instance did not take)."""
        if self._entries is None or not self._running or self._stopping:
            return None
        batch_size = wire_batch_size(request.codec, request.raw, self._settings.max_batch_size)
        if batch_size is None:
            return None
        loop = self._loop
        assert loop is not None
        entry = WireEntry(request, batch_size)
        future: asyncio.Future[ScheduledResult | None] = loop.create_future()
        try:
            item = self._planner.queues.enqueue(
                _Job(entry, future),
                now_ns=self._clock(),
                batch_size=batch_size if self._batching and batch_size > 1 else 1,
            )
        except RepokitError:  # a full queue: the standard path refuses it with the request id
            return None
        scheduled = await self._result(item, future, entry)
        return None if scheduled is None else (scheduled, batch_size)

    # --- workers ------------------------------------------------------------------------
    async def _worker(self, instance: int) -> None:
        if self._hold_until:
            await self._held_back()
        if not self._early:
            await self._serial_worker(instance)
            return
        runs: set[asyncio.Task[int]] = set()
        self._held[instance] = 0
        handed = self._handed[instance] = deque()
        try:
            while True:
                held = self._held[instance]  # batches the instance has (running or queued)
                planner = self._planner
                now = self._clock()
                if instance in self._retired:
                    if held == 0:
                        if runs:
                            await asyncio.gather(*runs)
                        return
                    await self._waker.sleep()
                    continue
                if held == 0:
                    decision = planner.poll(now)
                elif held == 1:
                    decision = planner.poll_final(now)
                else:
                    decision = BatchDecision()
                self._reject(decision.rejected)
                if not decision.batch and self._stopping and held == 0 and len(planner):
                    decision.batch = planner.queues.pop_front(self._settings.max_batch_size)
                if decision.batch:
                    self._held[instance] = held + 1
                    handed.append(len(decision.batch))
                    task = asyncio.create_task(self._run(instance, decision.batch))
                    runs.add(task)
                    task.add_done_callback(runs.discard)
                    continue
                if self._stopping and held == 0:
                    if runs:  # answers of the last batches are still going out
                        await asyncio.gather(*runs)
                    return
                await self._waker.sleep(decision.wake_at_ns if held == 0 else 0)
        finally:
            for task in runs:
                task.cancel()

    async def _held_back(self) -> None:
        """Wait until ``hold_until_queued`` requests are queued (or the scheduler stops)."""
        while self._hold_until and len(self._planner) < self._hold_until and not self._stopping:
            await self._waker.sleep()
        if self._hold_until:
            log.debug("dynamic batcher: %d requests queued, batching starts", len(self._planner))
        self._hold_until = 0

    def _reject(self, rejected: list[QueuedItem[_Job]]) -> None:
        for item in rejected:
            future = item.payload.future
            if not future.done():
                future.set_exception(timeout_error())

    async def _serial_worker(self, instance: int) -> None:
        slots = self._backend.rate_slots
        slot = slots.slot(instance) if slots is not None else None
        while True:
            if instance in self._retired:
                if slot is not None and slot.holding:
                    slot.release()
                return
            if slot is not None and not slot.holding and len(self._planner):
                # --rate-limit: the batch forms once the instance has its resources, so the
                # requests that arrive while it waits join it (as Triton's batch keeps growing
                # until an instance runs it); its execution gives them back
                await slot.acquire()
            decision = self._planner.poll(self._clock())
            self._reject(decision.rejected)
            if not decision.batch and self._stopping and len(self._planner):
                decision.batch = self._planner.queues.pop_front(
                    max(1, self._settings.max_batch_size)
                )
            if slot is not None and slot.holding and not decision.batch:
                slot.release()  # nothing to run yet: others may use them meanwhile
            if decision.batch:
                ran_ns = await self._run(instance, decision.batch)
                self._planner.instance_freed(self._clock(), len(decision.batch), ran_ns)
                continue
            if self._stopping:
                return
            await self._waker.sleep(decision.wake_at_ns)

    async def _expiry(self) -> None:
        while not self._stopping:
            for rejected in self._planner.queues.expire(self._clock()):
                future = rejected.payload.future
                if not future.done():
                    future.set_exception(timeout_error())
            await self._waker.sleep(self._planner.queues.closest_deadline())

    async def _run(self, instance: int, batch: list[QueuedItem[_Job]]) -> int:
        """Execute a batch and answer its requests; how long the execution took (ns).

        Whatever goes wrong around the backend's execution (joining or splitting the batch,
        counting it) answers the batch's requests INTERNAL with the traceback in the log, and
        the worker goes on; before, the error ended the worker (or the pipelined batch's task)
        silently and the requests of the model hung, with preserve_ordering every later one."""
        executed = None
        live = [item for item in batch if not item.payload.future.done()]
        ordered = self._ordered
        if live and ordered is not None:
            ordered.admit([item.payload.future for item in live])
        try:
            if live:
                executed = await self._execute(instance, live)
        except Exception as exc:
            self._fail(live, exc)
        finally:
            if self._early:  # the instance is free: its worker takes the next batch first
                self._held[instance] -= 1
                self._handed[instance].popleft()
                if not self._held[instance]:
                    ran_ns = 0 if executed is None else _ran_ns(executed[1])
                    self._planner.instance_freed(self._clock(), len(batch), ran_ns)
                self._waker.poke()
        if executed is None:
            return 0
        if self._early:
            await asyncio.sleep(0)  # the worker runs before these answers go out
        results, timing, started_ns = executed
        for item, result in zip(live, results, strict=True):
            scheduled = (
                None
                if result is WIRE_FALLBACK
                else ScheduledResult(result, started_ns - item.enqueue_ns, timing)
            )
            future = item.payload.future
            if ordered is not None:
                ordered.complete(future, scheduled)
            elif not future.done():
                future.set_result(scheduled)
        return _ran_ns(timing)

    def _fail(self, live: list[QueuedItem[_Job]], exc: Exception) -> None:
        """Answer the requests of a batch that failed outside the backend's execution with
        INTERNAL (counted as failed requests; with preserve_ordering in their turn)."""
        log.error(
            "model '%s': a batch of %d requests failed outside the model's execution",
            self._name,
            len(live),
            exc_info=exc,
        )
        error = internal(
            f"in model '{self._name}', the batch failed outside the model's execution: "
            f"{type(exc).__name__}: {exc}"
        )
        failed = ScheduledResult(BackendResult(error=error), 0, Timing())
        for item in live:
            future = item.payload.future
            if self._ordered is not None:  # released in turn: later batches are not held up
                self._ordered.complete(future, failed)
            elif not future.done():
                future.set_result(failed)

    async def _execute(
        self, instance: int, live: list[QueuedItem[_Job]]
    ) -> tuple[list[BackendResult], Timing, int]:
        """Run the live requests of a batch: their results, the timing and when the execution
        started."""
        start_ns = self._clock()
        requests = [item.payload.request for item in live]
        sizes = [item.batch_size for item in live]
        wired = self._entries is not None and any([type(r) is WireEntry for r in requests])
        if self._merge and self._settings.max_batch_size:
            plain = cast("list[BackendRequest]", requests)  # (no wire lane when merging)
            merged = merge_requests(plain, self._rules)
            results, timing = await execute_batch(self._backend, instance, [merged])
            self._executed(sum(sizes), timing)  # it ran, whatever the split does
            results = split_result(results[0], plain, sizes, self._rules)
        else:
            if wired:
                results, timing = await execute_batch(
                    self._backend, instance, requests, self._entries
                )
            else:
                results, timing = await execute_batch(self._backend, instance, requests)
            ran = sum(sizes)
            if wired:  # entries the instance did not take did not run
                ran -= sum([s for s, r in zip(sizes, results, strict=True) if r is WIRE_FALLBACK])
            self._executed(ran, timing)
        # a batch sent early waited at the instance too: queue time runs until it started
        return results, timing, max(start_ns, self._clock() - _ran_ns(timing))

    def _executed(self, ran: int, timing: Timing) -> None:
        if ran and self._on_execution is not None:
            self._on_execution(ran, timing)


def _settle(done: asyncio.Future[None], _task: object = None) -> None:
    if not done.done():
        done.set_result(None)


def _ran_ns(timing: Timing) -> int:
    return timing.compute_input_ns + timing.compute_infer_ns + timing.compute_output_ns


def _prefetches(config: mc.ModelConfig) -> bool:
    """Whether Triton 2.51 prefetches this model's batches: no priority levels and a default
    queue policy without timeouts, timeout overrides or a maximum queue size."""
    db = config.dynamic_batching
    policy = db.default_queue_policy
    return (
        db.priority_levels == 0
        and policy.default_timeout_microseconds == 0
        and not policy.allow_timeout_override
        and policy.max_queue_size == 0
    )


def _has_timeouts(config: mc.ModelConfig) -> bool:
    """Whether any queue policy gives requests a deadline (only then can one expire)."""
    db = config.dynamic_batching
    policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
    return any(p.default_timeout_microseconds > 0 for p in policies)
