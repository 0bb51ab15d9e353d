"""The scheduler seam: what the core calls to run one request on a loaded model version.

A scheduler wraps a :class:`~repokit.backends.base.Backend`. ``submit`` takes one checked
request (inputs resolved, batch dimension known) and returns its result together with the
time it waited for an instance and the durations of the execution that served it. The
default scheduler (:mod:`repokit.scheduler.default`) runs each request alone on the next free
instance; the dynamic and sequence batchers implement the same interface and may combine
requests into one execution. Queues and tasks are created in ``start()``, inside the running
event loop, never in ``__init__``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable
from typing import Any, NamedTuple, Protocol, runtime_checkable

from repokit.backends.base import BackendRequest, BackendResult, Timing, WireRequest, WireRun


class CancelledInQueue(asyncio.CancelledError):
    """Raised by a scheduler's ``submit`` whose caller was cancelled while the request still
    waited in its queue (it never ran): still a cancellation for asyncio, and the core counts
    it as a failure with reason CANCELED, as Triton's schedulers answer such a request."""


# Triton 2.51 answers the requests its schedulers cancel (those queued on a cancelled or
# ended sequence) with ``Status(Status::Code::CANCELLED)`` and no message: gRPC CANCELLED with
# empty details, HTTP 400 ``{"error":""}``. Why is logged at --log-verbose 1.
CANCELLED_MESSAGE = ""


class ScheduledResult(NamedTuple):
    """One per request and execution: a tuple, the cheapest immutable record to build."""

    result: BackendResult
    queue_ns: int  # from submit() until an instance started the execution
    timing: Timing  # durations of the execution that served the request


class Scheduler(abc.ABC):
    @abc.abstractmethod
    async def start(self) -> None:
        """Create queues/tasks inside the running loop; called once before any submit()."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop accepting work; requests already submitted still complete."""

    @abc.abstractmethod
    async def submit(
        self,
        request: BackendRequest,
        batch_size: int,
        *,
        priority: int = 0,
        timeout_us: int = 0,
    ) -> ScheduledResult:
        """Run one request; ``batch_size`` is its batch dimension (0 = model does not batch).
        ``priority`` and ``timeout_us`` are the request's (only the dynamic batcher uses them)."""

    @property
    @abc.abstractmethod
    def pending_count(self) -> int:
        """Requests accepted but not yet executing (nv_inference_pending_request_count)."""

    @property
    def open_sequences(self) -> int | None:
        """Sequences started and not yet ended or idled out (a sequence batcher's count; None
        for schedulers without sequences). Triton counts them as the model's in-flight
        inferences, which a shutdown waits for."""
        return None

    # --- in-place instance updates (repokit.core.instance_update) ----------------------
    # True: add_instances and retire_instances work
    updates_instances: bool = False

    def add_instances(self, instances: list[int]) -> None:
        """Give work to these new instances of the backend too (after start())."""
        raise NotImplementedError

    def retire_instances(self, instances: list[int]) -> list[Retiring]:
        """Give these instances no new work; each one's ``done`` completes once nothing it
        was given runs or waits for it any more."""
        raise NotImplementedError


class Retiring(NamedTuple):
    instance: int
    done: asyncio.Future[None]
    # True: it still holds work that may last (a sequence batcher's sequences, until they
    # end); a load does not wait for it
    lingers: bool = False


@runtime_checkable
class WireScheduler(Protocol):
    """A scheduler that can hand a request in its protocol bytes to its backend's instances
    (the wire lane, :mod:`repokit.core.wire_lane`): the default scheduler over a backend with
    :class:`~repokit.backends.base.WireBackend`."""

    @property
    def takes_wire(self) -> bool:
        """True when :meth:`submit_wire` can run requests (started, over a wire backend)."""

    async def submit_wire(self, request: WireRequest) -> tuple[ScheduledResult, int] | None:
        """Run one request given as its bytes; with the batch size the instance found. None
        when nothing ran (the standard path then answers the request); statistics as
        :meth:`Scheduler.submit`."""


class WireTicket(NamedTuple):
    """A wire request a scheduler gave an instance (:meth:`QuickWireScheduler.send_wire`)."""

    instance: int
    enqueued: int  # time.perf_counter_ns() when it was given
    sent: Any  # what the backend sent (QuickWireBackend.send_wire)
    reply: asyncio.Future[Any]  # completes with the instance's reply


@runtime_checkable
class QuickWireScheduler(WireScheduler, Protocol):
    """A wire scheduler whose :meth:`WireScheduler.submit_wire` a caller may also drive by
    callbacks (:mod:`repokit.core.quick_wire`): ``send_wire`` gives the request to an instance
    (None: nothing sent, as ``submit_wire``'s None); once the ticket's ``reply`` is done,
    ``wire_reply`` gives the run (None: nothing ran; an awaitable for ``wire_later`` when
    the result comes later); ``wire_ended`` ends the request as ``submit_wire`` does and gives
    its scheduled result and batch size (None: nothing ran). A client that goes away before
    the reply is taken: ``wire_cancelled``; after it: ``wire_ended(ticket, None)``."""

    def send_wire(self, request: WireRequest) -> WireTicket | None: ...

    def wire_reply(self, ticket: WireTicket) -> WireRun | Awaitable[WireRun] | None: ...

    async def wire_later(self, pending: Awaitable[WireRun]) -> WireRun: ...

    def wire_ended(
        self, ticket: WireTicket, run: WireRun | None
    ) -> tuple[ScheduledResult, int] | None: ...

    def wire_cancelled(self, ticket: WireTicket) -> None: ...
