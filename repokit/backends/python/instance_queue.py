"""The message queue of each python instance process: what the server sends it, and when.

Every message to an instance process (:mod:`repokit.backends.python.messages`) goes through
:meth:`InstanceQueues.call`, which returns the future of its reply. Per instance:

- pipelining: one message is at the process at a time, or two when the second is a batch of
  several requests (:data:`MESSAGES_IN_FLIGHT`: it waits in the process's socket, so the process
  starts it as soon as it has answered the first); a message cancelled before it was sent is
  never sent;
- merging: when a reply arrives, every ``execute`` message that queued up meanwhile goes out in
  ONE message (up to :data:`MERGE_LIMIT_BYTES` of tensors); the process still runs each batch
  on its own, in order, and the answers come back together. Not for an instance whose last
  batches took :data:`SLOW_BATCH_S` or more each: there merging saves nothing worth having and
  would hold each answer until the last batch of the message ran (Triton answers each request
  when its execution ends; with a 2 s model, L0_metrics saw the 2nd of 10 queued requests
  answered after 20 s);
- hang timers: with an execute timeout, an ``execute`` message without a reply in time has its
  process killed (the backend's ``on_hung``);
- ``--rate-limit``: an ``execute`` message goes only while the instance holds its resources
  (one batch per turn); the standard path's ``execute`` and the wire lane's ``execute_wire``
  meet here.

A process that goes away fails every message it had and every one still queued
(``ipc.ChannelClosed``). The instance records themselves (process, socket, restarts) are kept by
:mod:`repokit.backends.python.processes`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from repokit.backends.base import RateSlots
from repokit.backends.python import ipc
from repokit.backends.python.channel import Channel
from repokit.backends.python.messages import ERROR, EXECUTE, NO_TIMING, OK

# Queued batches are merged into one message up to this many tensor bytes: merging saves the
# per-message costs of small requests; large tensors gain nothing from it.
MERGE_LIMIT_BYTES = 1024 * 1024
# Batches that take this long each (wall time at the instance, per message) are sent one per
# message: a message's per-message costs are tens of microseconds.
SLOW_BATCH_S = 0.05
# Messages at an instance process at a time. A batch of several requests (the dynamic batcher's)
# may go while another message is there: it waits in the process's socket, so the process
# starts it the moment it has answered the first, without a round trip through the server.
# Single requests wait instead and go together in one merged message when the reply arrives,
# which serves more requests than sending them at once (figures in benchmarks/README.md).
MESSAGES_IN_FLIGHT = 2
# a queued message: (operation, payload, future of its reply, tensor bytes)
Queued = tuple[str, Any, "asyncio.Future[Any]", int]


class QueuedInstance(Protocol):
    """What the queue keeps on an instance record."""

    name: str
    channel: Channel | None
    queue: list[Queued]
    in_flight: int  # messages at the process whose replies have not arrived yet
    dead: bool
    # hang timers of the execute messages at the process, in the order they were sent
    timers: deque[asyncio.TimerHandle | None]
    slot: int  # its place among the model's instances (its rate-limiter slot)


class InstanceQueues:
    """The message queues of one backend's instance processes (state on each instance)."""

    def __init__(
        self,
        execute_timeout_s: float,
        on_hung: Callable[[Any], None],
        instance_at: Callable[[int], QueuedInstance | None],
    ) -> None:
        """``on_hung(instance)``: an execute message got no reply within
        ``execute_timeout_s`` (0: never); ``instance_at(slot)``: the instance in that place
        now (a restarted one takes the place of the one that asked for resources)."""
        self._execute_timeout_s = execute_timeout_s
        self._on_hung = on_hung
        self._instance_at = instance_at
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's (set on first use)
        self.rate_slots: RateSlots | None = None  # --rate-limit: the model's slots
        self._asked: set[int] = set()  # --rate-limit: places waiting for resources here
        # execute messages at each instance (by id): when each went and how many batches
        self._sent: dict[int, deque[tuple[float, int]]] = {}
        self._slow: set[int] = set()  # instances (by id) whose batches take slow_batch_s
        self.slow_batch_s = SLOW_BATCH_S

    def call(
        self, instance: QueuedInstance, op: str, payload: Any, size: int = 0
    ) -> asyncio.Future[Any]:
        """Queue one message; the future gets its reply (ChannelClosed if the process is gone).
        Messages go out one at a time; execute messages that queued up meanwhile are merged."""
        # the loop, once: asyncio.get_running_loop() costs a getpid() system call each time
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        instance.queue.append((op, payload, future, size))
        if self.rate_slots is not None:
            # a request cancelled while its message waits for resources: the wait is withdrawn
            # at once (not when the queue next moves), so others get the resources meanwhile
            future.add_done_callback(lambda done: self._cancelled(instance, done))
        in_flight = instance.in_flight
        if in_flight == 0 or (
            in_flight < MESSAGES_IN_FLIGHT
            and op == EXECUTE
            and len(instance.queue) == 1
            and type(payload) is list  # a RequestBatch (a WireItem is a tuple)
            and len(payload) > 1
            and self.rate_slots is None
        ):
            self._flush(instance)
        return future

    def fail_waiting(self, instance: QueuedInstance) -> None:
        """The process is gone: cancel its hang timers and fail the messages that wait for its
        resources (--rate-limit; messages behind one at the process fail with its reply)."""
        for timer in instance.timers:
            if timer is not None:
                timer.cancel()
        instance.timers.clear()
        if instance.queue and not instance.in_flight:
            waiting, instance.queue = instance.queue, []
            for _, _, future, _ in waiting:
                if not future.done():
                    future.set_exception(ipc.ChannelClosed(f"instance '{instance.name}' died"))

    def _cancelled(self, instance: QueuedInstance, future: asyncio.Future[Any]) -> None:
        if future.cancelled() and not instance.in_flight and not instance.dead:
            self._flush(instance)

    def _flush(self, instance: QueuedInstance) -> None:
        queue = instance.queue
        while queue and queue[0][2].done():  # cancelled before it was sent
            queue.pop(0)
        if self.rate_slots is not None and self._rate_limited(instance):
            return
        if not queue:
            return
        if queue[0][0] != EXECUTE:
            sent = [queue.pop(0)]
            message: tuple[str, Any] = (sent[0][0], sent[0][1])
        else:
            count = 1
            total = queue[0][3]
            while count < len(queue) and queue[count][0] == EXECUTE:
                total += queue[count][3]
                if total > MERGE_LIMIT_BYTES:
                    break
                count += 1
            if self.rate_slots is not None or id(instance) in self._slow:
                count = 1  # one batch per turn at the resources; or per slow batch
            sent = [item for item in queue[:count] if not item[2].done()]
            del queue[:count]
            message = (EXECUTE, [item[1] for item in sent])
        channel = instance.channel
        assert channel is not None
        if message[0] == EXECUTE:
            loop = self._loop or asyncio.get_running_loop()
            self._sent.setdefault(id(instance), deque()).append((loop.time(), len(sent)))
        instance.in_flight += 1
        if self._execute_timeout_s > 0:
            timer = None
            if message[0] == EXECUTE:
                loop = self._loop or asyncio.get_running_loop()
                timer = loop.call_later(self._execute_timeout_s, self._on_hung, instance)
            instance.timers.append(timer)
        try:
            channel.request(message, lambda reply: self._delivered(instance, sent, reply))
        except ipc.ChannelClosed as exc:
            self._delivered(instance, sent, exc)
        except Exception as exc:  # a payload that cannot be pickled
            error = f"failed to send the request(s) to model instance '{instance.name}': {exc}"
            self._delivered(instance, sent, (ERROR, error))

    def _timed(self, instance: QueuedInstance) -> None:
        """An execute message's reply arrived: whether the instance's batches are slow."""
        key = id(instance)
        sent = self._sent.get(key)
        if not sent:
            return
        sent_at, batches = sent.popleft()
        loop = self._loop or asyncio.get_running_loop()
        if (loop.time() - sent_at) / max(batches, 1) >= self.slow_batch_s:
            self._slow.add(key)
        else:
            self._slow.discard(key)

    def _rate_limited(self, instance: QueuedInstance) -> bool:
        """--rate-limit: whether the instance must wait before sending what it has queued. An
        execute message goes only while the instance holds its resources (one batch at a time,
        the only message at the process); they are asked for when one waits and given back
        when its reply arrives (or the process dies), and when the work that waited for them
        went away meanwhile."""
        slots = self.rate_slots
        slot = slots.slot(instance.slot) if slots is not None else None
        if slot is None:
            return False
        queue = instance.queue
        if not queue or queue[0][0] != EXECUTE:
            if slot.holding and instance.in_flight == 0:
                slot.release()
            elif not queue and instance.slot in self._asked:
                self._asked.discard(instance.slot)
                slot.withdraw()  # (not a wait a scheduler's worker began: that one is its own)
            return False
        if instance.in_flight:
            return True  # sent again when the reply arrives
        if slot.holding:
            return False
        index = instance.slot
        self._asked.add(index)
        slot.request(lambda: self._granted(index))
        return True

    def _granted(self, index: int) -> None:
        """The resources of the instance at ``index`` are its own: send its next batch (the
        instance there now: a restarted one took the place of the one that asked)."""
        self._asked.discard(index)
        target = self._instance_at(index)
        if target is not None and not target.dead:
            self._flush(target)
            return
        slots = self.rate_slots
        slot = slots.slot(index) if slots is not None else None
        if slot is not None:
            slot.release()

    def _delivered(self, instance: QueuedInstance, sent: list[Queued], reply: Any) -> None:
        instance.in_flight -= 1
        if sent and sent[0][0] == EXECUTE:
            self._timed(instance)
        slots = self.rate_slots
        if slots is not None and sent and sent[0][0] == EXECUTE:
            slot = slots.slot(instance.slot)
            if slot is not None:  # the execution ended: its resources go back
                slot.release()
        if instance.timers:
            timer = instance.timers.popleft()
            if timer is not None:
                timer.cancel()
        if isinstance(reply, ipc.ChannelClosed):
            instance.dead = True
            self._sent.pop(id(instance), None)
            self._slow.discard(id(instance))
            failed = sent + instance.queue
            instance.queue = []
            for _, _, future, _ in failed:
                if not future.done():
                    future.set_exception(ipc.ChannelClosed(str(reply)))
            return
        if sent[0][0] != EXECUTE:
            if not sent[0][2].done():
                sent[0][2].set_result(reply)
        elif reply[0] == OK:
            for (_, _, future, _), batch_reply in zip(sent, reply[1], strict=True):
                if not future.done():
                    future.set_result(batch_reply)
        else:
            for _, _, future, _ in sent:
                if not future.done():
                    future.set_result((ERROR, reply[1], NO_TIMING))
        if instance.queue:
            self._flush(instance)
