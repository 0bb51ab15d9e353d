"""The scheduling process's end of one worker: its calls run on the InferenceService.

Asynchronous calls (inference, streams, admission checks, model control) each run in a task,
so many are in flight and each is answered when done; a :class:`Cancel` (the worker's client
went away) or the worker's death cancels the task, which the core handles as a disconnect
(the model sees ``is_cancelled()``). A stream sends :data:`STREAM_WINDOW` items ahead of the
worker's :class:`Credit`, then waits: a slow client holds back the model's responses in the
core, not in a socket buffer. Synchronous questions come on the control socket and are
answered at once. A load or unload is answered only once every worker has acknowledged the
state snapshot that followed it (``publish``), so a client reading through another worker
sees its own writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from repokit.core.service import InferenceService
from repokit.errors import Code, RepokitError, unsupported
from repokit.frontends.workers import encoded
from repokit.frontends.workers.link import Link
from repokit.frontends.workers.messages import (
    STREAM_WINDOW,
    Ack,
    Call,
    Cancel,
    Credit,
    Failure,
    Reply,
    ServiceState,
    Snapshot,
    StreamEnd,
    StreamItem,
    VersionFacts,
    WorkerReady,
)
from repokit.protocol.types import InferRequest, InferResponse

log = logging.getLogger(__name__)

# the synchronous questions a worker may ask, answered by the service's method of that name
SYNC_METHODS = frozenset(
    {
        "server_live",
        "server_ready",
        "server_metadata",
        "model_ready",
        "model_metadata",
        "model_config",
        "model_config_json",
        "model_statistics",
        "repository_index",
        "shm_register",
        "shm_unregister",
        "shm_status",
        "log_settings",
        "update_log_settings",
        "trace_settings",
    }
)


def version_facts(service: InferenceService, name: str, version: str) -> VersionFacts:
    """What a request to ``name`` (``version``; "" the default) needs to know before it is
    decoded (raises as the core does for an unknown or unavailable version)."""
    loaded = service.manager.get(name, version)
    return VersionFacts(loaded.decoupled, loaded.wire_lane is not None)


def service_state(service: InferenceService, seq: int) -> ServiceState:
    """The snapshot of ``service`` now: every ready version by its number and each model's
    default version by ""."""
    versions: dict[tuple[str, str], VersionFacts] = {}
    names: set[str] = set()
    for loaded in service.manager.all_ready():
        names.add(loaded.name)
        versions[(loaded.name, str(loaded.version))] = VersionFacts(
            loaded.decoupled, loaded.wire_lane is not None
        )
    for name in names:
        with contextlib.suppress(RepokitError):
            versions[(name, "")] = version_facts(service, name, "")
    return ServiceState(seq, versions, service.tracing.enabled)


def retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (its waiter may be gone)."""
    if not future.cancelled():
        future.exception()


def _failure(call_id: int, exc: Exception) -> Failure:
    if isinstance(exc, RepokitError):
        return Failure.of(call_id, exc)
    log.error("worker call failed", exc_info=exc)
    return Failure(call_id, Code.INTERNAL.value, f"internal error: {type(exc).__name__}: {exc}")


class ServiceHost:
    def __init__(
        self,
        service: InferenceService,
        data: socket.socket,
        control: socket.socket,
        publish: Callable[[], Awaitable[None]],
        snapshot: Callable[[], ServiceState],
        on_lost: Callable[[], None],
    ) -> None:
        self._service = service
        self._publish = publish
        self._snapshot = snapshot
        self._on_lost = on_lost
        self._codecs = encoded.Codecs()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._credits: dict[int, asyncio.Semaphore] = {}
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._background: set[asyncio.Future[None]] = set()
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(retrieved)  # nobody may wait for it any more
        self.lost = False
        self._link = Link(data, self._on_message, self._lost)
        self._control = Link(control, self._on_control, self._lost)

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    def send(self, message: Any) -> None:
        self._link.send(message)

    def push(self, state: ServiceState) -> asyncio.Future[None]:
        """Send a snapshot; the future is done when the worker acknowledged it (or is gone)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.lost:
            future.set_result(None)
            return future
        previous = self._acks.pop(state.seq, None)
        if previous is not None and not previous.done():
            previous.set_result(None)
        self._acks[state.seq] = future
        self._link.send(Snapshot(state))
        return future

    def close(self) -> None:
        self._link.close()
        self._control.close()

    # --- messages ------------------------------------------------------------------------
    def _on_message(self, message: Any) -> None:
        kind = type(message)
        if kind is Call:
            self._start(message)
        elif kind is Credit:
            credit = self._credits.get(message.id)
            if credit is not None:
                for _ in range(message.count):
                    credit.release()
        elif kind is Cancel:
            task = self._tasks.get(message.id)
            if task is not None:
                task.cancel()
        elif kind is Ack:
            for seq in [s for s in self._acks if s <= message.seq]:
                future = self._acks.pop(seq)
                if not future.done():
                    future.set_result(None)
        elif kind is WorkerReady and not self.ready.done():
            self.ready.set_result(message.pid)

    def _on_control(self, message: Any) -> None:
        """A synchronous question: answered now (the worker waits for it)."""
        try:
            self._control.send(Reply(0, self._answer(message)))
        except Exception as exc:
            self._control.send(_failure(0, exc))

    def _answer(self, call: Call) -> Any:
        service = self._service
        if call.method in SYNC_METHODS:
            return getattr(service, call.method)(*call.args)
        if call.method == "version_facts":
            name, version = call.args
            try:
                return version_facts(service, name, version)
            except RepokitError:
                service.is_decoupled(name, version)  # the core's error for this request
                raise
        if call.method == "update_trace_settings":
            answer = service.update_trace_settings(*call.args)
            state = self._snapshot()
            task = asyncio.ensure_future(self._publish())  # the caller applies `state`
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return answer, state
        raise ValueError(f"unknown method '{call.method}'")

    def _start(self, call: Call) -> None:
        runner = self._stream if call.method in ("infer_stream", "infer_any") else self._unary
        task = asyncio.ensure_future(runner(call))
        self._tasks[call.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(call.id, None))

    async def _unary(self, call: Call) -> None:
        try:
            value = await self._run(call.method, call.args)
        except asyncio.CancelledError:
            return  # the worker no longer waits for it
        except Exception as exc:
            self._link.send(_failure(call.id, exc))
            return
        self._link.send(Reply(call.id, value))

    async def _run(self, method: str, args: tuple[Any, ...]) -> Any:
        service = self._service
        if method == "infer":
            return await service.infer(args[0])
        if method == "infer_decoded":
            return await self._infer_decoded(*args)
        if method == "infer_encoded":
            return await self._infer_encoded(*args)
        if method == "check_admission":
            await service.check_admission(args[0])
            return None
        if method == "load_model":
            try:
                await service.load_model(*args)
            finally:
                await self._publish()
            return None
        if method == "unload_model":
            try:
                await service.unload_model(*args)
            finally:
                await self._publish()
            return None
        raise ValueError(f"unknown method '{method}'")

    async def _infer_decoded(self, lane: str, limit: int, request: InferRequest) -> InferResponse:
        """A request the worker decoded; the model is checked again here (the worker's
        snapshot may predate a reload)."""
        service = self._service
        if service.is_decoupled(request.model_name, request.model_version):
            raise unsupported(self._codecs.get(lane, limit).decoupled_message)
        return await service.infer(request)

    async def _infer_encoded(
        self, lane: str, limit: int, model: str, version: str, form: Any
    ) -> Any:
        service = self._service
        codec = self._codecs.get(lane, limit)
        raw = encoded.request_of(lane, form)
        tracing = service.tracing
        trace = tracing.sample(model) if tracing.enabled else None
        try:
            out = await service.infer_encoded(codec, model, version, raw, trace)
        finally:
            if trace is not None:
                trace.finish()
        return encoded.response_form(out)

    async def _stream(self, call: Call) -> None:
        service = self._service
        responses: AsyncGenerator[InferResponse, None]
        if call.method == "infer_stream":
            responses = service.infer_stream(call.args[0])
        else:
            responses = service.infer_any(call.args[0])
        credit = self._credits[call.id] = asyncio.Semaphore(STREAM_WINDOW)
        try:
            async for response in responses:
                await credit.acquire()
                self._link.send(StreamItem(call.id, response))
            self._link.send(StreamEnd(call.id))
        except asyncio.CancelledError:
            return
        except Exception as exc:
            self._link.send(_failure(call.id, exc))
        finally:
            self._credits.pop(call.id, None)
            await responses.aclose()

    # --- the worker is gone ----------------------------------------------------------------
    def _lost(self) -> None:
        if self.lost:
            return
        self.lost = True
        self._link.close()
        self._control.close()
        for task in list(self._tasks.values()):
            task.cancel()
        for future in self._acks.values():
            if not future.done():
                future.set_result(None)
        self._acks.clear()
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("the worker exited before it was ready"))
        self._on_lost()
