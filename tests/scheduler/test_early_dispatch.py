"""Final batches go to a busy pipelining instance at once (BatchPlanner.poll_final and the
dynamic driver's pipelined worker); batches that could still grow wait for the instance."""

from __future__ import annotations

import asyncio
from typing import Any

from repokit.backends.base import BackendRequest
from repokit.scheduler.dynamic_batch import BatchPlanner, DynamicBatchSettings
from repokit.scheduler.dynamic_driver import DynamicBatchScheduler
from repokit.scheduler.runtime import ManualClock
from tests.scheduler.helpers import RecordingBackend, config, request
from tests.scheduler.test_dynamic_driver import BATCHING, run, started, until


class PipeliningBackend(RecordingBackend):
    pipelines_executions = True


def planner(max_batch: int = 8) -> BatchPlanner[str]:
    return BatchPlanner(DynamicBatchSettings.create(max_batch, (), 500))


def test_poll_final_only_returns_batches_that_cannot_grow() -> None:
    p = planner()
    for i in range(5):
        p.enqueue(f"r{i}", now_ns=0)
    assert p.poll_final(10**9).batch == []  # 5 of 8, delay long expired: still not final
    for i in range(5, 9):
        p.enqueue(f"r{i}", now_ns=0)
    final = p.poll_final(0).batch
    assert [item.payload for item in final] == [f"r{i}" for i in range(8)]
    assert len(p) == 1


def test_poll_final_on_a_request_that_cannot_join() -> None:
    p = planner()
    p.enqueue("a", now_ns=0, batch_size=3)
    p.enqueue("b", now_ns=0, batch_size=6)  # 3 + 6 > 8: the first batch is final
    assert [i.payload for i in p.poll_final(0).batch] == ["a"]
    keyed = planner()
    keyed.enqueue("x", now_ns=0, key=1)
    keyed.enqueue("y", now_ns=0, key=2)  # another shape: "x" cannot grow any more
    assert [i.payload for i in keyed.poll_final(0).batch] == ["x"]


def test_poll_final_without_batching_returns_nothing() -> None:
    p = planner(0)
    p.enqueue("a", now_ns=0)
    assert p.poll_final(0).batch == []


async def test_a_full_batch_is_sent_while_the_instance_is_busy() -> None:
    backend = PipeliningBackend()
    backend.gate = asyncio.Event()
    sched = await started(
        DynamicBatchScheduler(
            backend, config(BATCHING + "dynamic_batching { max_queue_delay_microseconds: 100 }")
        )
    )
    first = asyncio.create_task(run(sched, request(INPUT0=[[0, 0]])))
    await until(lambda: len(backend.batches) == 1)
    partial = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(5)]
    await until(lambda: sched.pending_count == 5)
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(backend.batches) == 1  # 5 of 8 could still grow: it waits for the instance
    more = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(3 + 8 + 2)]
    await until(lambda: len(backend.batches) == 2)
    for _ in range(20):
        await asyncio.sleep(0)
    # one full batch waits at the instance; the next full one stays queued with the rest
    assert [len(reqs) for _, reqs in backend.batches] == [1, 8]
    assert sched.pending_count == 18  # the 8 at the instance wait too (as Triton counts)
    backend.gate.set()
    await asyncio.gather(first, *partial, *more)
    assert [len(reqs) for _, reqs in backend.batches] == [1, 8, 8, 2]
    await sched.stop()


async def test_stop_finishes_early_batches_and_the_queue() -> None:
    backend = PipeliningBackend()
    backend.gate = asyncio.Event()
    sched = await started(DynamicBatchScheduler(backend, config(BATCHING + "dynamic_batching {}")))
    tasks = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(19)]
    await until(lambda: len(backend.batches) == 2)
    stopping = asyncio.create_task(sched.stop())
    backend.gate.set()
    await asyncio.gather(*tasks)
    await stopping
    assert sum(len(reqs) for _, reqs in backend.batches) == 19
    assert all(t.result().result.error is None for t in tasks)


async def test_queue_time_of_an_early_batch_counts_its_wait_at_the_instance() -> None:
    backend = PipeliningBackend()
    backend.gate = asyncio.Event()
    clock = ManualClock()
    sched = await started(
        DynamicBatchScheduler(backend, config(BATCHING + "dynamic_batching {}"), clock=clock)
    )
    first = asyncio.create_task(run(sched, request(INPUT0=[[0, 0]])))
    await until(lambda: len(backend.batches) == 1)
    early = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(8)]
    await until(lambda: len(backend.batches) == 2)
    clock.advance_us(20_000)  # the early batch waits 20 ms behind the running one
    backend.gate.set()
    await asyncio.gather(first, *early)
    # queue time is the whole wait minus the (fake, few-ns) compute time
    timing = early[0].result().timing
    ran = timing.compute_input_ns + timing.compute_infer_ns + timing.compute_output_ns
    assert [t.result().queue_ns for t in early] == [20_000_000 - ran] * 8
    await sched.stop()


async def test_priorities_and_timeouts_keep_full_batches_in_the_queue() -> None:
    for extra in (
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
        "dynamic_batching { default_queue_policy { default_timeout_microseconds: 10000000 } }",
    ):
        backend = PipeliningBackend()
        backend.gate = asyncio.Event()
        sched = await started(DynamicBatchScheduler(backend, config(BATCHING + extra)))
        tasks = [asyncio.create_task(run(sched, request(INPUT0=[[0, 0]])))]
        await until(lambda: len(backend.batches) == 1)  # noqa: B023
        tasks += [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(8)]
        await until(lambda: sched.pending_count == 8)  # noqa: B023
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(backend.batches) == 1  # a higher priority could still go first
        backend.gate.set()
        await asyncio.gather(*tasks)
        assert [len(reqs) for _, reqs in backend.batches] == [1, 8]
        await sched.stop()


async def test_the_next_batch_starts_before_the_answers_of_the_last_one_go_out() -> None:
    seen: list[bool] = []

    class Watching(PipeliningBackend):
        async def execute(self, instance: int, requests: list[BackendRequest]) -> Any:
            if self.batches:  # a later batch: has the first caller got its answer yet?
                seen.append(first.done())
            return await super().execute(instance, requests)

    backend = Watching()
    backend.gate = asyncio.Event()
    sched = await started(DynamicBatchScheduler(backend, config(BATCHING + "dynamic_batching {}")))
    first = asyncio.create_task(run(sched, request(INPUT0=[[0, 0]])))
    await until(lambda: len(backend.batches) == 1)
    rest = [asyncio.create_task(run(sched, request(INPUT0=[[i, i]]))) for i in range(3)]
    await until(lambda: sched.pending_count == 3)
    backend.gate.set()
    await asyncio.gather(first, *rest)
    assert [len(reqs) for _, reqs in backend.batches] == [1, 3]
    assert seen == [False]  # the instance got its next batch first
    await sched.stop()
