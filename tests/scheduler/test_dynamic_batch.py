"""Batch formation, preferred sizes, delays, priorities and queue policies (pure planner)."""

from __future__ import annotations

import pytest

from repokit.errors import Code, RepokitError
from repokit.scheduler.dynamic_batch import BatchPlanner, DynamicBatchSettings
from repokit.scheduler.queue_policy import PrioritySettings, QueuePolicy
from tests.scheduler.helpers import config

US = 1000  # ns per microsecond


def planner(
    max_batch: int = 8,
    preferred: tuple[int, ...] = (),
    delay_us: int = 0,
    priority: PrioritySettings | None = None,
) -> BatchPlanner[str]:
    return BatchPlanner(
        DynamicBatchSettings.create(max_batch, preferred, delay_us, False, priority)
    )


def fill(p: BatchPlanner[str], sizes: list[int], now: int = 0) -> None:
    for i, size in enumerate(sizes):
        p.enqueue(f"r{i}", now_ns=now, batch_size=size)


def names(p: BatchPlanner[str], now: int) -> list[str]:
    return [item.payload for item in p.poll(now).batch]


def test_delay_zero_sends_whatever_is_pending_now() -> None:
    p = planner(max_batch=8)
    fill(p, [1, 1, 1])
    assert names(p, 0) == ["r0", "r1", "r2"]
    assert len(p) == 0


def test_max_batch_size_is_never_exceeded_and_the_rest_forms_the_next_batch() -> None:
    p = planner(max_batch=4)
    fill(p, [1, 2, 2, 1])
    assert names(p, 0) == ["r0", "r1"]  # 1+2=3, adding 2 would exceed 4
    assert names(p, 0) == ["r2", "r3"]


def test_preferred_size_runs_at_once_even_with_a_delay() -> None:
    p = planner(max_batch=16, preferred=(4, 8), delay_us=1000)
    fill(p, [1] * 5)
    decision = p.poll(0)
    assert [i.payload for i in decision.batch] == ["r0", "r1", "r2", "r3"]
    # the fifth waits for the delay measured from its own arrival
    decision = p.poll(10 * US)
    assert decision.batch == [] and decision.wake_at_ns == 1000 * US


def test_largest_preferred_size_that_fits_is_chosen() -> None:
    p = planner(max_batch=16, preferred=(2, 4, 6), delay_us=1000)
    fill(p, [1] * 7)
    assert len(p.poll(0).batch) == 6


def test_cursor_marks_the_batch_before_exceeding_the_largest_preferred_size() -> None:
    # pending 2 + next 2 > max preferred 3: Triton sends the 2 it has right away
    p = planner(max_batch=8, preferred=(3,), delay_us=1000)
    fill(p, [2, 2])
    assert names(p, 0) == ["r0"]


def test_without_preferred_sizes_the_default_is_max_batch_size() -> None:
    settings = DynamicBatchSettings.create(8, (), 500)
    assert settings.preferred_batch_sizes == (8,)
    p: BatchPlanner[str] = BatchPlanner(settings)
    fill(p, [1] * 7)
    decision = p.poll(100 * US)
    assert decision.batch == [] and decision.wake_at_ns == 500 * US
    p.enqueue("r7", now_ns=200 * US)
    assert len(p.poll(200 * US).batch) == 8  # a full batch goes at once


def test_delay_expiry_is_measured_from_the_oldest_request() -> None:
    p = planner(max_batch=8, delay_us=500)
    p.enqueue("old", now_ns=0)
    p.enqueue("new", now_ns=400 * US)
    assert p.poll(499 * US).batch == []
    assert [i.payload for i in p.poll(500 * US).batch] == ["old", "new"]


def test_delay_exceeded_sends_everything_pending_up_to_max_not_just_the_preferred() -> None:
    p = planner(max_batch=8, preferred=(2,), delay_us=100)
    fill(p, [1] * 5)
    assert len(p.poll(100 * US).batch) == 5


def test_batching_disabled_sends_one_request_at_a_time() -> None:
    p = planner(max_batch=0)
    fill(p, [1, 1])
    assert names(p, 0) == ["r0"]
    assert names(p, 0) == ["r1"]


def test_requests_with_different_keys_start_a_new_batch_and_send_the_pending_one() -> None:
    p = planner(max_batch=8, delay_us=1000)
    p.enqueue("a1", now_ns=0, key=(3,))
    p.enqueue("a2", now_ns=0, key=(3,))
    p.enqueue("b1", now_ns=0, key=(5,))
    # the shape change saturates the pending batch: sent at once despite the delay
    assert names(p, 0) == ["a1", "a2"]
    assert p.poll(0).batch == []
    assert names(p, 1000 * US) == ["b1"]


def test_priorities_lower_level_first_and_fifo_within_a_level() -> None:
    prio = PrioritySettings(levels=3, default_level=2)
    p = planner(max_batch=1, priority=prio)
    p.enqueue("default-1", now_ns=0)  # priority 0 -> default level 2
    p.enqueue("low", now_ns=0, priority=3)
    p.enqueue("high-1", now_ns=0, priority=1)
    p.enqueue("out-of-range", now_ns=0, priority=9)  # > levels -> default level 2
    p.enqueue("high-2", now_ns=0, priority=1)
    order = [names(p, 0)[0] for _ in range(5)]
    assert order == ["high-1", "high-2", "default-1", "out-of-range", "low"]


def test_the_largest_priority_levels_are_served_in_order_and_emptied_levels_forgotten() -> None:
    """priority_levels up to 2**64 - 1 (L0_model_queue test_max_priority_levels): levels are
    made when a request needs one, as Triton's PriorityQueue makes them."""
    top = 2**64 - 1
    prio = PrioritySettings(
        levels=top,
        default_level=2**32,
        level_policies=((7, QueuePolicy(max_queue_size=1)),),
    )
    p = planner(max_batch=1, priority=prio)
    p.enqueue("default", now_ns=0)  # priority 0 -> level 2**32
    p.enqueue("lowest", now_ns=0, priority=top)
    p.enqueue("first", now_ns=0, priority=1)
    p.enqueue("seventh", now_ns=0, priority=7)
    with pytest.raises(RepokitError, match="Exceeds maximum queue size"):
        p.enqueue("full", now_ns=0, priority=7)
    order = [names(p, 0)[0] for _ in range(4)]
    assert order == ["first", "seventh", "default", "lowest"]
    assert len(p.queues) == 0
    assert sorted(p.queues._levels) == [7]  # the level with its own policy stays


def test_queue_full_is_unavailable_at_once_per_level() -> None:
    prio = PrioritySettings(
        levels=2,
        default_level=1,
        level_policies=((2, QueuePolicy(max_queue_size=1)),),
    )
    p = planner(max_batch=4, priority=prio, delay_us=1000)
    p.enqueue("a", now_ns=0, priority=2)
    with pytest.raises(RepokitError) as err:
        p.enqueue("b", now_ns=0, priority=2)
    assert err.value.code is Code.UNAVAILABLE
    assert err.value.message == "Exceeds maximum queue size"
    p.enqueue("c", now_ns=0, priority=1)  # level 1 is unlimited


def test_timeout_reject_removes_expired_requests() -> None:
    prio = PrioritySettings(default_policy=QueuePolicy(default_timeout_us=100))
    p = planner(max_batch=8, delay_us=1000, priority=prio)
    p.enqueue("a", now_ns=0)
    p.enqueue("b", now_ns=50 * US)
    decision = p.poll(60 * US)
    assert decision.batch == [] and decision.wake_at_ns == 100 * US  # nearest timeout
    decision = p.poll(100 * US)
    assert [i.payload for i in decision.rejected] == ["a"]
    assert len(p) == 1


def test_timeout_delay_moves_requests_behind_the_others() -> None:
    prio = PrioritySettings(
        default_policy=QueuePolicy(delay_on_timeout=True, default_timeout_us=10)
    )
    p = planner(max_batch=1, priority=prio)
    p.enqueue("late", now_ns=0)
    p.enqueue("fresh", now_ns=15 * US)
    decision = p.poll(15 * US)
    assert decision.rejected == []
    assert [i.payload for i in decision.batch] == ["fresh"]
    assert names(p, 15 * US) == ["late"]


def test_timeout_override_only_shortens() -> None:
    policy = QueuePolicy(default_timeout_us=100, allow_timeout_override=True)
    assert policy.timeout_us(50) == 50
    assert policy.timeout_us(500) == 100
    assert policy.timeout_us(0) == 100
    assert QueuePolicy(default_timeout_us=100).timeout_us(50) == 100
    # with no default timeout the request's own timeout is ignored
    assert QueuePolicy(allow_timeout_override=True).timeout_us(50) == 0


def test_settings_from_config() -> None:
    cfg = config(
        """
        name: "m" max_batch_size: 16
        dynamic_batching {
          preferred_batch_size: [ 8, 4 ] max_queue_delay_microseconds: 300
          priority_levels: 2 default_priority_level: 2
          default_queue_policy { max_queue_size: 3 }
          priority_queue_policy { key: 1 value { timeout_action: DELAY
            default_timeout_microseconds: 7 allow_timeout_override: true } }
        }
        """
    )
    settings = DynamicBatchSettings.from_config(cfg)
    assert settings.preferred_batch_sizes == (4, 8)
    assert settings.max_queue_delay_ns == 300 * US
    assert settings.priority.levels == 2 and settings.priority.default_level == 2
    assert settings.priority.default_policy.max_queue_size == 3
    assert dict(settings.priority.level_policies)[1] == QueuePolicy(True, 7, True, 0)
    assert (
        DynamicBatchSettings.from_config(config('name: "m" max_batch_size: 4')).max_batch_size == 0
    )
