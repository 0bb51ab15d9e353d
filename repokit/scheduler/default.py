"""Triton's default scheduler: each request runs alone on the next free instance.

Free instance ids wait in an ``asyncio.Queue`` (created in ``start()``); ``submit`` takes one,
runs the request as a batch of one on it and gives the instance back. Requests are never
combined. Passive instances (``instance_group.passive``) are created by the backend but get no
work, as in Triton.

A backend that pipelines executions (``Backend.pipelines_executions``, the python backend)
queues the batches of a busy instance itself, so ``submit`` hands the request straight to the
active instance with the fewest requests outstanding: the model still gets one request per
``execute`` and one ``execute`` at a time per instance, and the backend can send the requests
that queued up meanwhile to the instance together. Pending requests are then those outstanding
beyond the one executing on each instance; queue time is the request's time in the backend
minus the execution's durations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from repokit.backends.base import (
    Backend,
    BackendRequest,
    BackendResult,
    QuickWireBackend,
    Timing,
    WireBackend,
    WireRequest,
    WireRun,
)
from repokit.errors import RepokitError, internal, unavailable
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.base import Retiring, ScheduledResult, Scheduler, WireTicket


def active_instances(config: mc.ModelConfig, instance_count: int) -> list[int]:
    """Ids of the instances that take work: every instance except passive groups' ones."""
    ids: list[int] = []
    index = 0
    for group in config.instance_group:
        count = max(group.count, 1) * max(len(group.gpus), 1)
        for _ in range(count):
            if not group.passive:
                ids.append(index)
            index += 1
    if index != instance_count:  # the backend decided its own instance layout
        return list(range(instance_count))
    return ids


class DefaultScheduler(Scheduler):
    updates_instances = True

    def __init__(
        self, backend: Backend, on_execution: Callable[[int, Timing], None] | None = None
    ) -> None:
        """``on_execution(batch_size, timing)`` is called after every execution (statistics)."""
        self._backend = backend
        self._on_execution = on_execution
        self._free: asyncio.Queue[int] | None = None
        self._pending = 0
        self._stopped = False
        # pipelined backends: requests outstanding per active instance
        self._outstanding: dict[int, int] = {}
        # the backend when its instances take requests as their bytes (the wire lane)
        self._wire: WireBackend | None = backend if isinstance(backend, WireBackend) else None
        # ... when it can also be driven by callbacks (repokit.core.quick_wire)
        self._quick: QuickWireBackend | None = (
            backend if isinstance(backend, QuickWireBackend) else None
        )
        # retired instances still busy -> (requests outstanding, completes when none)
        self._leaving: dict[int, tuple[int, asyncio.Future[None]]] = {}
        self._pipelined = False  # set in start(): requests go straight to _outstanding

    async def start(self) -> None:
        self._free = asyncio.Queue()
        config = self._backend.context.config
        active = active_instances(config, self._backend.instance_count)
        for instance in active:
            self._free.put_nowait(instance)
        if self._backend.pipelines_executions and active:
            self._outstanding = dict.fromkeys(active, 0)
            self._pipelined = True

    async def stop(self) -> None:
        self._stopped = True

    @property
    def pending_count(self) -> int:
        if self._outstanding:
            return sum(n - 1 for n in self._outstanding.values() if n > 1)
        return self._pending

    async def submit(
        self,
        request: BackendRequest,
        batch_size: int,
        *,
        priority: int = 0,
        timeout_us: int = 0,
    ) -> ScheduledResult:
        free = self._free
        if free is None or self._stopped:
            raise unavailable("model is not accepting requests: its scheduler is stopped")
        if self._outstanding:
            return await self._submit_pipelined(request, batch_size)
        enqueued = time.perf_counter_ns()
        self._pending += 1
        try:
            instance = await free.get()
        finally:
            self._pending -= 1
        started = time.perf_counter_ns()
        slots = self._backend.rate_slots
        slot = None if slots is None else slots.slot(instance)
        try:
            if slot is not None:  # --rate-limit: the instance's resources first (queue time)
                await slot.acquire()
                started = time.perf_counter_ns()
            results, timing = await self._backend.execute(instance, [request])
        except RepokitError as exc:
            results, timing = [BackendResult(error=exc)], Timing()
        except Exception as exc:  # a backend bug must not take the server down
            results = [BackendResult(error=internal(f"backend failed: {exc!r}"))]
            timing = Timing()
        finally:
            if slot is not None:
                slot.release()
            if instance in self._leaving:
                self._left(instance)
            else:
                free.put_nowait(instance)
        if self._on_execution is not None:
            self._on_execution(batch_size, timing)
        return ScheduledResult(
            result=self._single(results), queue_ns=started - enqueued, timing=timing
        )

    def _least_busy(self) -> int:
        """The active instance with the fewest requests outstanding, now one more."""
        outstanding = self._outstanding
        if len(outstanding) == 1:  # one instance: the usual case, without min()'s key calls
            for instance in outstanding:
                outstanding[instance] += 1
                return instance
        instance = min(outstanding, key=outstanding.__getitem__)
        outstanding[instance] += 1
        return instance

    def _ran(self, enqueued: int, batch_size: int, timing: Timing) -> int:
        """Count a pipelined execution; the request's queue time (its time in the backend
        minus the execution's durations)."""
        ran_ns = timing.compute_input_ns + timing.compute_infer_ns + timing.compute_output_ns
        if self._on_execution is not None:
            self._on_execution(batch_size, timing)
        return max(0, time.perf_counter_ns() - enqueued - ran_ns)

    async def _submit_pipelined(self, request: BackendRequest, batch_size: int) -> ScheduledResult:
        instance = self._least_busy()
        enqueued = time.perf_counter_ns()
        try:
            results, timing = await self._backend.execute(instance, [request])
        except RepokitError as exc:
            results, timing = [BackendResult(error=exc)], Timing()
        except Exception as exc:  # a backend bug must not take the server down
            results = [BackendResult(error=internal(f"backend failed: {exc!r}"))]
            timing = Timing()
        finally:
            self._done_at(instance)
        queue_ns = self._ran(enqueued, batch_size, timing)
        return ScheduledResult(result=self._single(results), queue_ns=queue_ns, timing=timing)

    @property
    def pipelined(self) -> bool:
        """True when requests go straight to the backend's instance queues (python backend)."""
        return bool(self._outstanding)

    @property
    def takes_wire(self) -> bool:
        """True when requests may come as their bytes (:meth:`submit_wire`): a pipelined
        backend whose instances decode requests themselves (the python backend)."""
        return bool(self._outstanding) and self._wire is not None

    async def submit_wire(self, request: WireRequest) -> tuple[ScheduledResult, int] | None:
        """A request as its bytes (``WireBackend.execute_wire``) on the active instance with
        the fewest requests outstanding, as :meth:`submit` runs a pipelined request; with the
        batch size the instance found. None when nothing ran (not counted)."""
        backend = self._wire
        if self._free is None or self._stopped or not self._outstanding or backend is None:
            return None  # the standard path gives the error
        instance = self._least_busy()
        enqueued = time.perf_counter_ns()
        run: WireRun | None
        try:
            run = await backend.execute_wire(instance, request)
        except RepokitError as exc:
            run = WireRun(BackendResult(error=exc), 0, Timing())
        except Exception as exc:  # a backend bug must not take the server down
            run = WireRun(BackendResult(error=internal(f"backend failed: {exc!r}")), 0, Timing())
        finally:
            self._done_at(instance)
        if run is None:
            return None
        result, batch_size, timing = run
        queue_ns = self._ran(enqueued, batch_size, timing)
        return ScheduledResult(result, queue_ns, timing), batch_size

    # --- submit_wire in steps, for callbacks (repokit.core.quick_wire) -------------------------
    def send_wire(self, request: WireRequest) -> WireTicket | None:
        """:meth:`submit_wire` up to the request's message to the instance; None when nothing
        was sent (as its None)."""
        backend = self._quick
        if self._free is None or self._stopped or not self._outstanding or backend is None:
            return None
        instance = self._least_busy()
        enqueued = time.perf_counter_ns()
        try:
            sent = backend.send_wire(instance, request)
        except BaseException:
            self._done_at(instance)
            raise
        if sent is None:
            self._done_at(instance)
            return None
        return WireTicket(instance, enqueued, sent, sent.reply)

    def wire_reply(self, ticket: WireTicket) -> WireRun | Awaitable[WireRun] | None:
        """The run of a ticket whose reply is done (None: nothing ran; an awaitable for
        :meth:`wire_later`); failures as :meth:`submit_wire` answers them."""
        backend = self._quick
        assert backend is not None  # send_wire gave the ticket
        try:
            return backend.wire_reply(ticket.sent)
        except Exception as exc:
            return _failed_run(exc)

    async def wire_later(self, pending: Awaitable[WireRun]) -> WireRun:
        """A run whose result the instance sends later; failures as :meth:`submit_wire`
        answers them."""
        try:
            return await pending
        except Exception as exc:
            return _failed_run(exc)

    def wire_ended(
        self, ticket: WireTicket, run: WireRun | None
    ) -> tuple[ScheduledResult, int] | None:
        """The end of a ticket's request, as :meth:`submit_wire` ends it (None: nothing ran,
        or the client went away after its reply was taken)."""
        self._done_at(ticket.instance)
        if run is None:
            return None
        result, batch_size, timing = run
        queue_ns = self._ran(ticket.enqueued, batch_size, timing)
        return ScheduledResult(result, queue_ns, timing), batch_size

    def wire_cancelled(self, ticket: WireTicket) -> None:
        """The client went away before the ticket's reply was taken."""
        backend = self._quick
        assert backend is not None  # send_wire gave the ticket
        try:
            backend.wire_cancelled(ticket.sent)
        finally:
            self._done_at(ticket.instance)

    def _done_at(self, instance: int) -> None:
        """A pipelined request on ``instance`` finished."""
        if instance in self._outstanding:
            self._outstanding[instance] -= 1
        else:
            self._left(instance)

    def _left(self, instance: int) -> None:
        """What a retired instance was given finished (once for each request outstanding)."""
        count, done = self._leaving[instance]
        if count > 1:
            self._leaving[instance] = (count - 1, done)
            return
        del self._leaving[instance]
        if not done.done():
            done.set_result(None)

    # --- in-place instance updates ---------------------------------------------------------
    def add_instances(self, instances: list[int]) -> None:
        free = self._free
        if free is None:
            raise internal("add_instances before start()")
        for instance in instances:
            if self._pipelined:
                self._outstanding[instance] = 0
            else:
                free.put_nowait(instance)

    def retire_instances(self, instances: list[int]) -> list[Retiring]:
        free = self._free
        if free is None:
            raise internal("retire_instances before start()")
        loop = asyncio.get_running_loop()
        retiring = []
        idle: list[int] = []
        if not self._pipelined:  # the free ones leave the queue now
            while not free.empty():
                idle.append(free.get_nowait())
            for instance in idle:
                if instance not in instances:
                    free.put_nowait(instance)
        for instance in instances:
            done: asyncio.Future[None] = loop.create_future()
            retiring.append(Retiring(instance, done))
            if self._pipelined:
                busy = self._outstanding.pop(instance, 0)
            else:
                busy = 0 if instance in idle else 1
            if busy:
                self._leaving[instance] = (busy, done)
            else:
                done.set_result(None)
        return retiring

    @staticmethod
    def _single(results: list[BackendResult]) -> BackendResult:
        if len(results) != 1:
            return BackendResult(
                error=internal(f"backend returned {len(results)} results for 1 request")
            )
        return results[0]


def _failed_run(exc: Exception) -> WireRun:
    """A backend's failure as :meth:`DefaultScheduler.submit_wire` answers it."""
    if isinstance(exc, RepokitError):
        return WireRun(BackendResult(error=exc), 0, Timing())
    return WireRun(BackendResult(error=internal(f"backend failed: {exc!r}")), 0, Timing())
