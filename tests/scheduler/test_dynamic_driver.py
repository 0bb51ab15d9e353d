"""The asyncio dynamic batcher with a fake backend: no sleeps, progress is gated explicitly."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from repokit.backends.base import BackendRequest, Timing
from repokit.errors import Code, RepokitError
from repokit.scheduler.base import ScheduledResult
from repokit.scheduler.dynamic_driver import DynamicBatchScheduler
from repokit.scheduler.runtime import (
    BACKLOG_DELAY_SCHEDULER_ENV,
    DELAY_SCHEDULER_ENV,
    ManualClock,
    delay_scheduler_count,
)
from tests.scheduler.helpers import RecordingBackend, config, request

BATCHING = """
name: "m" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


async def until(predicate: object, rounds: int = 200) -> None:
    """Let the loop run until the condition holds (bounded; no wall-clock waiting)."""
    for _ in range(rounds):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def run(sched: DynamicBatchScheduler, req: BackendRequest) -> ScheduledResult:
    return await sched.submit(req, req.inputs["INPUT0"].shape[0])


async def started(scheduler: DynamicBatchScheduler) -> DynamicBatchScheduler:
    await scheduler.start()
    return scheduler


async def test_requests_queue_up_while_the_instance_is_busy_and_form_one_batch() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = await started(DynamicBatchScheduler(backend, config(BATCHING + "dynamic_batching {}")))
    first = asyncio.create_task(run(sched, request(INPUT0=[[0, 0]])))
    await until(lambda: len(backend.batches) == 1)
    rest = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(1, 6)]
    await until(lambda: sched.pending_count == 5)
    backend.gate.set()
    await asyncio.gather(first, *rest)
    assert [len(reqs) for _, reqs in backend.batches] == [1, 5]
    out = rest[2].result().result.outputs[0]
    assert out.name == "OUTPUT0" and np.array_equal(out.data, [[6.0, 6.0]])
    await sched.stop()


async def test_merged_batches_are_concatenated_once_and_split_into_views() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = await started(
        DynamicBatchScheduler(backend, config(BATCHING + "dynamic_batching {}"), merge_batches=True)
    )
    blocker = asyncio.create_task(run(sched, request(INPUT0=[[9, 9]])))
    await until(lambda: len(backend.batches) == 1)
    tasks = [
        asyncio.create_task(run(sched, request(INPUT0=[[1, 1], [2, 2]]))),
        asyncio.create_task(run(sched, request(INPUT0=[[3, 3]]))),
    ]
    await until(lambda: sched.pending_count == 2)
    backend.gate.set()
    await asyncio.gather(blocker, *tasks)
    merged = backend.batches[1][1]
    assert len(merged) == 1 and merged[0].inputs["INPUT0"].shape == (3, 2)
    a, b = (t.result().result.outputs[0] for t in tasks)
    assert a.shape == (2, 2) and np.array_equal(a.data, [[2, 2], [4, 4]])
    assert b.shape == (1, 2) and np.array_equal(b.data, [[6, 6]])
    assert a.data.base is not None  # a view of the batch output, not a copy
    await sched.stop()


async def test_each_free_instance_takes_the_next_batch() -> None:
    backend = RecordingBackend(instances=2)
    backend.gate = asyncio.Event()
    sched = await started(DynamicBatchScheduler(backend, config(BATCHING + "dynamic_batching {}")))
    t1 = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: len(backend.batches) == 1)
    t2 = asyncio.create_task(run(sched, request(INPUT0=[[2, 2]])))
    await until(lambda: len(backend.batches) == 2)
    backend.gate.set()
    await asyncio.gather(t1, t2)
    assert sorted(instance for instance, _ in backend.batches) == [0, 1]
    await sched.stop()


async def test_preserve_ordering_releases_responses_in_request_order() -> None:
    backend = RecordingBackend(instances=2)
    backend.instance_gates = {0: asyncio.Event(), 1: asyncio.Event()}
    cfg = config(BATCHING + "dynamic_batching { preserve_ordering: true }")
    sched = await started(DynamicBatchScheduler(backend, cfg))
    done: list[str] = []
    t1 = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    t1.add_done_callback(lambda _: done.append("first"))
    await until(lambda: len(backend.batches) == 1)
    t2 = asyncio.create_task(run(sched, request(INPUT0=[[2, 2]])))
    t2.add_done_callback(lambda _: done.append("second"))
    await until(lambda: len(backend.batches) == 2)
    second_instance = backend.batches[1][0]
    backend.instance_gates[second_instance].set()  # the later batch finishes first
    for _ in range(20):
        await asyncio.sleep(0)
    assert done == []  # held back until the earlier one is done
    backend.instance_gates[1 - second_instance].set()
    await asyncio.gather(t1, t2)
    assert done == ["first", "second"]
    await sched.stop()


async def test_queue_timeout_reject_with_an_injected_clock() -> None:
    clock = ManualClock()
    backend = RecordingBackend()
    cfg = config(
        BATCHING
        + """dynamic_batching { max_queue_delay_microseconds: 1000000
             default_queue_policy { default_timeout_microseconds: 100 } }"""
    )
    sched = await started(DynamicBatchScheduler(backend, cfg, clock=clock))
    task = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: sched.pending_count == 1)
    clock.advance_us(100)
    sched.wake()
    with pytest.raises(RepokitError) as err:
        await task
    assert err.value.code is Code.UNAVAILABLE and err.value.message == "Request timeout expired"
    assert backend.batches == []
    await sched.stop()


async def test_queue_full_fails_immediately_instead_of_waiting() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    cfg = config(BATCHING + "dynamic_batching { default_queue_policy { max_queue_size: 1 } }")
    sched = await started(DynamicBatchScheduler(backend, cfg))
    running = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: len(backend.batches) == 1)
    queued = asyncio.create_task(run(sched, request(INPUT0=[[2, 2]])))
    await until(lambda: sched.pending_count == 1)
    with pytest.raises(RepokitError) as err:
        await run(sched, request(INPUT0=[[3, 3]]))
    assert err.value.message == "[request id: <id_unknown>] Exceeds maximum queue size"
    backend.gate.set()
    await asyncio.gather(running, queued)
    await sched.stop()


async def test_statistics_hooks_see_batch_sizes_and_timing() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    batches: list[tuple[int, Timing]] = []
    sched = await started(
        DynamicBatchScheduler(
            backend,
            config(BATCHING + "dynamic_batching {}"),
            on_execution=lambda size, timing: batches.append((size, timing)),
        )
    )
    first = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: len(backend.batches) == 1)
    second = asyncio.create_task(run(sched, request(INPUT0=[[1, 1], [2, 2], [3, 3]])))
    await until(lambda: sched.pending_count == 1)
    backend.gate.set()
    await asyncio.gather(first, second)
    assert [size for size, _ in batches] == [1, 3]
    assert batches[0][1] == Timing(1, 2, 3)
    assert second.result().timing == Timing(1, 2, 3) and second.result().queue_ns >= 0
    await sched.stop()


async def test_model_errors_come_back_in_the_result_and_crashes_become_internal() -> None:
    backend = RecordingBackend()
    sched = await started(DynamicBatchScheduler(backend, config(BATCHING)))
    backend.fail_with = "bad thing"
    result = (await run(sched, request(INPUT0=[[1, 1]]))).result
    assert result.error is not None and result.error.message == "bad thing"
    backend.fail_with = None
    backend.raise_exc = ValueError("boom")
    result = (await run(sched, request(INPUT0=[[1, 1]]))).result
    assert result.error is not None and result.error.code is Code.INTERNAL
    assert "boom" in result.error.message
    await sched.stop()


async def test_stop_flushes_requests_waiting_for_the_delay() -> None:
    clock = ManualClock()
    backend = RecordingBackend()
    cfg = config(BATCHING + "dynamic_batching { max_queue_delay_microseconds: 1000000000 }")
    sched = await started(DynamicBatchScheduler(backend, cfg, clock=clock))
    task = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: sched.pending_count == 1)
    assert backend.batches == []
    await sched.stop()
    assert (await task).result.error is None
    with pytest.raises(RepokitError):
        await run(sched, request(INPUT0=[[1, 1]]))


async def test_cancelled_request_leaves_the_queue() -> None:
    clock = ManualClock()
    backend = RecordingBackend()
    cfg = config(BATCHING + "dynamic_batching { max_queue_delay_microseconds: 1000000000 }")
    sched = await started(DynamicBatchScheduler(backend, cfg, clock=clock))
    task = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: sched.pending_count == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sched.pending_count == 0
    await sched.stop()
    assert backend.batches == []


async def test_delay_scheduler_holds_batching_until_that_many_requests_are_queued() -> None:
    """TRITONSERVER_DELAY_SCHEDULER=N (Triton's test hook): no batch forms before N requests
    are queued, then the batcher forms them as usual (here the preferred size 6 at once);
    later requests are not held again."""
    clock = ManualClock()
    backend = RecordingBackend()
    cfg = config(
        BATCHING
        + "dynamic_batching { preferred_batch_size: [ 2, 6 ]"
        + " max_queue_delay_microseconds: 10000000 }"
    )
    sched = await started(DynamicBatchScheduler(backend, cfg, clock=clock, hold_until_queued=6))
    tasks = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(5)]
    await until(lambda: sched.pending_count == 5)
    for _ in range(20):
        await asyncio.sleep(0)
    assert backend.batches == []  # a batch of 2 (preferred) would have gone without the hold
    tasks.append(asyncio.create_task(run(sched, request(INPUT0=[[5, 5]]))))
    await asyncio.gather(*tasks)
    assert [len(reqs) for _, reqs in backend.batches] == [6]
    more = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(2)]
    await asyncio.gather(*more)
    assert [len(reqs) for _, reqs in backend.batches] == [6, 2]
    await sched.stop()


async def test_delay_scheduler_hold_ends_when_the_scheduler_stops() -> None:
    backend = RecordingBackend()
    cfg = config(BATCHING + "dynamic_batching { max_queue_delay_microseconds: 1000000000 }")
    sched = await started(
        DynamicBatchScheduler(backend, cfg, clock=ManualClock(), hold_until_queued=3)
    )
    task = asyncio.create_task(run(sched, request(INPUT0=[[1, 1]])))
    await until(lambda: sched.pending_count == 1)
    await sched.stop()
    assert (await task).result.error is None
    assert [len(reqs) for _, reqs in backend.batches] == [1]


@pytest.mark.parametrize(
    ("value", "count"),
    [(None, 0), ("", 0), ("6", 6), (" 3", 3), ("4x", 4), ("abc", 0), ("-2", 0), ("+5", 5)],
)
def test_delay_scheduler_count_reads_the_environment_as_triton_does(
    value: str | None, count: int
) -> None:
    for name in (DELAY_SCHEDULER_ENV, BACKLOG_DELAY_SCHEDULER_ENV):
        environ = {} if value is None else {name: value}
        assert delay_scheduler_count(name, environ) == count
