"""The scheduling process's end of one worker: its calls run on the InferenceService.

Asynchronous calls (inference, streams, admission checks, model control) each run in a task,
so many are in flight and each is answered when done; a :class:`Cancel` (the worker's client
went away) or the worker's death cancels the task, which the core handles as a disconnect
(the model sees ``is_cancelled()``). A stream sends :data:`STREAM_WINDOW` items ahead of the
worker's :class:`Credit`, then waits: a slow client holds back the model's responses in the
core, not in a socket buffer. Synchronous questions come on the control socket and are
answered at once. A load or unload is answered only once every worker has acknowledged the
state snapshot that followed it (``publish``), so a client reading through another worker
sees its own writes; a change of the trace settings likewise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from repokit.core.service import InferenceService
from repokit.core.tracing.trace import Trace
from repokit.errors import Code, RepokitError, unsupported
from repokit.frontends.workers import encoded
from repokit.frontends.workers.link import Link
from repokit.frontends.workers.messages import (
    STREAM_WINDOW,
    Ack,
    Call,
    Cancel,
    ClientsGone,
    Credit,
    Failure,
    Reply,
    ServiceState,
    Snapshot,
    StreamEnd,
    StreamItem,
    TraceEnd,
    VersionFacts,
    WorkerFailed,
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
        "model_config_json",
        "output_labels",
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


class WorkerStartFailed(ValueError):
    """A worker could not start serving; the message says why (as one process would)."""


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
        publish: Callable[[ServiceHost | None], Awaitable[ServiceState]],
        on_lost: Callable[[], None],
    ) -> None:
        self._service = service
        self._publish = publish
        self._on_lost = on_lost
        self._codecs = encoded.Codecs()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._credits: dict[int, asyncio.Semaphore] = {}
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self._traces: dict[int, Trace] = {}  # traced calls answered, until their TraceEnd
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(retrieved)  # nobody may wait for it any more
        # stopping: the worker's HTTP clients are gone (ClientsGone, or the worker is)
        self.clients_gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
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
        elif kind is TraceEnd:
            self._trace_end(message)
        elif kind is Ack:
            for seq in [s for s in self._acks if s <= message.seq]:
                future = self._acks.pop(seq)
                if not future.done():
                    future.set_result(None)
        elif kind is ClientsGone:
            if not self.clients_gone.done():
                self.clients_gone.set_result(None)
        elif kind is WorkerReady and not self.ready.done():
            self.ready.set_result(message.pid)
        elif kind is WorkerFailed and not self.ready.done():
            self.ready.set_exception(WorkerStartFailed(message.message))

    def _on_control(self, message: Any) -> None:
        """A synchronous question: answered now (the worker waits for it); a change of the
        trace settings once every other worker has the snapshot that says whether tracing
        is on (the caller applies it from the answer)."""
        if message.method == "update_trace_settings":
            try:
                answer = self._service.update_trace_settings(*message.args)
            except Exception as exc:
                self._control.send(_failure(0, exc))
                return
            task = asyncio.ensure_future(self._answer_after_publish(answer))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
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
        if call.method == "model_config_bytes":  # the message as bytes (it pickles badly)
            return service.model_config(*call.args).SerializeToString()
        raise ValueError(f"unknown method '{call.method}'")

    async def _answer_after_publish(self, answer: Any) -> None:
        state = await self._publish(self)
        self._control.send(Reply(0, (answer, state)))

    def _start(self, call: Call) -> None:
        runner = self._stream if call.method in ("infer_stream", "infer_any") else self._unary
        task = asyncio.ensure_future(runner(call))
        self._tasks[call.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(call.id, None))

    async def _unary(self, call: Call) -> None:
        try:
            if call.method == "infer_traced":
                value = await self._infer_traced(call.id, *call.args)
            else:
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
                await self._publish(None)
            return None
        if method == "unload_model":
            try:
                await service.unload_model(*args)
            finally:
                await self._publish(None)
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
        codec = self._codecs.get(lane, limit)
        raw = encoded.request_of(lane, form)
        out = await self._service.infer_encoded(codec, model, version, raw)
        return encoded.response_form(out)

    async def _infer_traced(
        self,
        call_id: int,
        lane: str,
        limit: int,
        model: str,
        version: str,
        form: Any,
        traceparent: str | None,
        stamps: list[tuple[str, int]],
    ) -> tuple[Any, bool]:
        """A request the worker would have sampled: sampled here (the rate counts requests
        server-wide) with the worker's timestamps; a trace taken stays open for the worker's
        :class:`TraceEnd` (its send timestamps), or until the request fails."""
        service = self._service
        tracing = service.tracing
        trace = tracing.sample(model, traceparent) if tracing.enabled else None
        if trace is None:
            return await self._infer_encoded(lane, limit, model, version, form), False
        for name, ns in stamps:
            trace.stamp(name, ns)
        codec = self._codecs.get(lane, limit)
        try:
            raw = encoded.request_of(lane, form)
            out = await service.infer_encoded(codec, model, version, raw, trace)
        except BaseException:
            trace.finish()
            raise
        self._traces[call_id] = trace
        return encoded.response_form(out), True

    def _trace_end(self, message: TraceEnd) -> None:
        trace = self._traces.pop(message.id, None)
        if trace is not None:
            for name, ns in message.stamps:
                trace.stamp(name, ns)
            trace.finish()

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
        traces, self._traces = self._traces, {}
        for trace in traces.values():
            trace.finish()
        if not self.ready.done():
            self.ready.set_exception(WorkerStartFailed("a frontend worker exited while starting"))
        if not self.clients_gone.done():
            self.clients_gone.set_result(None)
        self._on_lost()
