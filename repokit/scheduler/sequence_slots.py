"""Sequence slots, backlog and idle expiry of the sequence batcher (pure; time passed in).

Every active instance has ``slots_per_instance`` sequence slots (``max(1, max_batch_size)`` for
Direct, ``max_candidate_sequences`` for Oldest). A START takes the free slot with the lowest
index, ties going to the lowest instance (Triton's ready-slot priority queue), so sequences
spread over instances first. With no free slot the sequence waits in a FIFO backlog, queueing
its requests; a slot freed by END (when the END request is dispatched) or by idle expiry goes to
the oldest backlogged sequence.

A request ``timeout`` only matters while its sequence waits in the backlog (Triton's Direct
behaviour): the backlogged sequence expires at the earliest ``enqueue time + timeout`` of its
requests; ``expire_backlog`` drops it (its requests are rejected by the driver and the id is
forgotten, so a later request without START is refused). Once the sequence has a slot, timeouts
no longer apply.

A sequence has at most one request dispatched at a time (``busy``), so its requests execute in
order and each sees the implicit state left by the previous one.

Direct batches keep the slot layout: position ``i`` of the batch is slot ``i`` of the instance,
up to the highest slot that holds a sequence; slots without a ready request are ``None`` (the
driver fills them with a zero request whose READY control is false, as Triton's null request).
Given a batching ``key`` (the shapes of inputs that must match to batch), a Direct batch takes
only the ready slots whose next request has the key of the oldest ready request; the others wait
for the next batch, as Triton runs sequences of different shapes one batch after another when
ragged batching is off (``qa/L0_sequence_batcher`` test_ragged_batch on variable-shape models).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from repokit.scheduler.sequence_controls import CorrelationId, missing_start_error

T = TypeVar("T")


@dataclass(eq=False)
class SeqEntry(Generic[T]):
    payload: T
    start: bool
    end: bool
    enqueue_ns: int


@dataclass(eq=False)
class LiveSequence(Generic[T]):
    corrid: CorrelationId
    queue: deque[SeqEntry[T]] = field(default_factory=deque)
    slot: tuple[int, int] | None = None  # (instance, slot index)
    busy: bool = False
    ended: bool = False  # END dispatched: the sequence no longer owns a slot
    last_ns: int = 0
    expires_ns: int = 0  # backlog deadline from the requests' timeouts (0 = none)
    # the slot it gave up while its last request still runs (that slot's next owner waits)
    leaving: tuple[int, int] | None = None
    data: Any = None  # the driver's per-sequence data (implicit state)


Dispatched = tuple[LiveSequence[T], SeqEntry[T]]


class SequenceSlots(Generic[T]):
    def __init__(
        self, model: str, instances: list[int], slots_per_instance: int, idle_ns: int
    ) -> None:
        self.model = model
        self.instances = list(instances)
        self.slots_per_instance = max(1, slots_per_instance)
        self.idle_ns = idle_ns
        self._owners: dict[int, list[LiveSequence[T] | None]] = {
            i: [None] * self.slots_per_instance for i in self.instances
        }
        self._free: list[tuple[int, int]] = [
            (index, instance)
            for instance in self.instances
            for index in range(self.slots_per_instance)
        ]
        heapq.heapify(self._free)
        self._live: dict[CorrelationId, LiveSequence[T]] = {}
        # slots whose previous sequence's last request still runs: the new owner waits for it
        self._in_flight: set[tuple[int, int]] = set()
        self.backlog: deque[LiveSequence[T]] = deque()
        self.retired: set[int] = set()  # instances whose slots take no new sequence

    # --- in-place instance updates ------------------------------------------------------
    def add_instance(self, instance: int) -> None:
        """A new instance's slots (backlogged sequences take them now)."""
        self.instances.append(instance)
        self._owners[instance] = [None] * self.slots_per_instance
        for index in range(self.slots_per_instance):
            heapq.heappush(self._free, (index, instance))
        while self.backlog and self._free:
            self._bind(self.backlog.popleft(), heapq.heappop(self._free))

    def retire(self, instance: int) -> None:
        """No new sequence takes a slot of ``instance``; those it holds keep them."""
        self.retired.add(instance)
        if instance in self.instances:
            self.instances.remove(instance)
        self._free = [free for free in self._free if free[1] != instance]
        heapq.heapify(self._free)

    def vacant(self, instance: int) -> bool:
        """No sequence holds a slot of ``instance`` and no request of one still runs there."""
        owners = self._owners.get(instance, ())
        return all(seq is None for seq in owners) and not any(
            slot[0] == instance for slot in self._in_flight
        )

    # --- requests -----------------------------------------------------------------------
    def enqueue(
        self,
        corrid: CorrelationId,
        payload: T,
        *,
        start: bool,
        end: bool,
        now_ns: int,
        timeout_ns: int = 0,
    ) -> LiveSequence[T]:
        """Queue a request of a sequence; INVALID_ARG when an unknown sequence lacks START.
        ``timeout_ns`` (0 = none) bounds the sequence's wait if it is in the backlog."""
        seq = self._live.get(corrid)
        if seq is None:
            if not start:
                raise missing_start_error(corrid, self.model)
            seq = LiveSequence(corrid, last_ns=now_ns)
            self._live[corrid] = seq
            if self._free:
                self._bind(seq, heapq.heappop(self._free))
            else:
                self.backlog.append(seq)
        seq.queue.append(SeqEntry(payload, start, end, now_ns))
        seq.last_ns = now_ns
        if timeout_ns and seq.slot is None:
            deadline = now_ns + timeout_ns
            if seq.expires_ns == 0 or deadline < seq.expires_ns:
                seq.expires_ns = deadline
        if end:  # a later request of this id needs START again (Triton forgets it at END)
            del self._live[corrid]
        return seq

    def is_live(self, corrid: CorrelationId) -> bool:
        return corrid in self._live

    @property
    def live_count(self) -> int:
        """Sequences started and not yet ended or freed."""
        return len(self._live)

    def instance_of(self, seq: LiveSequence[T]) -> int | None:
        return seq.slot[0] if seq.slot is not None else None

    def has_ready(self, instance: int) -> bool:
        return any(self._ready(s) for s in self._owners[instance])

    def _ready(self, seq: LiveSequence[T] | None) -> bool:
        """A sequence whose next request may be dispatched: it has one, none of its requests
        runs, and the request its slot's previous owner dispatched last has finished (Triton's
        ``in_flight_`` per slot: a sequence that gets a slot freed by an END runs its first
        request after that END ran)."""
        return (
            seq is not None
            and bool(seq.queue)
            and not seq.busy
            and (not self._in_flight or seq.slot not in self._in_flight)
        )

    # --- dispatch -----------------------------------------------------------------------
    def direct_batch(
        self,
        instance: int,
        now_ns: int,
        delay_ns: int = 0,
        min_utilization: float = 0.0,
        key: Callable[[T], Hashable] | None = None,
    ) -> tuple[list[Dispatched[T] | None], int]:
        """The next Direct batch of an instance in slot layout, or ([], wake time). With a
        ``key``, only the slots whose next request batches with the oldest one (module
        docstring)."""
        owners = self._owners[instance]
        ready = [i for i, s in enumerate(owners) if self._ready(s)]
        if not ready:
            return [], 0
        if delay_ns and len(ready) < min_utilization * self.slots_per_instance:
            oldest = min(owners[i].queue[0].enqueue_ns for i in ready)  # type: ignore[union-attr]
            if now_ns - oldest < delay_ns:
                return [], oldest + delay_ns
        if key is not None and len(ready) > 1:
            heads = {i: owners[i].queue[0] for i in ready}  # type: ignore[union-attr]
            first = min(ready, key=lambda i: heads[i].enqueue_ns)
            wanted = key(heads[first].payload)
            ready = [i for i in ready if i == first or key(heads[i].payload) == wanted]
        highest = max(i for i, s in enumerate(owners) if s is not None)
        batch: list[Dispatched[T] | None] = [None] * (highest + 1)
        for i in ready:
            seq = owners[i]
            assert seq is not None
            batch[i] = self._dispatch(seq)
        for item in batch:
            if item is not None and item[1].end:
                self._release(item[0])
        return batch, 0

    def ready_heads(self, instance: int) -> list[Dispatched[T]]:
        """Oldest strategy: dispatch the head request of every idle candidate sequence."""
        heads = [
            self._dispatch(s) for s in self._owners[instance] if s is not None and self._ready(s)
        ]
        heads.sort(key=lambda d: d[1].enqueue_ns)
        for seq, entry in heads:
            if entry.end:
                self._release(seq)
        return heads

    def complete(self, seq: LiveSequence[T], now_ns: int) -> None:
        """The dispatched request of ``seq`` finished: its next request may go (or, when it
        was the last of its sequence, the next owner of its slot)."""
        seq.busy = False
        seq.last_ns = max(seq.last_ns, now_ns)
        if seq.leaving is not None:
            self._in_flight.discard(seq.leaving)
            seq.leaving = None

    # --- idle expiry --------------------------------------------------------------------
    def reap(self, now_ns: int) -> tuple[list[CorrelationId], int]:
        """Free the slots of sequences idle for ``idle_ns``; returns (ids, next check time)."""
        reaped: list[CorrelationId] = []
        next_ns = 0
        for owners in self._owners.values():
            for seq in owners:
                if seq is None or seq.busy or seq.queue:
                    continue
                due = seq.last_ns + self.idle_ns
                if due <= now_ns:
                    reaped.append(seq.corrid)
                    self._release(seq)
                elif next_ns == 0 or due < next_ns:
                    next_ns = due
        return reaped, next_ns

    def expire_backlog(self, now_ns: int) -> tuple[list[LiveSequence[T]], int]:
        """Drop backlogged sequences past their deadline; returns them and the next deadline."""
        expired: list[LiveSequence[T]] = []
        next_ns = 0
        for seq in self.backlog:
            if not seq.expires_ns:
                continue
            if seq.expires_ns <= now_ns:
                expired.append(seq)
            elif next_ns == 0 or seq.expires_ns < next_ns:
                next_ns = seq.expires_ns
        for seq in expired:
            self.backlog.remove(seq)
            if self._live.get(seq.corrid) is seq:
                del self._live[seq.corrid]
            seq.ended = True
        return expired, next_ns

    # --- cancellation -------------------------------------------------------------------
    def cancel(self, seq: LiveSequence[T], payload: T) -> list[SeqEntry[T]] | None:
        """A request of ``seq`` was cancelled: when it still waits in the sequence's queue, the
        whole sequence is cancelled (Triton 2.51): it leaves the backlog or gives up its slot
        and its queued requests are returned (the cancelled one among them). None when the
        request is no longer queued (it runs or ran)."""
        if not any(entry.payload is payload for entry in seq.queue):
            return None
        left = list(seq.queue)
        seq.queue.clear()
        if seq.slot is None and seq in self.backlog:
            self.backlog.remove(seq)
            if self._live.get(seq.corrid) is seq:
                del self._live[seq.corrid]
            seq.ended = True
        elif not seq.ended:
            self._release(seq)
        return left

    # --- iterative sequences ------------------------------------------------------------
    def requeue(self, seq: LiveSequence[T], payload: T, now_ns: int) -> bool:
        """Put a rescheduled request back at the end of its sequence's queue (neither START
        nor END); False when the sequence no longer exists (it ended or was reaped)."""
        if seq.ended or seq.slot is None:
            return False
        seq.queue.append(SeqEntry(payload, False, False, now_ns))
        seq.last_ns = max(seq.last_ns, now_ns)
        return True

    def end(self, seq: LiveSequence[T]) -> list[SeqEntry[T]]:
        """End a sequence now (its slot goes to the backlog); returns its queued requests."""
        left = list(seq.queue)
        seq.queue.clear()
        if not seq.ended:
            self._release(seq)
        return left

    # --- internals ----------------------------------------------------------------------
    def _dispatch(self, seq: LiveSequence[T]) -> Dispatched[T]:
        seq.busy = True
        return seq, seq.queue.popleft()

    def _bind(self, seq: LiveSequence[T], free: tuple[int, int]) -> None:
        index, instance = free
        seq.slot = (instance, index)
        self._owners[instance][index] = seq

    def _release(self, seq: LiveSequence[T]) -> None:
        if self._live.get(seq.corrid) is seq:
            del self._live[seq.corrid]
        seq.ended = True
        if seq.slot is None:
            return
        instance, index = seq.slot
        if seq.busy:  # its END (or last request) was dispatched and still runs
            seq.leaving = seq.slot
            self._in_flight.add(seq.slot)
        seq.slot = None
        self._owners[instance][index] = None
        if instance not in self.retired:
            heapq.heappush(self._free, (index, instance))
        while self.backlog and self._free:
            self._bind(self.backlog.popleft(), heapq.heappop(self._free))

    def slot_owner(self, instance: int, index: int) -> CorrelationId | None:
        seq = self._owners[instance][index]
        return None if seq is None else seq.corrid

    @property
    def slotted_count(self) -> int:
        """Requests queued on sequences that hold a slot."""
        return sum(len(s.queue) for o in self._owners.values() for s in o if s is not None)

    @property
    def backlog_count(self) -> int:
        """Requests of sequences waiting for a slot."""
        return sum(len(s.queue) for s in self.backlog)

    @property
    def queued_count(self) -> int:
        slotted = sum(len(s.queue) for o in self._owners.values() for s in o if s is not None)
        return slotted + sum(len(s.queue) for s in self.backlog)
