"""The worker's InferenceService: the same methods the frontends call, forwarded to the
scheduling process (:mod:`.host`).

Inference, streams, admission checks and model control are asynchronous calls over the data
link (many in flight, answered in any order; a caller that goes away sends :class:`Cancel`).
The frontends' synchronous questions (statistics, metadata, configs, the repository index,
shared-memory registrations, log and trace settings) are asked over a second socket and
waited for: the scheduling process answers them from its loop without waiting on anything, in
microseconds. What every infer request needs (is the model decoupled, does it have a wire
lane, is tracing on) comes from the state snapshot the scheduling process pushes after each
change; a version the snapshot does not name is asked about.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import AsyncGenerator
from typing import Any

from repokit.backends.python import ipc
from repokit.core.infer_codec import InferCodec
from repokit.core.settings import ServerSettings
from repokit.core.wire_lane import WIRE_LANE_MAX_BYTES
from repokit.errors import RepokitError, unavailable, unsupported
from repokit.frontends.workers import encoded
from repokit.frontends.workers.host import retrieved
from repokit.frontends.workers.link import Link
from repokit.frontends.workers.messages import (
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
    TraceEnd,
    VersionFacts,
)
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferRequest, InferResponse

GONE = "the scheduling process is gone"
_END = object()


class WorkerTrace:
    """A request the scheduling process may trace (it samples, so the rate counts requests
    server-wide): the frontend's timestamps, sent with the call and, after the answer, with
    :class:`TraceEnd` when the scheduling process took the trace."""

    def __init__(self, client: ServiceClient, traceparent: str | None) -> None:
        self._client = client
        self.traceparent = traceparent
        self.stamps: list[tuple[str, int]] = []
        self.call_id = 0  # set when it crosses, kept when the scheduling process traces it

    def stamp(self, name: str, ns: int | None = None) -> None:
        self.stamps.append((name, time.monotonic_ns() if ns is None else ns))

    def taken(self) -> list[tuple[str, int]]:
        stamps, self.stamps = self.stamps, []
        return stamps

    def finish(self) -> None:
        if self.call_id:
            self._client.send(TraceEnd(self.call_id, self.taken()))
            self.call_id = 0


class WorkerTracing:
    """The frontends' view of tracing in a worker: on while the scheduling process traces
    any model; every request is then a :class:`WorkerTrace` for it to sample."""

    def __init__(self, client: ServiceClient) -> None:
        self._client = client

    @property
    def enabled(self) -> bool:
        return self._client.state.tracing

    def sample(self, model: str, traceparent: str | None = None) -> WorkerTrace:
        return WorkerTrace(self._client, traceparent)


class _Stream:
    """A stream's answers as they arrive (StreamItem values, then _END or a RepokitError)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()


class ServiceClient:
    def __init__(
        self, settings: ServerSettings, data: socket.socket, control: socket.socket
    ) -> None:
        self.settings = settings
        self.tracing = WorkerTracing(self)
        self.state = ServiceState()
        self._link = Link(data, self._on_message, self._on_lost)
        control.setblocking(True)
        self._control = ipc.BlockingChannel(control)
        self._control_sock = control
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._streams: dict[int, _Stream] = {}
        self.lost = asyncio.Event()
        self._first: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._first.add_done_callback(retrieved)  # nobody may wait for it any more

    async def first_message(self) -> Any:
        """The first message the scheduling process sends (WorkerStart)."""
        return await self._first

    @property
    def inflight(self) -> int:
        return len(self._calls) + len(self._streams)

    def running(self) -> frozenset[int]:
        """The ids of the calls and streams under way now."""
        return frozenset(self._calls).union(self._streams)

    def any_running(self, ids: frozenset[int]) -> bool:
        """Whether any of ``ids`` (from :meth:`running`) is still under way."""
        return any(i in self._calls or i in self._streams for i in ids)

    def send(self, message: Any) -> None:
        self._link.send(message)

    def close(self) -> None:
        self._link.close()
        self._control_sock.close()

    # --- the link ------------------------------------------------------------------------
    def _on_message(self, message: Any) -> None:
        kind = type(message)
        if kind is Reply or kind is Failure:
            future = self._calls.pop(message.id, None)
            if future is not None and not future.done():
                future.set_result(message)
            else:
                stream = self._streams.get(message.id)
                if stream is not None:  # a stream's failure
                    stream.queue.put_nowait(message.error())
        elif kind is StreamItem:
            stream = self._streams.get(message.id)
            if stream is not None:
                stream.queue.put_nowait(message.value)
        elif kind is StreamEnd:
            stream = self._streams.get(message.id)
            if stream is not None:
                stream.queue.put_nowait(_END)
        elif kind is Snapshot:
            self.apply(message.state)
            self._link.send(Ack(message.state.seq))
        elif not self._first.done():
            self._first.set_result(message)

    def apply(self, state: ServiceState) -> None:
        if state.seq >= self.state.seq:
            self.state = state

    def _on_lost(self) -> None:
        error = unavailable(GONE)
        calls, self._calls = self._calls, {}
        for future in calls.values():
            if not future.done():
                future.set_exception(error)
        for stream in self._streams.values():
            stream.queue.put_nowait(error)
        if not self._first.done():
            self._first.set_exception(error)
        self.lost.set()

    async def _call(self, method: str, *args: Any, trace: WorkerTrace | None = None) -> Any:
        if self._link.closed:
            raise unavailable(GONE)
        call_id = next(self._ids)
        if trace is not None:
            trace.call_id = call_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        self._link.send(Call(call_id, method, args))
        try:
            answer = await future
        except asyncio.CancelledError:
            if self._calls.pop(call_id, None) is not None:
                self._link.send(Cancel(call_id))
            raise
        if type(answer) is Failure:
            raise answer.error()
        return answer.value

    async def _stream(self, method: str, *args: Any) -> AsyncGenerator[Any, None]:
        if self._link.closed:
            raise unavailable(GONE)
        call_id = next(self._ids)
        stream = self._streams[call_id] = _Stream()
        self._link.send(Call(call_id, method, args))
        ended = False
        try:
            while True:
                item = await stream.queue.get()
                if item is _END:
                    ended = True
                    return
                if isinstance(item, RepokitError):
                    ended = True
                    raise item
                yield item
                self._link.send(Credit(call_id))
        finally:
            self._streams.pop(call_id, None)
            if not ended:
                self._link.send(Cancel(call_id))

    def _ask(self, method: str, *args: Any) -> Any:
        """A synchronous question over the control socket."""
        try:
            self._control.send(Call(0, method, args))
            answer = self._control.recv()
        except (OSError, ipc.ChannelClosed):
            raise unavailable(GONE) from None
        if type(answer) is Failure:
            raise answer.error()
        return answer.value

    # --- what the frontends call: health & metadata ------------------------------------
    def server_live(self) -> bool:
        return bool(self._ask("server_live"))

    def server_ready(self) -> bool:
        return bool(self._ask("server_ready"))

    def server_metadata(self) -> dict[str, Any]:
        return dict(self._ask("server_metadata"))

    def model_ready(self, name: str, version: str = "") -> bool:
        return bool(self._ask("model_ready", name, version))

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(self._ask("model_metadata", name, version))

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return mc.ModelConfig.FromString(self._ask("model_config_bytes", name, version))

    def model_config_json(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(self._ask("model_config_json", name, version))

    def output_labels(self, name: str, version: str, output: str) -> list[str]:
        return list(self._ask("output_labels", name, version, output))

    def _facts(self, name: str, version: str) -> VersionFacts:
        facts = self.state.versions.get((name, version))
        if facts is None:  # not in the snapshot: ask (raises as the core does)
            facts = self._ask("version_facts", name, version)
        return facts

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self._facts(name, version).decoupled

    # --- inference -----------------------------------------------------------------------
    async def infer(self, request: InferRequest, trace: Any = None) -> InferResponse:
        response: InferResponse = await self._call("infer", request)
        return response

    async def check_admission(self, request: InferRequest) -> None:
        await self._call("check_admission", request)

    async def infer_encoded(
        self,
        codec: InferCodec[Any, Any, Any],
        model: str,
        version: str,
        raw: Any,
        trace: Any = None,
    ) -> Any:
        """As the core's: the request decoded here and run in the scheduling process, or,
        for a model with a wire lane or a request it may trace (``trace``), sent as it
        arrived."""
        facts = self._facts(model, version)
        if facts.decoupled:
            raise unsupported(codec.decoupled_message)
        lane = codec.lane
        if isinstance(trace, WorkerTrace):
            form = encoded.request_form(lane, raw)
            args = (lane, codec.lane_limit, model, version, form, trace.traceparent)
            answer, traced = await self._call("infer_traced", *args, trace.taken(), trace=trace)
            if not traced:
                trace.call_id = 0
            return encoded.response_of(answer)
        if facts.wire_lane:
            data = codec.lane_bytes(raw)
            if data is not None and len(data) <= WIRE_LANE_MAX_BYTES:
                form = encoded.request_form(lane, raw)
                answer = await self._call(
                    "infer_encoded", lane, codec.lane_limit, model, version, form
                )
                return encoded.response_of(answer)
        decoded = codec.decode(raw, model, version)
        response = await self._call("infer_decoded", lane, codec.lane_limit, codec.request(decoded))
        return codec.encode(decoded, response)

    def infer_stream(
        self, request: InferRequest, control: Any = None
    ) -> AsyncGenerator[InferResponse, None]:
        return self._stream("infer_stream", request)

    def infer_any(self, request: InferRequest) -> AsyncGenerator[InferResponse, None]:
        return self._stream("infer_any", request)

    # --- statistics ------------------------------------------------------------------------
    def model_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return dict(self._ask("model_statistics", name, version))

    # --- repository ----------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return list(self._ask("repository_index", ready_only))

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        await self._call("load_model", name, config_json, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self._call("unload_model", name, unload_dependents)

    # --- system shared memory -----------------------------------------------------------
    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._ask("shm_register", name, key, offset, byte_size)

    def shm_unregister(self, name: str = "") -> None:
        self._ask("shm_unregister", name)

    def shm_status(self, name: str = "") -> list[dict[str, Any]]:
        return list(self._ask("shm_status", name))

    # --- logging & trace ------------------------------------------------------------------
    def log_settings(self) -> dict[str, Any]:
        return dict(self._ask("log_settings"))

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        return dict(self._ask("update_log_settings", settings))

    def trace_settings(self, model: str = "") -> dict[str, str | list[str]]:
        return dict(self._ask("trace_settings", model))

    def update_trace_settings(
        self, model: str, changes: dict[str, list[str] | None]
    ) -> dict[str, str | list[str]]:
        answer, state = self._ask("update_trace_settings", model, changes)
        self.apply(state)
        return dict(answer)
