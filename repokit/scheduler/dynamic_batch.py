"""Dynamic batch formation (pure, synchronous; the asyncio driver is ``dynamic_driver``).

``BatchPlanner.poll(now_ns)`` answers "what should a free instance run now?" following
Triton's ``DynamicBatchScheduler::GetDynamicBatch`` (core ``dynamic_batch_scheduler.cc``):

* requests are examined in service order (priority levels, FIFO within a level); a request
  whose batching key differs from the first one's, or that would exceed ``max_batch_size``,
  ends the examination and the pending batch is sent as it is;
* the cursor remembers the largest preferred batch size reached before the pending batch
  would exceed the largest preferred size; a preferred size that can be formed is sent at once
  (unless the queue delay is already exceeded, in which case everything pending is sent);
* with no preferred size reached: ``max_queue_delay_microseconds`` 0 sends what is pending now;
  otherwise the batch waits until the *oldest* pending request has waited that long;
* preferred sizes default to ``[max_batch_size]``; ``max_batch_size`` 0 disables batching
  (one request per execution, queue policies still apply).

The planner is pulled by free instances, so while every instance is busy the pending batch
keeps growing (as Triton's not-yet-executing payload does) up to ``max_batch_size``.
``poll_final`` answers the busy instance's question "is there a batch that can no longer
change?": one that reached ``max_batch_size`` or that the next request cannot join (another
batching key, or it would exceed the maximum). Triton's batcher hands such a saturated payload
to the instance queue at once, and so may the driver (see ``dynamic_driver``).

**The grace after a batch.** Triton's batcher hands a batch whose delay expired to the payload
queue and keeps adding requests to it until an instance starts it; with the python backend an
instance takes a while to come free after its answers went out, so the clients it answered
are often back in time to join. Our instances come free at once, so without help a closed-loop
load splits for good into groups that never meet (c=8 into two batches of 4, c=32 into two of
16), each batch waiting a whole execution for the other. So when an instance comes free with
requests pending (``instance_freed``), the pending batch may wait for as many new arrivals as
the instance just answered, for at most one ``max_queue_delay_microseconds`` or the time that
batch took to execute if longer (without the grace, those arrivals would wait one execution
behind the pending batch), but never more than :data:`GRACE_MAX_NS` beyond the queue delay:
clients come back within a round trip whatever the model's speed, and for a slow model a
grace as long as its execution held the pending requests a whole execution longer than Triton
does (L0_metrics test_dynamic_batch_scheduler: 2 s); it goes at once when it becomes full or
reaches a preferred size.
A grace that runs out of time (the answered clients did not come back: an open-loop load,
clients that think) turns the grace off for the next 4 free instances, then 8, 16, ... up to
256, and one that fills in time resets that. ``max_queue_delay_microseconds`` 0 has no grace,
and neither has a pending batch with a request that has a queue-policy timeout: the grace could
hold that request past its deadline, to be rejected (or delayed) where Triton sends it once the
oldest request waited ``max_queue_delay_microseconds`` (L0_model_queue test_priority_with_policy).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.queue_policy import PriorityQueues, PrioritySettings, QueuedItem

T = TypeVar("T")

GRACE_BACKOFF_FIRST = 4  # free instances without a grace after one that ran out of time
GRACE_BACKOFF_MAX = 256
# the longest a grace waits past max_queue_delay for the answered clients to come back (a
# client's round trip on a loaded machine, not the model's execution time)
GRACE_MAX_NS = 10_000_000


@dataclass(frozen=True)
class DynamicBatchSettings:
    max_batch_size: int = 0  # 0 = no batching
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_ns: int = 0
    preserve_ordering: bool = False
    priority: PrioritySettings = field(default_factory=PrioritySettings)

    @classmethod
    def create(
        cls,
        max_batch_size: int,
        preferred: Iterable[int] = (),
        max_queue_delay_us: int = 0,
        preserve_ordering: bool = False,
        priority: PrioritySettings | None = None,
    ) -> DynamicBatchSettings:
        sizes = sorted({int(p) for p in preferred if 0 < int(p) <= max(max_batch_size, 1)})
        if not sizes and max_batch_size > 0:
            sizes = [max_batch_size]
        return cls(
            max_batch_size=max(0, max_batch_size),
            preferred_batch_sizes=tuple(sizes),
            max_queue_delay_ns=int(max_queue_delay_us) * 1000,
            preserve_ordering=preserve_ordering,
            priority=priority or PrioritySettings(),
        )

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> DynamicBatchSettings:
        """Settings of a model with ``dynamic_batching`` (or none: the default scheduler)."""
        if not config.HasField("dynamic_batching"):
            return cls.create(0)
        db = config.dynamic_batching
        return cls.create(
            int(config.max_batch_size),
            db.preferred_batch_size,
            int(db.max_queue_delay_microseconds),
            bool(db.preserve_ordering),
            PrioritySettings.from_dynamic_batching(db),
        )

    @classmethod
    def for_oldest_sequences(cls, config: mc.ModelConfig) -> DynamicBatchSettings:
        """Settings of the per-instance batcher of the sequence batcher's Oldest strategy."""
        oldest = config.sequence_batching.oldest
        return cls.create(
            int(config.max_batch_size),
            oldest.preferred_batch_size,
            int(oldest.max_queue_delay_microseconds),
            bool(oldest.preserve_ordering),
        )

    @property
    def max_preferred(self) -> int:
        return self.preferred_batch_sizes[-1] if self.preferred_batch_sizes else 1


@dataclass
class BatchDecision(Generic[T]):
    batch: list[QueuedItem[T]] = field(default_factory=list)
    rejected: list[QueuedItem[T]] = field(default_factory=list)  # timed out (REJECT)
    wake_at_ns: int = 0  # when nothing is sent: poll again at this time (0 = on arrival only)

    @property
    def batch_size(self) -> int:
        return sum(item.batch_size for item in self.batch)


class BatchPlanner(Generic[T]):
    """The queue plus Triton's batch-formation rule; every method takes the time explicitly."""

    def __init__(self, settings: DynamicBatchSettings) -> None:
        self.settings = settings
        self.queues: PriorityQueues[T] = PriorityQueues(settings.priority)
        self._preferred = frozenset(settings.preferred_batch_sizes)
        self._grace_end_ns = 0  # 0: no grace running
        self._grace_arrivals = 0  # queues.arrivals at which the grace is over
        self._grace_skip = 0  # free instances left that get no grace
        self._grace_backoff = GRACE_BACKOFF_FIRST

    def __len__(self) -> int:
        return len(self.queues)

    def instance_freed(self, now_ns: int, answered: int, ran_ns: int = 0) -> None:
        """An instance came free after running a batch of ``answered`` requests for ``ran_ns``
        (their answers go out now): requests still pending may wait for that many arrivals
        (see the module docstring)."""
        delay_ns = self.settings.max_queue_delay_ns
        if delay_ns == 0 or self.settings.max_batch_size == 0 or answered <= 0:
            return
        if not self.queues or self.queues.closest_deadline():
            return
        if self._grace_skip:
            self._grace_skip -= 1
            return
        self._grace_end_ns = now_ns + max(delay_ns, min(ran_ns, GRACE_MAX_NS))
        self._grace_arrivals = self.queues.arrivals + answered

    def _in_grace(self, now_ns: int) -> bool:
        """Whether a grace holds the pending batch back at ``now_ns`` (ending it if not)."""
        if self.queues.arrivals >= self._grace_arrivals:
            self._grace_backoff = GRACE_BACKOFF_FIRST
        elif now_ns >= self._grace_end_ns:
            self._grace_skip = self._grace_backoff
            self._grace_backoff = min(2 * self._grace_backoff, GRACE_BACKOFF_MAX)
        else:
            return True
        self._grace_end_ns = 0
        return False

    def _take(self, count: int) -> list[QueuedItem[T]]:
        """Pop the first ``count`` requests as a batch; a batch that goes ends the grace."""
        if self._grace_end_ns:  # it filled (or reached a preferred size) in time
            self._grace_backoff = GRACE_BACKOFF_FIRST
            self._grace_end_ns = 0
        return self.queues.pop_front(count)

    def enqueue(
        self,
        payload: T,
        *,
        now_ns: int,
        batch_size: int = 1,
        priority: int = 0,
        timeout_us: int = 0,
        key: Hashable = None,
    ) -> QueuedItem[T]:
        """Queue a request; raises UNAVAILABLE ``Exceeds maximum queue size`` when full."""
        return self.queues.enqueue(
            payload,
            batch_size=max(1, batch_size),
            now_ns=now_ns,
            priority=priority,
            timeout_us=timeout_us,
            key=key,
        )

    def poll_final(self, now_ns: int) -> BatchDecision[T]:
        """A batch that can no longer grow (see the module docstring), or an empty one.
        Timed-out requests are rejected as in :meth:`poll`."""
        decision: BatchDecision[T] = BatchDecision(rejected=self.queues.expire(now_ns))
        limit = self.settings.max_batch_size
        if limit == 0 or not self.queues:
            return decision
        pending = 0
        count = 0
        first_key: Hashable = None
        for item in self.queues:
            size = item.batch_size
            if count == 0:
                first_key = item.key
            elif pending + size > limit or item.key != first_key:
                break
            pending += size
            count += 1
            if pending >= limit:
                break
        else:  # every queued request fits: the batch could still grow
            return decision
        decision.batch = self.queues.pop_front(count)
        return decision

    def poll(self, now_ns: int) -> BatchDecision[T]:
        """What a free instance should execute now (an empty batch: nothing yet)."""
        decision: BatchDecision[T] = BatchDecision(rejected=self.queues.expire(now_ns))
        if not self.queues:
            return decision
        settings = self.settings
        if settings.max_batch_size == 0:
            decision.batch = self.queues.pop_front(1)
            return decision

        max_pref = settings.max_preferred
        pending = 0
        count = 0
        best = 0
        best_count = 0
        send_now = False
        oldest_ns = now_ns
        first_key: Hashable = None
        for item in self.queues:
            size = item.batch_size
            if count == 0:
                first_key = item.key
            else:
                if pending + size > max_pref and best == 0:
                    best, best_count = pending, count
                if pending + size > settings.max_batch_size or item.key != first_key:
                    send_now = True
                    break
            pending += size
            count += 1
            oldest_ns = min(oldest_ns, item.enqueue_ns)
            if pending in self._preferred:
                best, best_count = pending, count

        delay_ns = settings.max_queue_delay_ns
        delay_exceeded = delay_ns != 0 and now_ns - oldest_ns >= delay_ns
        wake = oldest_ns + delay_ns
        if self._grace_end_ns and self._in_grace(now_ns):
            delay_exceeded = False
            wake = max(wake, self._grace_end_ns)
        if best and not delay_exceeded:
            decision.batch = self._take(best_count)
            return decision
        if send_now or pending >= max_pref or delay_exceeded or delay_ns == 0:
            decision.batch = self._take(count)
            return decision
        closest = self.queues.closest_deadline()
        if closest:
            wake = min(wake, closest)
        decision.wake_at_ns = wake
        return decision
