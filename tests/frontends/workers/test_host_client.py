"""ServiceClient over ServiceHost over a real InferenceService (tests/core's NumpyBackend), both
ends on one loop: answers and errors are the core's; a cancelled call and a worker that goes
away cancel the request in the core; a load is answered only once every worker acknowledged
the snapshot that followed it; a stream waits for credit; a stale snapshot never changes an
answer. The synchronous questions block their caller, so tests ask them from a thread."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repokit.core.compose import build_service
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings
from repokit.errors import Code, RepokitError
from repokit.frontends.http.infer_codec import DECOUPLED_MESSAGE, HttpInferBody, HttpInferCodec
from repokit.frontends.workers.client import ServiceClient
from repokit.frontends.workers.host import ServiceHost, service_state
from repokit.frontends.workers.link import Link
from repokit.frontends.workers.messages import (
    STREAM_WINDOW,
    Ack,
    Call,
    Cancel,
    Credit,
    ServiceState,
    Snapshot,
    StreamEnd,
    StreamItem,
    VersionFacts,
)
from repokit.protocol.types import InferRequest, InputSpec
from tests.core.conftest import Controls, backend_factory, build_repository


class Pair:
    """A host and a client joined by two socketpairs; ``others`` are extra workers' links that
    a test acknowledges snapshots for by hand."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.seq = 0
        self.lost = 0
        self.others: list[ServiceHost] = []
        data, data_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        control, control_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.host = ServiceHost(service, data, control, self.publish, self._on_lost)
        self.client = ServiceClient(ServerSettings(), data_w, control_w)

    def _on_lost(self) -> None:
        self.lost += 1

    def snapshot(self) -> ServiceState:
        self.seq += 1
        return service_state(self.service, self.seq)

    async def publish(self, skip: ServiceHost | None = None) -> ServiceState:
        state = self.snapshot()
        hosts = [h for h in (self.host, *self.others) if h is not skip]
        await asyncio.gather(*(h.push(state) for h in hosts))
        return state

    def close(self) -> None:
        self.client.close()
        self.host.close()


@pytest.fixture
def controls() -> Controls:
    return Controls()


@pytest.fixture
async def service(tmp_path: Path, controls: Controls) -> AsyncIterator[InferenceService]:
    repo = build_repository(tmp_path)
    settings = ServerSettings(
        repositories=[repo], model_control_mode="explicit", load_models=["add_sub", "decoupled"]
    )
    svc = build_service(settings, backend_factory(controls))
    await svc.start()
    yield svc
    await svc.stop()


@pytest.fixture
async def pair(service: InferenceService) -> AsyncIterator[Pair]:
    made = Pair(service)
    await made.publish()
    yield made
    made.close()


def add_sub(a: float = 1.0, b: float = 2.0) -> InferRequest:
    def spec(name: str, value: float) -> InputSpec:
        return InputSpec(name, "FP32", (1, 16), np.full((1, 16), value, dtype=np.float32))

    return InferRequest("add_sub", inputs=[spec("INPUT0", a), spec("INPUT1", b)])


async def eventually(predicate: Any, timeout: float = 10.0) -> bool:
    """Whether ``predicate()`` holds within ``timeout`` (checked every loop turn or so)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def core_error(call: Any) -> RepokitError:
    with pytest.raises(RepokitError) as caught:
        await call
    return caught.value


async def test_infer_and_statistics_are_the_cores(pair: Pair) -> None:
    response = await pair.client.infer(add_sub(1, 2))
    out = {t.name: t.data for t in response.outputs}
    np.testing.assert_array_equal(out["OUTPUT0"], np.full((1, 16), 3, np.float32))
    np.testing.assert_array_equal(out["OUTPUT1"], np.full((1, 16), -1, np.float32))
    stats = await asyncio.to_thread(pair.client.model_statistics, "add_sub")
    assert stats == pair.service.model_statistics("add_sub")
    assert stats["model_stats"][0]["inference_count"] == 1


async def test_errors_cross_with_the_cores_code_and_message(pair: Pair) -> None:
    request = InferRequest("nope")
    direct = await core_error(pair.service.infer(request))
    through = await core_error(pair.client.infer(request))
    assert (through.code, through.message) == (direct.code, direct.message)
    with pytest.raises(RepokitError) as asked:
        await asyncio.to_thread(pair.client.model_metadata, "nope")
    with pytest.raises(RepokitError) as core:
        pair.service.model_metadata("nope")
    assert (asked.value.code, asked.value.message) == (core.value.code, core.value.message)
    # a version the snapshot does not name is asked about: the core's error
    with pytest.raises(RepokitError) as facts:
        await asyncio.to_thread(pair.client.is_decoupled, "add_sub", "7")
    with pytest.raises(RepokitError) as core_facts:
        pair.service.is_decoupled("add_sub", "7")
    assert (facts.value.code, facts.value.message) == (
        core_facts.value.code,
        core_facts.value.message,
    )


async def test_a_cancelled_call_cancels_the_request_in_the_core(
    pair: Pair, controls: Controls
) -> None:
    controls.gate = asyncio.Event()
    controls.started = asyncio.Event()
    task = asyncio.ensure_future(pair.client.infer(add_sub()))
    await asyncio.wait_for(controls.started.wait(), 10)
    request = controls.seen[-1]
    assert request.control is not None and not request.control.cancelled
    task.cancel()
    assert await eventually(lambda: request.control.cancelled)
    controls.gate.set()
    assert await eventually(lambda: pair.host.inflight == 0 and pair.service.inflight_requests == 0)


async def test_a_worker_that_goes_away_cancels_its_requests(pair: Pair, controls: Controls) -> None:
    controls.gate = asyncio.Event()
    controls.started = asyncio.Event()
    task = asyncio.ensure_future(pair.client.infer(add_sub()))
    await asyncio.wait_for(controls.started.wait(), 10)
    request = controls.seen[-1]
    pair.client.close()  # as a worker process that dies: its sockets close
    error = await core_error(task)
    assert error.code is Code.UNAVAILABLE and "scheduling process is gone" in error.message
    assert await eventually(lambda: pair.lost == 1 and pair.host.lost)
    assert request.control is not None
    assert await eventually(lambda: request.control.cancelled)
    controls.gate.set()


async def test_a_client_that_leaves_its_host_fails_new_calls(pair: Pair) -> None:
    pair.host.close()  # the scheduling process is gone
    await asyncio.wait_for(pair.client.lost.wait(), 10)
    error = await core_error(pair.client.infer(add_sub()))
    assert (error.code, error.message) == (Code.UNAVAILABLE, "the scheduling process is gone")
    with pytest.raises(RepokitError, match="scheduling process is gone"):
        await asyncio.to_thread(pair.client.server_live)


async def test_a_load_is_answered_after_every_worker_acknowledged(
    service: InferenceService,
) -> None:
    pair = Pair(service)
    other_data, other_worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    other_control, other_control_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    snapshots: asyncio.Queue[Snapshot] = asyncio.Queue()
    other = ServiceHost(service, other_data, other_control, pair.publish, lambda: None)
    pair.others.append(other)
    slow = Link(other_worker, lambda m: snapshots.put_nowait(m), lambda: None)
    try:
        assert ("identity", "") not in pair.client.state.versions
        load = asyncio.ensure_future(pair.client.load_model("identity"))
        snapshot = await asyncio.wait_for(snapshots.get(), 30)
        assert ("identity", "") in snapshot.state.versions
        await asyncio.sleep(0.2)
        assert not load.done()  # the other worker has not acknowledged it
        assert ("identity", "") in pair.client.state.versions  # this one has
        slow.send(Ack(snapshot.state.seq))
        await asyncio.wait_for(load, 10)
        # an unload the same way: the other worker's snapshot no longer names it
        unload = asyncio.ensure_future(pair.client.unload_model("identity"))
        snapshot = await asyncio.wait_for(snapshots.get(), 30)
        assert ("identity", "") not in snapshot.state.versions
        assert not unload.done()
        slow.close()  # a worker that dies does not hold the answer back
        await asyncio.wait_for(unload, 10)
        assert ("identity", "") not in pair.client.state.versions
    finally:
        slow.close()
        other_control_w.close()
        other.close()
        pair.close()


async def test_a_stale_snapshot_never_changes_an_answer(pair: Pair) -> None:
    """The snapshot says 'decoupled' is not decoupled (as after a reload the worker has not
    heard of yet): the scheduling process checks again and refuses as the core does."""
    stale = dict(pair.client.state.versions)
    stale[("decoupled", "")] = VersionFacts(decoupled=False, wire_lane=False)
    pair.client.apply(ServiceState(pair.client.state.seq + 1, stale))
    codec = HttpInferCodec(1 << 20)
    body = b'{"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[1]}]}'
    error = await core_error(
        pair.client.infer_encoded(codec, "decoupled", "", HttpInferBody(body, None))
    )
    assert (error.code, error.message) == (Code.UNSUPPORTED, DECOUPLED_MESSAGE)
    # and an older snapshot arriving late is not applied over a newer one
    pair.client.apply(ServiceState(1, {}))
    assert pair.client.state.versions == stale


class StreamingService:
    """The service's stream methods only: ``count`` responses, recording how many were taken."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.taken = 0
        self.closed = asyncio.Event()

    async def infer_any(self, request: Any) -> AsyncGenerator[int, None]:
        try:
            for index in range(self.count):
                self.taken += 1
                yield index
        finally:
            self.closed.set()


async def test_a_stream_waits_for_credit_and_a_cancel_ends_it() -> None:
    service = StreamingService(100)
    data, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    control, control_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    async def publish(skip: ServiceHost | None = None) -> ServiceState:
        return ServiceState()

    host = ServiceHost(service, data, control, publish, lambda: None)  # type: ignore[arg-type]
    received: asyncio.Queue[Any] = asyncio.Queue()
    link = Link(worker, received.put_nowait, lambda: None)
    try:
        link.send(Call(9, "infer_any", (None,)))
        items = [await asyncio.wait_for(received.get(), 10) for _ in range(STREAM_WINDOW)]
        assert [i.value for i in items] == list(range(STREAM_WINDOW))
        await asyncio.sleep(0.2)
        assert received.empty()  # no credit: nothing more is sent ...
        assert service.taken == STREAM_WINDOW + 1  # ... and the model is held at the next one
        link.send(Credit(9, 2))
        more = [await asyncio.wait_for(received.get(), 10) for _ in range(2)]
        assert [m.value for m in more] == [STREAM_WINDOW, STREAM_WINDOW + 1]
        link.send(Call(10, "infer_any", (None,)))  # a second stream runs beside it
        second = await asyncio.wait_for(received.get(), 10)
        assert isinstance(second, StreamItem) and second.id == 10
        link.send(Cancel(9))
        await asyncio.wait_for(service.closed.wait(), 10)
        assert host.inflight == 1  # the cancelled stream is gone, the second one waits
        assert all(not isinstance(m, StreamEnd) for m in [*items, *more])
    finally:
        link.close()
        control_w.close()
        host.close()
