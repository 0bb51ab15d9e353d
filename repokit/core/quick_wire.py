"""The wire lane driven by callbacks: a plain request runs without a task or coroutines.

:meth:`InferenceService.infer_encoded` runs a wire-lane request (:mod:`repokit.core.wire_lane`)
as a chain of coroutines in a task of its frontend: the task, and the frames of every layer it
passes (service, dispatch, scheduler, backend), cost a server more than the rest of the
request's work on the event loop. A frontend that can take a response by a callback asks
:meth:`InferenceService.start_quick_wire` instead: the request goes to the instance at once
(the scheduler's and backend's steps, :class:`~repokit.scheduler.base.QuickWireScheduler`), and
a :class:`QuickWire` finishes it from the reply's callback as the coroutines would, then hands
the encoded response (or the error the coroutines would raise) to the frontend.

What stays the standard lifecycle's: the in-flight counts (the server's, the version's and the
instance's), the statistics, the verbose log lines, and the answer. A client that goes away
(:meth:`QuickWire.cancel`) cancels the request at the instance as a cancelled task does and is
never answered. The rare turns that must wait go on in a task: a result the instance sends
later (a response sender used after ``execute`` returned), and a request the instance does not
take (the standard path decodes and runs it, as ``infer_encoded`` does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from repokit.backends.base import WireRun
from repokit.core.loaded_model import LoadedVersion
from repokit.core.server_log import VERBOSE
from repokit.scheduler.base import QuickWireScheduler, WireTicket

if TYPE_CHECKING:
    from repokit.core.infer_codec import InferCodec
    from repokit.core.service import InferenceService

log = logging.getLogger("repokit.core.service")  # the lines the coroutines' path logs

RawT = TypeVar("RawT")
OutT = TypeVar("OutT")
# gets the encoded response, or the exception the coroutines would have raised
QuickDone = Callable[[OutT | Exception], None]


class QuickWire(Generic[RawT, OutT]):
    """One wire-lane request under way (made by :meth:`InferenceService.start_quick_wire`)."""

    __slots__ = (
        "_codec",
        "_done",
        "_finished",
        "_later",
        "_loaded",
        "_model",
        "_raw",
        "_scheduler",
        "_service",
        "_started",
        "_ticket",
        "_version",
    )

    def __init__(
        self,
        service: InferenceService,
        codec: InferCodec[RawT, Any, OutT],
        loaded: LoadedVersion,
        names: tuple[str, str],
        raw: RawT,
        scheduler: QuickWireScheduler,
        ticket: WireTicket,
        started: int,
        done: QuickDone[OutT],
    ) -> None:
        self._service = service
        self._codec = codec
        self._loaded = loaded
        self._model, self._version = names
        self._raw = raw
        self._scheduler = scheduler
        self._ticket = ticket
        self._started = started
        self._done = done
        self._finished = False  # answered, or cancelled
        self._later: asyncio.Task[None] | None = None  # a turn that waits (module docstring)
        ticket.reply.add_done_callback(self._replied)

    def cancel(self) -> bool:
        """The client went away: the request is cancelled (at the instance too) and never
        answered. False when it was answered already."""
        if self._finished:
            return False
        later = self._later
        if later is not None:
            return later.cancel()
        self._finished = True
        reply = self._ticket.reply
        if not reply.done():
            reply.cancel()  # a message not yet sent is never sent
        self._scheduler.wire_cancelled(self._ticket)
        self._ended_cancelled()
        return True

    # --- the reply ---------------------------------------------------------------------------
    def _replied(self, reply: asyncio.Future[Any]) -> None:
        if self._finished:
            return  # cancelled
        if reply.cancelled():  # only cancel() cancels it
            self.cancel()
            return
        try:
            run = self._scheduler.wire_reply(self._ticket)
            if run is not None and not isinstance(run, WireRun):
                loop = asyncio.get_running_loop()
                self._later = loop.create_task(self._answer_later(run))
                return
            out = self._ran(run)
        except Exception as exc:  # a bug still answers (as the task's handler does)
            self._finished = True
            out = exc
        if out is not None:
            self._done(out)

    async def _answer_later(self, pending: Awaitable[WireRun]) -> None:
        try:
            run = await self._scheduler.wire_later(pending)
        except asyncio.CancelledError:
            self._finished = True
            self._scheduler.wire_ended(self._ticket, None)
            self._ended_cancelled()
            raise
        self._later = None
        try:
            out = self._ran(run)
        except Exception as exc:
            self._finished = True
            out = exc
        if out is not None:
            self._done(out)

    def _ran(self, run: WireRun | None) -> OutT | Exception | None:
        """The request's end as the coroutines end it, and its answer (None: the standard path
        answers it)."""
        ran = self._scheduler.wire_ended(self._ticket, run)
        loaded = self._loaded
        loaded.end()
        elapsed = time.perf_counter_ns() - self._started
        service = self._service
        service.quick_ended()
        if ran is None:  # the instance did not take it: the standard path runs it
            self._later = asyncio.get_running_loop().create_task(self._standard())
            return None
        self._finished = True
        try:
            return service.wire_answer(
                self._codec, loaded, self._model, self._version, self._raw, ran, elapsed
            )
        except Exception as exc:
            return exc

    async def _standard(self) -> None:
        try:
            out = await self._service.infer_decoded(
                self._codec, self._loaded, self._model, self._version, self._raw
            )
        except asyncio.CancelledError:
            self._finished = True
            raise
        except Exception as exc:
            self._finished = True
            self._done(exc)
            return
        self._finished = True
        self._done(out)

    def _ended_cancelled(self) -> None:
        """A request cancelled while it waited for its instance, counted out as the coroutines
        count it."""
        self._loaded.end()
        self._service.quick_ended()
        if log.isEnabledFor(VERBOSE):
            log.debug("[request id: <id_unknown>] cancelled: the client went away")
