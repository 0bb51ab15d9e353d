"""PreciseTimer: futures resolve at (not before) their deadlines, in deadline order, also when a
later wait arms the timer for an earlier deadline; futures already done are left alone."""

from __future__ import annotations

import asyncio
import time

from repokit.scheduler.precise_timer import PreciseTimer
from repokit.scheduler.runtime import Waker, monotonic_clock


async def test_futures_resolve_at_their_deadlines_in_order() -> None:
    loop = asyncio.get_running_loop()
    timer = PreciseTimer.create(loop)
    assert timer is not None  # Linux: timerfd is there
    done: list[tuple[str, int]] = []
    now = time.monotonic_ns()
    deadlines = {"late": now + 3_000_000, "early": now + 300_000, "mid": now + 1_000_000}
    futures = {}
    for name, deadline in deadlines.items():  # the earlier ones re-arm the timer
        fut: asyncio.Future[None] = loop.create_future()
        fut.add_done_callback(lambda _, n=name: done.append((n, time.monotonic_ns())))
        timer.resolve_at(deadline, fut)
        futures[name] = fut
    cancelled = loop.create_future()
    cancelled.set_result(None)
    timer.resolve_at(now + 500_000, cancelled)  # done already: stays as it is
    await asyncio.gather(*futures.values())
    assert [name for name, _ in done] == ["early", "mid", "late"]
    for name, at in done:
        assert at >= deadlines[name]


async def test_waker_short_sleep_ends_after_its_deadline() -> None:
    waker = Waker(monotonic_clock)
    for delay_ns in (0, 100_000, 500_000):
        wake_at = monotonic_clock() + delay_ns
        await waker.sleep(wake_at)
        assert monotonic_clock() >= wake_at


async def test_waker_poke_ends_a_sleep_early() -> None:
    waker = Waker(monotonic_clock)
    sleeper = asyncio.ensure_future(waker.sleep(monotonic_clock() + 1_500_000_000))
    await asyncio.sleep(0)
    waker.poke()
    await asyncio.wait_for(sleeper, timeout=5)
