"""Triton's rate limiter (``--rate-limit execution_count``): an instance runs a batch only while
the resources its instance group declares are free.

``instance_group { rate_limiter { resources [{ name count global }] priority } }`` says what one
execution of an instance of the group takes. Resources are per device (an instance takes them
from the device it runs on; a KIND_CPU instance runs on device 0, as in Triton) unless
``global: true``, then every device shares one pool. The server's count of a resource is the
largest count any loaded instance needs; given any ``--rate-limit-resource NAME:COUNT[:DEVICE]``,
the counts come from those flags only (a resource no flag names has none), and a loaded
instance that needs more than there is fails its load with Triton's message. A resource may not
be both global and per device across the loaded models.

Instances waiting for their resources are served as Triton's rate limiter serves them: the one
with the lowest ``(executions so far + 1) x max(priority, 1)`` first (so an instance with
priority 2 gets half the turns of one with priority 1 when both always wait; lower value =
higher priority), ties to the lower priority value and then to the one that waited longer.
Checked against Triton 2.51: two models with priorities 1 and 2 and six requests each waiting
for one resource run as ``a a b a a b a a b b b b`` on both. Only the
first waiting instance may take resources: one that needs more than is free keeps the others
waiting behind it, so it is never starved. Instances whose group declares no resources are not
limited at all.

The schedulers call :meth:`InstanceSlot.acquire` before an instance executes a batch and
:meth:`InstanceSlot.release` when the execution ends (with an error, a crash or a cancellation
too). A backend that queues executions itself (``Backend.pipelines_executions``: the python
backend, whose standard path and wire lane meet at its message queue) asks with
:meth:`InstanceSlot.request` and releases when the instance answers. With ``--rate-limit off``
(the default) no slot exists and the schedulers test one attribute.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from repokit.errors import invalid_arg
from repokit.protocol.generated import model_config_pb2 as mc

PER_DEVICE = -1  # a --rate-limit-resource without DEVICE: every device has COUNT
GLOBAL = -2  # the pool of global resources

log = logging.getLogger(__name__)
RATE_LIMIT_MODES = ("off", "execution_count")
RESOURCE_FORMAT = (
    "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
    "'<resource_name>:<count>'. Got {}"
)

# (pool: device id or GLOBAL, resource name) -> count
Amounts = dict[tuple[int, str], int]


@dataclass(frozen=True)
class ResourceLimit:
    """One ``--rate-limit-resource``: ``count`` copies of ``name`` on ``device`` (PER_DEVICE:
    on every device; for a global resource the largest count given for the name)."""

    name: str
    count: int
    device: int = PER_DEVICE


def parse_rate_limit(value: str) -> str:
    """``--rate-limit off|execution_count``; ValueError names the flag."""
    if value not in RATE_LIMIT_MODES:
        raise ValueError(
            f"invalid argument for --rate-limit: '{value}' (expected off or execution_count)"
        )
    return value


def _number(text: str, spec: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"--rate-limit-resource: invalid {what} '{text}' in '{spec}' (an integer)"
        ) from None


def parse_resource_flag(spec: str) -> ResourceLimit:
    """``NAME:COUNT[:DEVICE]`` as tritonserver parses it; ValueError names the flag. A negative
    count or device other than -1 (every device, as no DEVICE) and an empty name are refused
    (tritonserver takes them and then never matches or never limits)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(RESOURCE_FORMAT.format(spec))
    name = parts[0]
    if not name:
        raise ValueError(f"--rate-limit-resource: the resource name is empty in '{spec}'")
    count = _number(parts[1], spec, "count")
    if count < 0:
        raise ValueError(f"--rate-limit-resource: the count must not be negative in '{spec}'")
    device = PER_DEVICE
    if len(parts) == 3:
        device = _number(parts[2], spec, "device")
        if device < PER_DEVICE:
            raise ValueError(
                f"--rate-limit-resource: the device must be -1 (every device) or a device id "
                f"in '{spec}'"
            )
    return ResourceLimit(name, count, device)


def parse_resource_flags(specs: Iterable[str]) -> tuple[ResourceLimit, ...]:
    """Every ``--rate-limit-resource``; a name given twice for one device keeps the first
    (as tritonserver does)."""
    seen: set[tuple[str, int]] = set()
    limits: list[ResourceLimit] = []
    for spec in specs:
        limit = parse_resource_flag(spec)
        if (limit.name, limit.device) not in seen:
            seen.add((limit.name, limit.device))
            limits.append(limit)
    return tuple(limits)


@dataclass(frozen=True)
class InstanceNeeds:
    """What one execution of an instance takes: ``needs`` per (pool, name)."""

    needs: tuple[tuple[tuple[int, str], int], ...]
    priority: int


def _group_needs(group: mc.ModelInstanceGroup, device: int) -> InstanceNeeds | None:
    if not group.HasField("rate_limiter") or not group.rate_limiter.resources:
        return None
    needs: Amounts = {}
    for resource in group.rate_limiter.resources:  # a name listed twice: the last one counts
        pool = GLOBAL if getattr(resource, "global") else device
        needs[(pool, resource.name)] = resource.count
    return InstanceNeeds(tuple(needs.items()), group.rate_limiter.priority)


def instance_needs(config: mc.ModelConfig, instance_count: int) -> list[InstanceNeeds | None]:
    """Per instance (in the backend's order: group by group, each GPU of a KIND_GPU group, then
    ``count`` instances), what it needs; None for an instance that is not limited."""
    laid_out: list[InstanceNeeds | None] = []
    for group in config.instance_group:
        gpu = group.kind == mc.ModelInstanceGroup.KIND_GPU and group.gpus
        for device in list(group.gpus) if gpu else [0]:
            laid_out.extend([_group_needs(group, device)] * max(group.count, 1))
    if len(laid_out) == instance_count:
        return laid_out
    # the backend runs one instance per count (no GPUs here): every instance on device 0
    counted: list[InstanceNeeds | None] = []
    for group in config.instance_group:
        counted.extend([_group_needs(group, 0)] * max(group.count, 1))
    return (counted + [None] * instance_count)[:instance_count]


class InstanceSlot:
    """One limited instance's turn at the resources: waiting, holding, or neither."""

    def __init__(self, limiter: RateLimiter, needs: InstanceNeeds) -> None:
        self._limiter = limiter
        self.needs = needs.needs
        self.priority = needs.priority
        self.executions = 0  # allocations so far (Triton's scaled priority)
        self.holding = False
        self.waiting = 0  # the sequence number of its place in the queue (0: not queued)
        self._on_grant: Callable[[], None] | None = None

    def request(self, on_grant: Callable[[], None]) -> None:
        """Queue for the resources; ``on_grant()`` runs once they are this instance's (maybe
        before ``request`` returns). Nothing happens when it is queued or holding already."""
        if self.holding or self.waiting:
            return
        self._on_grant = on_grant
        self._limiter._stage(self)

    def withdraw(self) -> None:
        """Leave the queue (the work it waited for went away)."""
        if self.waiting:
            self.waiting = 0
            self._on_grant = None
            self._limiter._allocate()  # it may have kept others waiting behind it

    async def acquire(self) -> None:
        """Wait until the resources are this instance's; cancellation leaves nothing held."""
        if self.holding:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def granted() -> None:
            if not future.done():
                future.set_result(None)

        self.request(granted)
        try:
            await future
        except BaseException:
            if self.holding:
                self.release()
            else:
                self.withdraw()
            raise

    def release(self) -> None:
        """The execution ended: give the resources back and serve whoever waits."""
        if self.holding:
            self.holding = False
            self._limiter._give_back(self)

    def _granted(self) -> None:
        self.holding = True
        self.waiting = 0
        self.executions += 1
        on_grant, self._on_grant = self._on_grant, None
        if on_grant is not None:
            on_grant()


class ModelSlots:
    """The slots of one loaded model version's instances (None: not limited)."""

    def __init__(self, slots: Sequence[InstanceSlot | None]) -> None:
        self._slots = list(slots)

    def slot(self, instance: int) -> InstanceSlot | None:
        slots = self._slots
        return slots[instance % len(slots)] if slots else None

    @property
    def slots(self) -> list[InstanceSlot | None]:
        return list(self._slots)


class RateLimiter:
    """Every loaded instance's needs, the server's resource counts, and who waits for them.
    One per server (created by the model manager, never module state)."""

    def __init__(self, explicit: Sequence[ResourceLimit] = ()) -> None:
        self._explicit = tuple(explicit)
        self._registered: list[ModelSlots] = []
        self._limits: Amounts = {}
        self._used: Amounts = {}
        self._queue: list[tuple[int, int, int, InstanceSlot]] = []
        self._order = itertools.count(1)
        self._allocating = False
        self._again = False
        self._pending_turn = False

    # --- loading -------------------------------------------------------------------------
    def register(self, needs: Sequence[InstanceNeeds | None]) -> ModelSlots:
        """Slots for a version's instances; RepokitError (INVALID_ARG, Triton's message) when
        the resources cannot serve every loaded instance."""
        slots = ModelSlots([None if n is None else InstanceSlot(self, n) for n in needs])
        limits = self._compute_limits([*self._registered, slots])
        self._registered.append(slots)
        self._limits = limits
        _log_limits(limits)
        self._allocate()
        return slots

    def unregister(self, slots: ModelSlots) -> None:
        """The version unloaded: its instances no longer count towards the resources."""
        if slots in self._registered:
            self._registered.remove(slots)
            for slot in slots.slots:
                if slot is not None:
                    slot.release()
                    slot.withdraw()
            self._limits = self._compute_limits(self._registered)
            _log_limits(self._limits)
            self._allocate()

    @property
    def limits(self) -> dict[tuple[int, str], int]:
        """The server's resource counts now, by (device or GLOBAL, name)."""
        return dict(self._limits)

    def _compute_limits(self, registered: Iterable[ModelSlots]) -> Amounts:
        largest: Amounts = {}
        for model in registered:
            for slot in model.slots:
                for key, count in slot.needs if slot is not None else ():
                    largest[key] = max(largest.get(key, 0), count)
        limits = dict(largest)
        if self._explicit:
            for (pool, name), needed in sorted(largest.items()):
                available = self._explicit_count(pool, name)
                if available < needed:
                    raise invalid_arg(
                        f'Resource count for "{name}" is limited to {available} which will '
                        "prevent scheduling of one or more model instances, the minimum "
                        f"required count is {needed}"
                    )
                limits[(pool, name)] = available
        global_names = {name for pool, name in largest if pool == GLOBAL}
        for pool, name in sorted(largest):
            if pool != GLOBAL and name in global_names:
                raise invalid_arg(
                    f'Resource "{name}" is present as both global and device-specific resource '
                    "in the model configuration."
                )
        return limits

    def _explicit_count(self, pool: int, name: str) -> int:
        named = [limit for limit in self._explicit if limit.name == name]
        if pool == GLOBAL:  # any device's count serves the global pool
            return max((limit.count for limit in named), default=0)
        for device in (pool, PER_DEVICE):
            for limit in named:
                if limit.device == device:
                    return limit.count
        return 0

    # --- turns ---------------------------------------------------------------------------
    def _stage(self, slot: InstanceSlot) -> None:
        order = next(self._order)
        slot.waiting = order
        heapq.heappush(
            self._queue,
            ((slot.executions + 1) * max(slot.priority, 1), slot.priority, order, slot),
        )
        self._allocate()

    def _give_back(self, slot: InstanceSlot) -> None:
        """Resources back; the next turn is given on the loop's next round, after the instance
        that released them queued again if it has more work (then it competes with its
        executions so far, as Triton's weighting intends, instead of always going last)."""
        used = self._used
        for key, count in slot.needs:
            used[key] -= count
        if self._pending_turn:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (plain calls): at once
            self._allocate()
            return
        self._pending_turn = True
        loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._pending_turn = False
        self._allocate()

    def _fits(self, slot: InstanceSlot) -> bool:
        limits, used = self._limits, self._used
        return all(used.get(key, 0) + count <= limits.get(key, 0) for key, count in slot.needs)

    def _allocate(self) -> None:
        """Grant the first waiting instances while their resources are free. A grant's
        callback may release or queue again: that re-runs the loop instead of recursing."""
        if self._allocating:
            self._again = True
            return
        self._allocating = True
        try:
            self._again = True
            while self._again:
                self._again = False
                queue = self._queue
                while queue:
                    head = queue[0][3]
                    if head.waiting != queue[0][2]:  # withdrawn (or queued again later)
                        heapq.heappop(queue)
                        continue
                    if not self._fits(head):
                        break
                    heapq.heappop(queue)
                    used = self._used
                    for key, count in head.needs:
                        used[key] = used.get(key, 0) + count
                    head._granted()
        finally:
            self._allocating = False


def _log_limits(limits: Amounts) -> None:
    """Triton's --log-verbose 1 map of the server's resource counts, each time they are
    computed (qa/L0_model_update reads it)."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    text = "\nMax Resource Map===>\n"
    for pool in sorted({pool for pool, _ in limits}, key=lambda p: (p != GLOBAL, p)):
        text += f"\tDevice: {'GLOBAL' if pool == GLOBAL else pool}\n"
        for (where, name), count in sorted(limits.items()):
            if where == pool:
                text += f"\t\tResource: {name}\t Count: {count}\n"
    log.debug("%s", text)
