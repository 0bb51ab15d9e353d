"""Priority levels and queue policies of the dynamic batcher (pure, no asyncio).

Mirrors Triton's ``PriorityQueue``/``PolicyQueue`` (core ``scheduler_utils.cc``):

* ``priority_levels`` N creates levels 1..N, a lower number is served first; priority 0 or a
  priority above N uses ``default_priority_level``. Without levels there is one queue.
* each level has a policy (``priority_queue_policy[level]`` or ``default_queue_policy``):
  ``max_queue_size`` (0 = unlimited) is checked at enqueue and fails at once with UNAVAILABLE
  ``Exceeds maximum queue size``; ``default_timeout_microseconds`` gives each request a deadline,
  which a request's own timeout may only shorten (``allow_timeout_override``, non-zero and
  smaller); past its deadline a queued request is rejected (REJECT, UNAVAILABLE
  ``Request timeout expired``) or moved to the level's delayed queue (DELAY), which is served
  after the level's other requests.

Service order is: level 1 queue, level 1 delayed queue, level 2 queue, ... Batches are always
taken as a prefix of that order.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from repokit.errors import RepokitError, unavailable
from repokit.protocol.generated import model_config_pb2 as mc

T = TypeVar("T")

QUEUE_FULL_MESSAGE = "Exceeds maximum queue size"
TIMEOUT_MESSAGE = "Request timeout expired"


@dataclass(frozen=True)
class QueuePolicy:
    delay_on_timeout: bool = False  # timeout_action DELAY (else REJECT)
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    @classmethod
    def from_proto(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
            default_timeout_us=int(policy.default_timeout_microseconds),
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=int(policy.max_queue_size),
        )

    def timeout_us(self, request_timeout_us: int) -> int:
        """The effective timeout of a request (0 = none), as Triton's PolicyQueue::Enqueue."""
        if (
            self.allow_timeout_override
            and request_timeout_us != 0
            and request_timeout_us < self.default_timeout_us
        ):
            return request_timeout_us
        return self.default_timeout_us


@dataclass(eq=False, slots=True)
class QueuedItem(Generic[T]):
    """One queued request: ``payload`` is opaque to the queue."""

    payload: T
    batch_size: int
    enqueue_ns: int
    deadline_ns: int = 0  # 0 = no deadline
    level: int = 0
    key: Hashable = None  # requests batch together only when their keys are equal


@dataclass
class _Level(Generic[T]):
    policy: QueuePolicy
    queue: deque[QueuedItem[T]] = field(default_factory=deque)
    delayed: deque[QueuedItem[T]] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


@dataclass(frozen=True)
class PrioritySettings:
    levels: int = 0  # priority_levels (0 = a single level)
    default_level: int = 0
    default_policy: QueuePolicy = QueuePolicy()
    level_policies: tuple[tuple[int, QueuePolicy], ...] = ()

    @classmethod
    def from_dynamic_batching(cls, db: mc.ModelDynamicBatching) -> PrioritySettings:
        return cls(
            levels=int(db.priority_levels),
            default_level=int(db.default_priority_level),
            default_policy=QueuePolicy.from_proto(db.default_queue_policy),
            level_policies=tuple(
                (int(level), QueuePolicy.from_proto(policy))
                for level, policy in sorted(db.priority_queue_policy.items())
            ),
        )


class PriorityQueues(Generic[T]):
    """Requests waiting for a batch, by priority level, with timeouts applied on demand.

    Levels are kept sparse, as Triton's PriorityQueue keeps them: the levels with their own
    policy always exist, any other level exists while it holds requests (``priority_levels``
    may be as large as 2**64 - 1)."""

    def __init__(self, settings: PrioritySettings) -> None:
        self._settings = settings
        if settings.levels:
            self._kept = dict(settings.level_policies)
            policies = [settings.default_policy, *self._kept.values()]
        else:
            self._kept = {0: settings.default_policy}
            policies = [settings.default_policy]
        self._levels: dict[int, _Level[T]] = {n: _Level(p) for n, p in sorted(self._kept.items())}
        self._order: list[int] = sorted(self._levels)  # level numbers in service order
        self._has_timeouts = any(policy.default_timeout_us > 0 for policy in policies)
        self._size = 0
        self.arrivals = 0  # requests ever queued (the batch-forming grace counts them)

    def level_index(self, priority: int) -> int:
        """The level of a request priority (Triton's SetPriority rule), 0 without levels."""
        levels = self._settings.levels
        if levels == 0:
            return 0
        if priority == 0 or priority > levels:
            priority = self._settings.default_level or 1
        return priority

    def _level(self, number: int) -> _Level[T]:
        level = self._levels.get(number)
        if level is None:
            level = self._levels[number] = _Level(self._settings.default_policy)
            insort(self._order, number)
        return level

    def _forget_if_empty(self, number: int) -> None:
        if number not in self._kept and not self._levels[number]:
            del self._levels[number]
            self._order.remove(number)

    def enqueue(
        self,
        payload: T,
        *,
        batch_size: int,
        now_ns: int,
        priority: int = 0,
        timeout_us: int = 0,
        key: Hashable = None,
    ) -> QueuedItem[T]:
        """Queue a request; raises UNAVAILABLE at once when its level is full."""
        number = self.level_index(priority) if self._settings.levels else 0
        level = self._levels.get(number) or self._level(number)
        policy = level.policy
        if policy.max_queue_size and len(level) >= policy.max_queue_size:
            raise unavailable(QUEUE_FULL_MESSAGE)
        deadline_ns = 0
        if policy.default_timeout_us:
            deadline_ns = now_ns + policy.timeout_us(timeout_us) * 1000
        item = QueuedItem(payload, batch_size, now_ns, deadline_ns, number, key)
        level.queue.append(item)
        self._size += 1
        self.arrivals += 1
        return item

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[QueuedItem[T]]:
        """Every queued request in service order."""
        for number in self._order:
            level = self._levels[number]
            yield from level.queue
            yield from level.delayed

    def pop_front(self, count: int) -> list[QueuedItem[T]]:
        """Remove and return the first ``count`` requests in service order."""
        taken: list[QueuedItem[T]] = []
        emptied: list[int] = []
        for number in self._order:
            level = self._levels[number]
            for dq in (level.queue, level.delayed):
                while dq and len(taken) < count:
                    taken.append(dq.popleft())
            if not level:
                emptied.append(number)
            if len(taken) >= count:
                break
        for number in emptied:
            self._forget_if_empty(number)
        self._size -= len(taken)
        return taken

    def remove(self, item: QueuedItem[T]) -> bool:
        """Remove one request (e.g. cancelled); False when it is no longer queued."""
        level = self._levels.get(item.level)
        if level is None:
            return False
        for dq in (level.queue, level.delayed):
            try:
                dq.remove(item)
            except ValueError:
                continue
            self._size -= 1
            self._forget_if_empty(item.level)
            return True
        return False

    def expire(self, now_ns: int) -> list[QueuedItem[T]]:
        """Apply timeouts: return the rejected requests, move DELAY ones to the delayed queue."""
        if not self._has_timeouts or self._size == 0:
            return []
        rejected: list[QueuedItem[T]] = []
        for number in list(self._order):
            level = self._levels[number]
            if level.policy.default_timeout_us == 0 or not level.queue:
                continue
            if not any(0 < item.deadline_ns <= now_ns for item in level.queue):
                continue
            kept: deque[QueuedItem[T]] = deque()
            for item in level.queue:
                if 0 < item.deadline_ns <= now_ns:
                    if level.policy.delay_on_timeout:
                        item.deadline_ns = 0
                        level.delayed.append(item)
                    else:
                        rejected.append(item)
                else:
                    kept.append(item)
            level.queue = kept
            self._forget_if_empty(number)
        self._size -= len(rejected)
        return rejected

    def closest_deadline(self) -> int:
        """The earliest pending deadline in ns, 0 when none."""
        if not self._has_timeouts:
            return 0
        deadlines = [
            item.deadline_ns
            for level in self._levels.values()
            for item in level.queue
            if item.deadline_ns
        ]
        return min(deadlines) if deadlines else 0


def timeout_error() -> RepokitError:
    return unavailable(TIMEOUT_MESSAGE)
