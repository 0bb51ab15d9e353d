"""The grace after a batch (BatchPlanner.instance_freed): requests pending when an instance comes
free wait for the clients it just answered, so a closed-loop load does not split for good into
groups that never share a batch. Injected clock, no sleeps."""

from __future__ import annotations

import asyncio

from repokit.scheduler.dynamic_batch import (
    GRACE_BACKOFF_FIRST,
    GRACE_MAX_NS,
    BatchPlanner,
    DynamicBatchSettings,
)
from repokit.scheduler.dynamic_driver import DynamicBatchScheduler
from repokit.scheduler.queue_policy import PrioritySettings, QueuePolicy
from repokit.scheduler.runtime import ManualClock
from tests.scheduler.helpers import RecordingBackend, config, request
from tests.scheduler.test_dynamic_driver import BATCHING, run, started, until
from tests.scheduler.test_early_dispatch import PipeliningBackend

US = 1000


def planner(
    max_batch: int = 8, delay_us: int = 500, preferred: tuple[int, ...] = ()
) -> BatchPlanner[str]:
    return BatchPlanner(DynamicBatchSettings.create(max_batch, preferred, delay_us))


def add(p: BatchPlanner[str], count: int, now: int, prefix: str = "r") -> None:
    for i in range(count):
        p.enqueue(f"{prefix}{i}", now_ns=now)


def test_without_a_freed_instance_an_expired_batch_goes_at_once() -> None:
    p = planner()
    add(p, 3, 0)
    assert len(p.poll(600 * US).batch) == 3


def test_pending_requests_wait_for_the_answered_clients_then_go_together() -> None:
    p = planner()
    add(p, 3, 0)  # queued while the instance ran a batch of 2
    p.instance_freed(2000 * US, answered=2)
    decision = p.poll(2000 * US)
    assert decision.batch == [] and decision.wake_at_ns == 2500 * US
    p.enqueue("back0", now_ns=2100 * US)
    assert p.poll(2100 * US).batch == []  # one of the two is back
    p.enqueue("back1", now_ns=2200 * US)
    batch = [item.payload for item in p.poll(2200 * US).batch]
    assert batch == ["r0", "r1", "r2", "back0", "back1"]


def test_the_grace_lasts_as_long_as_the_batch_that_just_ran_when_that_is_longer() -> None:
    p = planner(delay_us=500)
    add(p, 3, 0)
    p.instance_freed(0, answered=4, ran_ns=2000 * US)
    decision = p.poll(0)
    assert decision.batch == [] and decision.wake_at_ns == 2000 * US
    assert p.poll(1999 * US).batch == []
    assert len(p.poll(2000 * US).batch) == 3  # nobody came back in time: it goes as it is


def test_a_slow_model_holds_pending_requests_no_longer_than_the_grace_limit() -> None:
    """A 2 s execution does not make the pending batch wait 2 s for clients that do not come
    back (Triton's L0_metrics test_dynamic_batch_scheduler sends its requests at once)."""
    p = planner(delay_us=500)
    add(p, 3, 0)
    p.instance_freed(0, answered=4, ran_ns=2_000_000_000)
    decision = p.poll(0)
    assert decision.batch == [] and decision.wake_at_ns == GRACE_MAX_NS
    assert p.poll(GRACE_MAX_NS - 1).batch == []
    assert len(p.poll(GRACE_MAX_NS).batch) == 3


def test_a_batch_that_fills_during_the_grace_goes_at_once() -> None:
    p = planner(max_batch=4)
    add(p, 3, 0)
    p.instance_freed(1000 * US, answered=8)
    p.enqueue("back", now_ns=1001 * US)
    assert len(p.poll(1001 * US).batch) == 4


def test_a_preferred_size_formed_during_the_grace_goes_at_once() -> None:
    p = planner(max_batch=8, preferred=(4,))
    add(p, 3, 0)
    p.instance_freed(1000 * US, answered=8)
    assert p.poll(1000 * US).batch == []
    p.enqueue("back", now_ns=1001 * US)
    assert len(p.poll(1001 * US).batch) == 4


def test_no_grace_without_pending_requests_a_queue_delay_or_batching() -> None:
    empty = planner()
    empty.instance_freed(0, answered=4)
    add(empty, 2, 0)
    assert empty.poll(0).batch == [] and empty.poll(0).wake_at_ns == 500 * US  # plain delay
    no_delay = planner(delay_us=0)
    add(no_delay, 2, 0)
    no_delay.instance_freed(0, answered=4)
    assert len(no_delay.poll(0).batch) == 2
    unbatched = planner(max_batch=0)
    add(unbatched, 2, 0)
    unbatched.instance_freed(0, answered=4)
    assert len(unbatched.poll(0).batch) == 1


def test_no_grace_while_a_pending_request_has_a_queue_timeout() -> None:
    """The grace would hold a request with a queue-policy timeout past its deadline: the batch
    goes when its oldest request waited max_queue_delay, as Triton sends it."""
    policy = QueuePolicy(default_timeout_us=3000)
    settings = DynamicBatchSettings.create(
        8, (), 500, priority=PrioritySettings(default_policy=policy)
    )
    p: BatchPlanner[str] = BatchPlanner(settings)
    add(p, 3, 0)  # their deadline: 3000 us
    p.instance_freed(2000 * US, answered=2, ran_ns=5000 * US)
    assert [item.payload for item in p.poll(2000 * US).batch] == ["r0", "r1", "r2"]


def test_a_grace_that_runs_out_turns_it_off_for_a_while_and_one_that_fills_resets_that() -> None:
    p = planner()
    now = 0

    def freed_then_timed_out() -> bool:
        """Free the instance with one request pending; whether the grace held it back."""
        nonlocal now
        p.enqueue("pending", now_ns=now - 600 * US)
        p.instance_freed(now, answered=1)
        if p.poll(now).batch:
            return False
        now += 500 * US
        assert len(p.poll(now).batch) == 1
        return True

    now = 10**9
    assert freed_then_timed_out()  # timed out: the next 4 free instances get no grace
    assert [freed_then_timed_out() for _ in range(GRACE_BACKOFF_FIRST)] == [False] * 4
    assert freed_then_timed_out()  # timed out again: the next 8
    assert [freed_then_timed_out() for _ in range(2 * GRACE_BACKOFF_FIRST)] == [False] * 8
    # a grace that fills in time resets the backoff to its first step
    p.enqueue("pending", now_ns=now - 600 * US)
    p.instance_freed(now, answered=1)
    assert p.poll(now).batch == []
    p.enqueue("back", now_ns=now)
    assert len(p.poll(now).batch) == 2
    assert freed_then_timed_out()
    assert [freed_then_timed_out() for _ in range(GRACE_BACKOFF_FIRST)] == [False] * 4


async def test_two_groups_of_clients_merge_into_one_batch() -> None:
    """A closed loop split into two groups (one running, one pending past its delay): when the
    running group's answers go out, its clients come back and the next batch holds both."""
    clock = ManualClock()
    backend = PipeliningBackend()
    backend.gate = asyncio.Event()
    sched = await started(
        DynamicBatchScheduler(
            backend,
            config(BATCHING + "dynamic_batching { max_queue_delay_microseconds: 500 }"),
            clock=clock,
        )
    )
    group_a = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(2)]
    await until(lambda: sched.pending_count == 2)
    clock.advance_us(500)
    sched.wake()
    await until(lambda: len(backend.batches) == 1)
    group_b = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(3)]
    await until(lambda: sched.pending_count == 3)
    clock.advance_us(2000)  # group A ran 2 ms; group B waited past its delay
    backend.gate.set()
    await asyncio.gather(*group_a)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(backend.batches) == 1  # B waits for A's clients
    again = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(2)]
    await asyncio.gather(*group_b, *again)
    assert [len(reqs) for _, reqs in backend.batches] == [2, 5]
    await sched.stop()


async def test_the_serial_worker_gives_the_same_grace() -> None:
    """Models with priority levels or queue timeouts do not send batches early; they merge
    groups the same way."""
    clock = ManualClock()
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    cfg = BATCHING + (
        "dynamic_batching { max_queue_delay_microseconds: 500"
        " priority_levels: 2 default_priority_level: 1 }"
    )
    sched = await started(DynamicBatchScheduler(backend, config(cfg), clock=clock))
    first = asyncio.create_task(run(sched, request(INPUT0=[[0, 0]])))
    await until(lambda: sched.pending_count == 1)
    clock.advance_us(500)
    sched.wake()
    await until(lambda: len(backend.batches) == 1)
    pending = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(2)]
    await until(lambda: sched.pending_count == 2)
    clock.advance_us(1000)
    backend.gate.set()
    await first
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(backend.batches) == 1
    back = asyncio.create_task(run(sched, request(INPUT0=[[5, 5]])))
    await asyncio.gather(*pending, back)
    assert [len(reqs) for _, reqs in backend.batches] == [1, 3]
    await sched.stop()
