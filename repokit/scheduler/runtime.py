"""Small asyncio pieces shared by the scheduler drivers: clock, waking, hooks, ordered release.

Everything that decides *what* runs lives in the pure planners; these helpers only decide
*when* a coroutine wakes up and how a finished batch is handed back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar, cast

from repokit.backends.base import (
    Backend,
    BackendRequest,
    BackendResult,
    Timing,
    WireBatchBackend,
    WireEntry,
)
from repokit.errors import RepokitError, internal
from repokit.scheduler.precise_timer import PreciseTimer

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # now in nanoseconds (monotonic)
BatchHook = Callable[[int, Timing], None]  # (batch size, timing) once per execution
R = TypeVar("R")
# waits shorter than this end on a PreciseTimer (the loop's timers have 1 ms steps)
PRECISE_BELOW_S = 0.002


# Triton's test hooks (core's batcher threads read them): hold batching until that many
# requests are queued (the dynamic batcher; the sequence batcher's slot queues) and, with the
# first, until that many wait in the sequence batcher's backlog
DELAY_SCHEDULER_ENV = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_SCHEDULER_ENV = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"


def delay_scheduler_count(
    name: str = DELAY_SCHEDULER_ENV, environ: Mapping[str, str] = os.environ
) -> int:
    """A test-hook variable as Triton reads it (``atoi``: leading digits, else 0); 0 for
    none or a negative number."""
    leading = re.match(r"\s*([+-]?\d+)", environ.get(name, ""))
    return max(0, int(leading.group(1))) if leading else 0


# the default clock: the C function itself (a wrapper would add a Python call per reading)
monotonic_clock: Clock = time.monotonic_ns


class ManualClock:
    """A clock that only moves when told to (tests and simulations)."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance_us(self, microseconds: int) -> None:
        self.now_ns += microseconds * 1000


class Waker:
    """Lets a worker sleep until poked or until a deadline on the scheduler's clock.

    With a clock that is not the loop's own (tests), the deadline is converted with the clock's
    current reading; a test that moves a ManualClock calls ``poke()`` to re-evaluate. Waits
    under ``PRECISE_BELOW_S`` end on a :class:`PreciseTimer` (why: see its module); longer ones
    on the loop's timer 1 ms early, after which the caller re-polls and waits the rest precisely.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waiters: set[asyncio.Future[None]] = set()
        self._precise: PreciseTimer | None = None
        self._precise_tried = False

    def poke(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def sleep(self, wake_at_ns: int = 0) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.add(fut)
        handle = None
        if wake_at_ns:
            delay_s = max(0.0, (wake_at_ns - self._clock()) / 1e9)
            precise = self._precise_timer(loop) if delay_s < PRECISE_BELOW_S else None
            if precise is not None:
                precise.resolve_at(time.monotonic_ns() + int(delay_s * 1e9), fut)
            else:
                handle = loop.call_later(delay_s, _resolve, fut)
        try:
            await fut
        finally:
            self._waiters.discard(fut)
            if handle is not None:
                handle.cancel()

    def _precise_timer(self, loop: asyncio.AbstractEventLoop) -> PreciseTimer | None:
        precise = self._precise
        if precise is not None and precise.loop is loop:
            return precise
        if self._precise_tried and precise is None:
            return None
        self._precise_tried = True
        self._precise = PreciseTimer.create(loop)
        return self._precise


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class OrderedRelease(Generic[R]):
    """preserve_ordering: results are released in the order requests entered batches."""

    def __init__(self) -> None:
        self._order: deque[asyncio.Future[R]] = deque()
        self._ready: dict[int, R] = {}

    def admit(self, futures: Sequence[asyncio.Future[R]]) -> None:
        self._order.extend(futures)

    def complete(self, fut: asyncio.Future[R], result: R) -> None:
        self._ready[id(fut)] = result
        while self._order and id(self._order[0]) in self._ready:
            head = self._order.popleft()
            settle(head, self._ready.pop(id(head)))


def with_request_id(error: RepokitError, request_id: str) -> RepokitError:
    """``[request id: <id>] <message>`` as Triton's ``LogRequest()`` prefixes enqueue errors."""
    return RepokitError(error.code, f"[request id: {request_id or '<id_unknown>'}] {error.message}")


def settle(fut: asyncio.Future[R], result: R) -> None:
    if not fut.done():
        fut.set_result(result)


async def execute_batch(
    backend: Backend,
    instance: int,
    requests: Sequence[BackendRequest | WireEntry],
    entries: WireBatchBackend | None = None,
) -> tuple[list[BackendResult], Timing]:
    """Run one batch; a backend that raises or miscounts yields INTERNAL errors per request.
    A batch with wire entries runs through ``entries`` (the backend as a WireBatchBackend)."""
    if log.isEnabledFor(logging.DEBUG):  # --log-verbose 1: the scheduler's batches
        log.debug(
            "model %s, instance %d, executing %d requests",
            backend.context.name,
            instance,
            len(requests),
        )
    slots = backend.rate_slots
    slot = None if slots is None or backend.pipelines_executions else slots.slot(instance)
    try:
        if slot is not None:  # --rate-limit: the instance's resources first
            await slot.acquire()
        if entries is not None:
            results, timing = await entries.execute_entries(instance, list(requests))
        else:
            plain = cast("list[BackendRequest]", requests)
            results, timing = await backend.execute(instance, plain)
    except RepokitError as exc:
        return [BackendResult(error=exc) for _ in requests], Timing()
    except Exception as exc:  # a backend bug must not kill the worker
        error = internal(f"model execution failed: {type(exc).__name__}: {exc}")
        return [BackendResult(error=error) for _ in requests], Timing()
    finally:
        if slot is not None:
            slot.release()
    if len(results) != len(requests):
        error = internal(
            f"model returned {len(results)} responses for a batch of {len(requests)} requests"
        )
        return [BackendResult(error=error) for _ in requests], timing
    return results, timing
