"""Load drivers: closed-loop concurrency and open-loop request schedules (rate or intervals).

:class:`ConcurrencyLoad` keeps N requests outstanding: N workers, each with its own connection,
send a request as soon as the previous one answers (perf_analyzer's sync mode; its async mode
keeps the same N outstanding, which an asyncio worker per request slot also does).
:class:`ScheduleLoad` sends requests at scheduled times (constant or Poisson rate, or intervals
from a file) on a pool of connections of at most ``max_connections``; a request whose send is
more than :data:`DELAY_TOLERANCE_NS` late, or that had to wait for a free connection, is marked
delayed. Both append completed requests to a :class:`RequestLog`, stop on the first failed
request (the profiler reports it) and end open sequences with an END request when stopped.

Given a request limit (``--request-count``, warmup), a load sends exactly that many requests
and then stops sending, as perf_analyzer's workers do: the limit is dealt over the workers
(:func:`worker_shares`: the first ``limit % workers`` get one more), each stops after its
share; a schedule stops after that many sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from repokit.perf.split import split_concurrency
from repokit.perf.statistics import RequestLog
from repokit.perf.transports.base import InferTiming, Transport
from repokit.perf.workload import Sequence, SequenceSource, Workload, outputs_match

DELAY_TOLERANCE_NS = 2_000_000  # event-loop timers fire up to ~1 ms late


@dataclass
class Slot:
    connection: Any  # Connection (asyncio) or a blocking connection (threads)
    sequence: Sequence | None = None
    position: int = 0


class _LoadBase:
    def __init__(
        self,
        transport: Transport,
        workload: Workload,
        log: RequestLog,
        clock: Callable[[], int],
        sequences: SequenceSource | None = None,
    ) -> None:
        self.transport = transport
        self.workload = workload
        self.log = log
        self.clock = clock
        self.sequences = sequences
        self.failure: str | None = None
        self.stopping = False
        self.failed = asyncio.Event()
        self._flat = workload.flat()
        self._validating = workload.validating
        self._tasks: list[asyncio.Task[None]] = []
        self._slots: list[Slot] = []

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
        self.stopping = True
        self.failed.set()

    def _pick(self, slot: Slot) -> tuple[Any, Any, Any]:
        """(prepared request, expected outputs, sequence flags) for the slot's next request."""
        if self.sequences is None:
            request, expected = self._flat[slot.position % len(self._flat)]
            slot.position += 1
            return request, expected, None
        if slot.sequence is None or slot.sequence.done:
            slot.sequence = self.sequences.next_sequence()
        step, flags = slot.sequence.next_step()
        stream = self.workload.streams[slot.sequence.stream]
        expected_stream = self.workload.expected[slot.sequence.stream]
        index = step % len(stream)
        return stream[index], expected_stream[index], flags

    async def _send(self, slot: Slot, delayed: bool = False, record: bool = True) -> bool:
        request, expected, flags = self._pick(slot)
        self.log.sent += 1
        timing = await slot.connection.infer(request, flags, self._validating and record)
        return self._record(timing, expected, flags, delayed, record)

    def _record(
        self, timing: InferTiming, expected: Any, flags: Any, delayed: bool, record: bool
    ) -> bool:
        if timing.error is not None:
            self._fail(timing.error)
            return False
        if record and expected is not None:
            mismatch = outputs_match(timing.outputs, expected)
            if mismatch is not None:
                self._fail(f"Output doesn't match expected output: {mismatch}")
                return False
        if record:
            self.log.add(
                timing.start,
                timing.end,
                timing.sent - timing.start,
                timing.end - timing.received,
                flags is not None and flags.end,
                delayed,
                timing.first - timing.start if timing.first else 0,
                timing.responses,
                timing.response_times,
            )
        return True

    async def _close_sequences(self) -> None:
        for slot in self._slots:
            if slot.sequence is not None and not slot.sequence.done and self.failure is None:
                slot.sequence.length = slot.sequence.sent + 1
                with contextlib.suppress(Exception):
                    await self._send(slot, record=False)
            with contextlib.suppress(Exception):
                await slot.connection.close()
        self._slots.clear()

    async def stop(self) -> None:
        self.stopping = True
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._close_sequences()


def worker_shares(limit: int | None, workers: int) -> list[int | None]:
    """Each worker's share of a request limit (None: no limit), as perf_analyzer deals
    ``--request-count`` over its threads: equal shares, the first ``limit % workers`` workers
    one more."""
    if limit is None:
        return [None] * workers
    return list(split_concurrency(limit, workers))


class ConcurrencyLoad(_LoadBase):
    async def start(
        self, concurrency: int, request_limit: int | None = None, record: bool = True
    ) -> None:
        """Start ``concurrency`` workers; with ``request_limit`` they send exactly that many
        requests between them. ``record``: log them (warmup requests are not)."""
        self.stopping = False
        for share in worker_shares(request_limit, concurrency):
            slot = Slot(await self.transport.connect())
            self._slots.append(slot)
            self._tasks.append(asyncio.create_task(self._worker(slot, share, record)))

    async def _worker(self, slot: Slot, share: int | None, record: bool) -> None:
        while not self.stopping:
            if share is not None:
                if share <= 0:
                    return
                share -= 1
            if not await self._send(slot, record=record):
                return

    async def wait_done(self) -> None:
        await asyncio.gather(*self._tasks)


class ThreadedConcurrencyLoad(_LoadBase):
    """perf_analyzer's sync mode: one thread per concurrent request, each with a blocking
    connection (``transport.connect_blocking()``: an HTTP/1.1 socket, or an HTTP/2 connection
    carrying unary calls or one gRPC stream). Blocking sockets cost the client less per request
    than an event-loop round trip, which matters most at low concurrency. The workers stay in
    one process: splitting them over several did not raise the request rate against Triton
    (the server is the limit; figures in ``benchmarks/README.md``)."""

    async def start(self, concurrency: int, request_limit: int | None = None) -> None:
        """Start ``concurrency`` threads; with ``request_limit`` they send exactly that many
        requests between them."""
        self.stopping = False
        self._loop = asyncio.get_running_loop()
        connect = self.transport.connect_blocking  # type: ignore[attr-defined]
        self._threads: list[threading.Thread] = []
        for share in worker_shares(request_limit, concurrency):
            slot = Slot(await asyncio.to_thread(connect))
            self._slots.append(slot)
            thread = threading.Thread(target=self._worker, args=(slot, share), daemon=True)
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
        self.stopping = True
        self._loop.call_soon_threadsafe(self.failed.set)

    def _worker(self, slot: Slot, share: int | None) -> None:
        infer = slot.connection.infer
        validating = self._validating
        log = self.log
        if self.sequences is None and not validating:
            self._plain_worker(slot, share)
            return
        while not self.stopping:
            if share is not None:
                if share <= 0:
                    return
                share -= 1
            request, expected, flags = self._pick(slot)
            log.sent += 1
            timing: InferTiming = infer(request, flags, validating)
            if not self._record(timing, expected, flags, False, True):
                return

    def _plain_worker(self, slot: Slot, share: int | None) -> None:
        """The loop without sequences or validation: the same requests in turn, each one's
        timing appended to the log (at concurrency 1 a few microseconds of client work per
        request show in the request rate)."""
        infer = slot.connection.infer
        log = self.log
        add = log.add
        flat = self._flat
        count = len(flat)
        position = slot.position
        last = None if share is None else position + share
        while not self.stopping and position != last:
            request = flat[position % count][0]
            position += 1
            log.sent += 1
            start, sent, received, end, error, _, first, responses, times = infer(
                request, None, False
            )
            if error is not None:
                self._fail(error)
                break
            add(
                start,
                end,
                sent - start,
                end - received,
                first=first - start if first else 0,
                responses=responses,
                response_times=times,
            )
        slot.position = position

    async def stop(self) -> None:
        self.stopping = True
        for thread in self._threads:
            await asyncio.to_thread(thread.join)
        self._threads.clear()
        for slot in self._slots:
            if slot.sequence is not None and not slot.sequence.done and self.failure is None:
                slot.sequence.length = slot.sequence.sent + 1
                request, _, flags = self._pick(slot)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(slot.connection.infer, request, flags, False)
            slot.connection.close()
        self._slots.clear()


def supports_threads(transport: Transport) -> bool:
    if getattr(transport, "connect_blocking", None) is None:
        return False
    supports = getattr(transport, "supports_blocking", None)
    return supports is None or bool(supports())


def constant_intervals(rate: float) -> Iterator[int]:
    interval = round(1e9 / rate)
    while True:
        yield interval


def poisson_intervals(rate: float, seed: int) -> Iterator[int]:
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        for value in rng.exponential(1e9 / rate, size=1024):
            yield max(int(value), 0)


def file_intervals(values_us: list[int]) -> Iterator[int]:
    while True:
        for value in values_us:
            yield value * 1000


class ScheduleLoad(_LoadBase):
    async def start(
        self, intervals: Iterator[int], max_connections: int, request_limit: int | None = None
    ) -> None:
        """Send on the schedule; with ``request_limit`` exactly that many requests."""
        self.stopping = False
        self._limit = request_limit
        self._idle: asyncio.Queue[Slot] = asyncio.Queue()
        self._max_connections = max_connections
        initial = max_connections if self.sequences is not None else min(4, max_connections)
        for _ in range(initial):
            slot = Slot(await self.transport.connect())
            self._slots.append(slot)
            self._idle.put_nowait(slot)
        self._inflight: set[asyncio.Task[None]] = set()
        self._tasks.append(asyncio.create_task(self._dispatch(intervals)))

    async def _acquire(self) -> tuple[Slot, bool]:
        if not self._idle.empty():
            return self._idle.get_nowait(), False
        if len(self._slots) < self._max_connections:
            slot = Slot(await self.transport.connect())
            self._slots.append(slot)
            return slot, False
        return await self._idle.get(), True

    async def _dispatch(self, intervals: Iterator[int]) -> None:
        clock = self.clock
        scheduled = clock()
        remaining = self._limit
        while not self.stopping:
            if remaining is not None:
                if remaining <= 0:
                    break
                remaining -= 1
            scheduled += next(intervals)
            wait = scheduled - clock()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
                if self.stopping:
                    break
            slot, waited = await self._acquire()
            delayed = waited or clock() - scheduled > DELAY_TOLERANCE_NS
            task = asyncio.create_task(self._one(slot, delayed))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _one(self, slot: Slot, delayed: bool) -> None:
        try:
            await self._send(slot, delayed)
        finally:
            self._idle.put_nowait(slot)
