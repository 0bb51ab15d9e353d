"""Sub-millisecond wake-ups for the batchers' queue delays, on the event loop itself.

Event-loop timers have millisecond granularity: uvloop rounds a delay to whole milliseconds, so
any delay up to 0.5 ms fires at once (a batcher waiting ``max_queue_delay_microseconds`` 100 or
500 then spins through the loop, waking many times per request), and asyncio's own loop rounds
up to the next millisecond (100 us becomes about 1.1 ms). A helper thread would be precise but
costs a thread wake and a GIL hand-off per wait (figures in ``benchmarks/README.md``).
``PreciseTimer`` instead arms a Linux ``timerfd`` (CLOCK_MONOTONIC, absolute
deadline, nanosecond resolution) that the loop watches like any socket: one syscall to arm,
one readable event to fire. ``PreciseTimer.create`` returns None where timerfd is unavailable;
callers then use the loop's own timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import os
import sys
import time
import weakref
from typing import Any

from repokit.libc import libc_function

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _timerfd() -> tuple[Any, Any] | None:
    """The C library's ``timerfd_create`` and ``timerfd_settime`` (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    create = libc_function("timerfd_create", (ctypes.c_int, ctypes.c_int), ctypes.c_int)
    settime = libc_function(
        "timerfd_settime",
        (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p),
        ctypes.c_int,
    )
    if create is None or settime is None:
        return None
    return create, settime


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _close(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    if not loop.is_closed():
        with contextlib.suppress(Exception):
            loop.remove_reader(fd)
    with contextlib.suppress(OSError):
        os.close(fd)


class PreciseTimer:
    """Resolves futures of one event loop at ``time.monotonic_ns()`` deadlines."""

    def __init__(self, loop: asyncio.AbstractEventLoop, settime: Any, fd: int) -> None:
        self._loop = loop
        self._settime = settime
        self._fd = fd
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed_ns = 0  # the deadline the timerfd is set to (0 = disarmed)
        self._spec = _Itimerspec()
        loop.add_reader(fd, self._fire)
        weakref.finalize(self, _close, loop, fd)

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop) -> PreciseTimer | None:
        functions = _timerfd()
        if functions is None:
            return None
        create, settime = functions
        fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return None
        try:
            return cls(loop, settime, fd)
        except (NotImplementedError, RuntimeError, OSError):  # a loop without add_reader
            os.close(fd)
            return None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def resolve_at(self, deadline_ns: int, fut: asyncio.Future[None]) -> None:
        """Resolve ``fut`` once ``time.monotonic_ns()`` reaches ``deadline_ns`` (a future done
        by then is left alone)."""
        heapq.heappush(self._heap, (deadline_ns, next(self._order), fut))
        if self._armed_ns == 0 or deadline_ns < self._armed_ns:
            self._arm(deadline_ns)

    def _arm(self, deadline_ns: int) -> None:
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec, None) != 0:
            # cannot arm (should not happen): fall back to the loop's timer for this one
            delay_s = max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
            self._loop.call_later(delay_s, self._fire)
        self._armed_ns = deadline_ns

    def _fire(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._fd, 8)
        self._armed_ns = 0
        heap = self._heap
        now = time.monotonic_ns()
        while heap and heap[0][0] <= now:
            _resolve(heapq.heappop(heap)[2])
        while heap and heap[0][2].done():  # woken meanwhile: no need to fire for it
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])
