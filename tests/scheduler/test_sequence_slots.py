"""Sequence slot assignment, backlog, idle expiry and Direct batch layout (pure, timed by hand)."""

from __future__ import annotations

import pytest

from repokit.errors import Code, RepokitError
from repokit.scheduler.sequence_slots import SequenceSlots

MS = 1_000_000


def slots(instances: int = 2, per_instance: int = 2, idle_ms: int = 1000) -> SequenceSlots[str]:
    return SequenceSlots("seqmodel", list(range(instances)), per_instance, idle_ms * MS)


def test_starts_take_the_lowest_slot_spreading_over_instances_then_backlog() -> None:
    s = slots()
    placed = [s.enqueue(c, f"{c}-0", start=True, end=False, now_ns=0).slot for c in (1, 2, 3, 4)]
    assert placed == [(0, 0), (1, 0), (0, 1), (1, 1)]
    fifth = s.enqueue(5, "5-0", start=True, end=False, now_ns=0)
    assert fifth.slot is None and list(s.backlog) == [fifth]


def test_unknown_sequence_without_start_is_rejected_with_tritons_message() -> None:
    s = slots()
    with pytest.raises(RepokitError) as err:
        s.enqueue(42, "x", start=False, end=False, now_ns=0)
    assert err.value.code is Code.INVALID_ARG
    assert err.value.message == (
        "inference request for sequence 42 to model 'seqmodel' must specify the START flag "
        "on the first request of the sequence"
    )


def test_direct_batch_keeps_the_slot_layout_with_empty_slots_as_none() -> None:
    s = slots(instances=1, per_instance=4)
    for corrid in (10, 11, 12):
        s.enqueue(corrid, f"{corrid}-start", start=True, end=False, now_ns=0)
    batch, _ = s.direct_batch(0, now_ns=0)
    assert [d[1].payload if d else None for d in batch] == ["10-start", "11-start", "12-start"]
    for d in batch:
        assert d is not None
        s.complete(d[0], 0)
    s.enqueue(12, "12-next", start=False, end=False, now_ns=1)
    batch, _ = s.direct_batch(0, now_ns=1)
    # slots 0 and 1 hold sequences without a request: fillers up to the highest used slot
    assert [d[1].payload if d else None for d in batch] == [None, None, "12-next"]


def test_one_request_per_sequence_is_dispatched_at_a_time() -> None:
    s = slots(instances=1, per_instance=1)
    s.enqueue(7, "a", start=True, end=False, now_ns=0)
    s.enqueue(7, "b", start=False, end=False, now_ns=0)
    first, _ = s.direct_batch(0, now_ns=0)
    assert [d[1].payload for d in first if d] == ["a"]
    assert s.direct_batch(0, now_ns=0) == ([], 0)  # "b" waits for "a" to finish
    assert first[0] is not None
    s.complete(first[0][0], 0)
    second, _ = s.direct_batch(0, now_ns=0)
    assert [d[1].payload for d in second if d] == ["b"]


def test_end_frees_the_slot_for_the_oldest_backlogged_sequence() -> None:
    s = slots(instances=1, per_instance=1)
    s.enqueue(1, "1-start", start=True, end=True, now_ns=0)
    s.enqueue(2, "2-start", start=True, end=False, now_ns=1)
    s.enqueue(3, "3-start", start=True, end=False, now_ns=2)
    assert len(s.backlog) == 2
    batch, _ = s.direct_batch(0, now_ns=2)
    assert [d[1].payload for d in batch if d] == ["1-start"]
    assert s.slot_owner(0, 0) == 2 and [q.corrid for q in s.backlog] == [3]
    # the id of the ended sequence is forgotten: without START it is an unknown sequence
    with pytest.raises(RepokitError):
        s.enqueue(1, "1-late", start=False, end=False, now_ns=3)


def test_idle_sequences_are_reaped_and_their_slot_goes_to_the_backlog() -> None:
    s = slots(instances=1, per_instance=1, idle_ms=1000)
    s.enqueue(1, "1-start", start=True, end=False, now_ns=0)
    batch, _ = s.direct_batch(0, now_ns=0)
    assert batch[0] is not None
    s.complete(batch[0][0], 5 * MS)
    s.enqueue(2, "2-start", start=True, end=False, now_ns=10 * MS)
    assert s.reap(500 * MS) == ([], 1005 * MS)
    assert s.reap(1005 * MS) == ([1], 0)
    assert s.slot_owner(0, 0) == 2
    with pytest.raises(RepokitError) as err:
        s.enqueue(1, "1-late", start=False, end=False, now_ns=1006 * MS)
    assert "must specify the START flag" in err.value.message


def test_sequences_with_queued_or_running_requests_are_not_idle() -> None:
    s = slots(instances=1, per_instance=1, idle_ms=1)
    s.enqueue(1, "queued", start=True, end=False, now_ns=0)
    assert s.reap(10 * MS) == ([], 0)
    s.direct_batch(0, now_ns=10 * MS)  # now running
    assert s.reap(20 * MS) == ([], 0)


def test_direct_delay_waits_for_slot_utilization() -> None:
    s = slots(instances=1, per_instance=4)
    s.enqueue(1, "a", start=True, end=False, now_ns=0)
    batch, wake = s.direct_batch(0, now_ns=10, delay_ns=100, min_utilization=0.5)
    assert batch == [] and wake == 100
    s.enqueue(2, "b", start=True, end=False, now_ns=20)
    batch, _ = s.direct_batch(0, now_ns=20, delay_ns=100, min_utilization=0.5)
    assert len([d for d in batch if d]) == 2
    s2 = slots(instances=1, per_instance=4)
    s2.enqueue(1, "a", start=True, end=False, now_ns=0)
    assert len(s2.direct_batch(0, now_ns=100, delay_ns=100, min_utilization=0.5)[0]) == 1


def test_oldest_heads_are_dispatched_oldest_first() -> None:
    s = slots(instances=1, per_instance=3)
    s.enqueue(1, "1-start", start=True, end=False, now_ns=30)
    s.enqueue(2, "2-start", start=True, end=False, now_ns=10)
    s.enqueue(2, "2-next", start=False, end=False, now_ns=11)
    heads = s.ready_heads(0)
    assert [entry.payload for _, entry in heads] == ["2-start", "1-start"]
    assert s.ready_heads(0) == []
    s.complete(heads[0][0], 40)
    assert [entry.payload for _, entry in s.ready_heads(0)] == ["2-next"]
    assert s.queued_count == 0


def test_a_request_timeout_only_bounds_the_wait_in_the_backlog() -> None:
    s = slots(instances=1, per_instance=1)
    s.enqueue(1, "a1", start=True, end=False, now_ns=0, timeout_ns=10)  # gets the slot
    s.enqueue(2, "b1", start=True, end=False, now_ns=0, timeout_ns=0)  # backlog, no deadline
    s.enqueue(2, "b2", start=False, end=False, now_ns=5, timeout_ns=100)  # deadline 105
    s.enqueue(2, "b3", start=False, end=False, now_ns=6, timeout_ns=200)  # keeps the earliest
    assert s.expire_backlog(104) == ([], 105)
    expired, next_ns = s.expire_backlog(105)
    assert [seq.corrid for seq in expired] == [2] and next_ns == 0
    assert [e.payload for e in expired[0].queue] == ["b1", "b2", "b3"]
    assert not s.backlog and not s.is_live(2)  # forgotten: a later request needs START
    with pytest.raises(RepokitError):
        s.enqueue(2, "b4", start=False, end=False, now_ns=200)
    assert s.slot_owner(0, 0) == 1  # the slotted sequence's timeout never applied
    assert s.expire_backlog(10**9) == ([], 0)


def test_requeue_and_end_for_iterative_sequences() -> None:
    s = slots(instances=1, per_instance=1)
    s.enqueue(1, "a", start=True, end=False, now_ns=0)
    s.enqueue(2, "b", start=True, end=False, now_ns=0)  # backlog
    batch, _ = s.direct_batch(0, 0)
    dispatched = batch[0]
    assert dispatched is not None
    seq = dispatched[0]
    s.complete(seq, 1)
    assert s.requeue(seq, "a-again", 2)
    assert [(e.payload, e.start, e.end) for e in seq.queue] == [("a-again", False, False)]
    assert [e.payload for e in s.end(seq)] == ["a-again"]
    assert s.slot_owner(0, 0) == 2  # the backlog got the freed slot
    assert not s.requeue(seq, "late", 3)
