"""QuickWire (repokit.core.quick_wire): a wire-lane request finished by callbacks ends as the
coroutines end it (the scheduler's end, the version's and the server's in-flight counts, the
answer or the error), and a cancelled one is counted out once and never answered, wherever the
cancellation lands. Fakes stand in for the service and the scheduler so that every turn is
deterministic; the real lane runs in tests/e2e/test_quick_wire.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from repokit.backends.base import BackendResult, Timing, WireRun
from repokit.core.quick_wire import QuickWire
from repokit.errors import Code, RepokitError
from repokit.scheduler.base import WireTicket

RUN = WireRun(BackendResult(encoded=b"{}"), 1, Timing(1, 2, 3))


class FakeScheduler:
    def __init__(self, run: Any = RUN, ended_fails: bool = False) -> None:
        self.run = run
        self.ended_fails = ended_fails
        self.events: list[Any] = []

    def wire_reply(self, ticket: WireTicket) -> Any:
        self.events.append(("reply", ticket.reply.result()))
        return self.run

    async def wire_later(self, pending: Any) -> WireRun:
        run: WireRun = await pending
        return run

    def wire_ended(self, ticket: WireTicket, run: WireRun | None) -> Any:
        self.events.append(("ended", run))
        if self.ended_fails:
            raise RuntimeError("scheduler bug")
        return None if run is None else (("scheduled", run), run.batch_size)

    def wire_cancelled(self, ticket: WireTicket) -> None:
        self.events.append(("cancelled",))


class FakeService:
    def __init__(self, answer: Any = "encoded") -> None:
        self.answer = answer
        self.in_flight = 1
        self.standard_runs = 0

    def quick_ended(self) -> None:
        self.in_flight -= 1

    def wire_answer(self, codec: Any, loaded: Any, model: str, version: str, raw: Any,
                    ran: Any, elapsed: int) -> Any:  # fmt: skip
        if isinstance(self.answer, Exception):
            raise self.answer
        assert elapsed >= 0
        return (self.answer, ran[1])

    async def infer_decoded(self, codec: Any, loaded: Any, model: str, version: str,
                            raw: Any) -> Any:  # fmt: skip
        self.standard_runs += 1
        await asyncio.sleep(0)
        return "standard"


class FakeVersion:
    def __init__(self) -> None:
        self.inflight = 1

    def end(self) -> None:
        self.inflight -= 1


class Lane:
    """One QuickWire over the fakes, with what it answered."""

    def __init__(self, scheduler: FakeScheduler, service: FakeService) -> None:
        self.scheduler = scheduler
        self.service = service
        self.version = FakeVersion()
        self.reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers: list[Any] = []
        ticket = WireTicket(0, 0, object(), self.reply)
        self.call = QuickWire(
            service,  # type: ignore[arg-type]
            object(),  # type: ignore[arg-type]
            self.version,  # type: ignore[arg-type]
            ("model", ""),
            b"raw",
            scheduler,  # type: ignore[arg-type]
            ticket,
            0,
            self.answers.append,
        )

    def counted_out(self) -> bool:
        return self.service.in_flight == 0 and self.version.inflight == 0


async def _turns(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_reply_is_answered_and_counted_out() -> None:
    lane = Lane(FakeScheduler(), FakeService())
    lane.reply.set_result("reply")
    await _turns()
    assert lane.answers == [("encoded", 1)]
    assert lane.scheduler.events == [("reply", "reply"), ("ended", RUN)]
    assert lane.counted_out()
    assert lane.call.cancel() is False  # answered: nothing to cancel


@pytest.mark.parametrize("replied", [False, True])
async def test_a_cancelled_request_is_cancelled_at_the_instance_and_never_answered(
    replied: bool,
) -> None:
    lane = Lane(FakeScheduler(), FakeService())
    if replied:  # the reply arrived, its callback has not run yet
        lane.reply.set_result("reply")
    assert lane.call.cancel() is True
    await _turns()
    assert lane.answers == []
    assert lane.scheduler.events == [("cancelled",)]
    assert lane.reply.done()
    assert lane.reply.cancelled() is not replied
    assert lane.counted_out()
    assert lane.call.cancel() is False  # counted out once


async def test_an_error_the_answer_raises_is_the_answer() -> None:
    error = RepokitError(Code.INVALID_ARG, "bad output")
    lane = Lane(FakeScheduler(), FakeService(answer=error))
    lane.reply.set_result("reply")
    await _turns()
    assert lane.answers == [error]
    assert lane.counted_out()


async def test_a_scheduler_bug_is_answered_not_lost() -> None:
    lane = Lane(FakeScheduler(ended_fails=True), FakeService())
    lane.reply.set_result("reply")
    await _turns()
    assert len(lane.answers) == 1
    assert isinstance(lane.answers[0], RuntimeError)
    assert lane.call.cancel() is False


async def test_a_request_the_instance_does_not_take_runs_the_standard_path() -> None:
    lane = Lane(FakeScheduler(run=None), FakeService())
    lane.reply.set_result("fallback")
    await _turns()
    # counted out of the lane before the standard path (which counts itself) runs it
    assert lane.counted_out()
    assert lane.service.standard_runs == 1
    assert lane.answers == ["standard"]


async def test_a_standard_path_run_is_cancelled_with_the_request() -> None:
    lane = Lane(FakeScheduler(run=None), FakeService())
    lane.reply.set_result("fallback")
    await asyncio.sleep(0)  # the reply's callback starts the standard path's task
    assert lane.call.cancel() is True
    await _turns()
    assert lane.answers == []
    assert lane.counted_out()


async def test_a_result_sent_later_is_awaited() -> None:
    later: asyncio.Future[WireRun] = asyncio.get_running_loop().create_future()
    lane = Lane(FakeScheduler(run=later), FakeService())
    lane.reply.set_result("reply")
    await _turns()
    assert lane.answers == []
    assert not lane.counted_out()  # still in flight until the result comes
    later.set_result(RUN)
    await _turns()
    assert lane.answers == [("encoded", 1)]
    assert lane.counted_out()


async def test_a_request_cancelled_while_its_result_is_awaited_is_counted_out() -> None:
    later: asyncio.Future[WireRun] = asyncio.get_running_loop().create_future()
    lane = Lane(FakeScheduler(run=later), FakeService())
    lane.reply.set_result("reply")
    await _turns()
    assert lane.call.cancel() is True
    await _turns()
    assert lane.answers == []
    assert lane.scheduler.events[-1] == ("ended", None)  # its instance's count, once
    assert lane.counted_out()
