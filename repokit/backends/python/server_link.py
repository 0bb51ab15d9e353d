"""The server's side of what an instance process starts itself (see ``child_link``).

- ``("@call", id, op, payload)``: a BLS request (``infer``), a metric family / metric creation
  or value read, or model control; answered with ``("@reply", id, status, payload)`` (a
  decoupled BLS request with one ``"more"`` reply per response and a closing ``"end"`` or
  ``"error"``). BLS requests run as tasks through the core (``ServerApi``), so several of one
  instance run concurrently and the instance keeps executing meanwhile;
- ``("@cancel_call", id)``: the model stopped iterating a decoupled BLS request;
- ``("@log", level, message, file, line)``: a model log line for the server's log;
- ``("@metric", handle, op, value)`` / ``("@metric_release", handle)``: custom metric updates;
- ``("@response", key, response, final)``: a decoupled model's response for request ``key``,
  handed to that request's sink;
- ``("@answer", key, response)``: the answer of a non-decoupled model's request ``key`` that it
  sent through the request's response sender after ``execute`` returned
  (:meth:`ServerLink.answer` waits for it).

A BLS request carries the keys of the requests whose ``execute`` made it (``parents``). When
all of them are cancelled (the client went away, closed its stream or cancelled the call) the
BLS request is cancelled too: the called model sees ``is_cancelled()`` and the caller gets a
CANCELLED error (:data:`PARENT_CANCELLED`); one made after they were all cancelled gets that
error at once. (Triton 2.51 leaves BLS requests running when their parent is cancelled.)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from repokit.backends.base import BackendResult
from repokit.backends.python import ipc
from repokit.backends.server_api import NO_SERVER_MESSAGE, RequestControl, ServerApi
from repokit.errors import Code, RepokitError, internal
from repokit.protocol import datatypes
from repokit.protocol.types import (
    InferRequest,
    InferResponse,
    InputSpec,
    ParamValue,
    RequestedOutput,
)

# pb_utils.Logger levels INFO, WARNING, ERROR, VERBOSE (logged at --log-verbose 1 and more)
_LOG_LEVELS = (logging.INFO, logging.WARNING, logging.ERROR, logging.DEBUG)
PARENT_CANCELLED = "BLS request cancelled: the request it was made for was cancelled"

ResultFromWire = Callable[[Any], BackendResult]


def _datatype(array: np.ndarray[Any, Any], special: str | None) -> str:
    if special is not None:
        return special
    found = datatypes.from_numpy(array.dtype)
    return found.protocol if found is not None else "BYTES"


def _parameters(text: str) -> dict[str, ParamValue]:
    try:
        decoded = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(decoded, dict):
        return {}
    return {k: v for k, v in decoded.items() if isinstance(v, (bool, int, float, str))}


def bls_request(payload: dict[str, Any], dtypes: dict[str, Any]) -> InferRequest:
    inputs = []
    for name, special, packed in payload["inputs"]:
        array = ipc.unpack_array(packed, dtypes)
        inputs.append(InputSpec(name, _datatype(array, special), tuple(array.shape), array))
    flags = int(payload["flags"])
    version = int(payload["version"])
    return InferRequest(
        model_name=payload["model"],
        model_version="" if version < 0 else str(version),
        id=payload["id"],
        inputs=inputs,
        outputs=[RequestedOutput(name) for name in payload["outputs"]],
        parameters=_parameters(payload["parameters"]),
        sequence_id=payload["correlation_id"],
        sequence_start=bool(flags & 1),
        sequence_end=bool(flags & 2),
        timeout_us=int(payload["timeout"]),
    )


def response_to_wire(response: InferResponse) -> Any:
    outputs = [(t.name, ipc.pack_array(t.data)) for t in response.outputs]
    return ("ok", outputs, dict(response.parameters))


def error_to_wire(error: RepokitError) -> Any:
    return ("error", error.code.name, error.message)


class ServerLink:
    """Handles the messages one instance process starts (runs on the event loop)."""

    def __init__(
        self,
        instance_name: str,
        model_name: str,
        server: ServerApi | None,
        send: Callable[[Any], None],
        streams: dict[int, RequestControl],
        result_from_wire: ResultFromWire,
    ) -> None:
        self._instance = instance_name
        self._model = model_name
        self._server = server
        self._send = send
        self._streams = streams
        self._result = result_from_wire
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._dtypes: dict[str, Any] = {}
        self._metric_families: dict[int, int] = {}  # metric handle -> family handle
        self._cancelled: set[int] = set()  # keys of cancelled requests still at the instance
        self._bls_parents: dict[int, set[int]] = {}  # BLS call id -> parents not cancelled yet
        self._cancelled_calls: set[int] = set()  # BLS calls cancelled with their parents
        self._answers: dict[int, BackendResult] = {}  # "@answer"s nobody waits for yet
        self._awaited: dict[int, asyncio.Future[BackendResult]] = {}
        self._abandoned: set[int] = set()  # keys whose waiter went away (cancelled)

    def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        server = self._server
        if server is not None:
            for metric, family in self._metric_families.items():
                server.custom_metrics.release(family, metric)
        self._metric_families.clear()
        self._cancelled.clear()
        self._bls_parents.clear()
        self._answers.clear()
        self._abandoned.clear()
        for future in self._awaited.values():
            if not future.done():
                future.set_result(BackendResult(error=closed_stream_error(self._instance)))
        self._awaited.clear()

    # --- cancellation of the requests BLS calls are made for -------------------------------
    def parent_cancelled(self, key: int) -> None:
        """Request ``key`` of this instance was cancelled: cancel the BLS requests made only on
        behalf of cancelled requests."""
        self._cancelled.add(key)
        for call_id, remaining in list(self._bls_parents.items()):
            if key in remaining:
                remaining.discard(key)
                if not remaining:
                    task = self._tasks.get(call_id)
                    if task is not None:
                        self._cancelled_calls.add(call_id)
                        task.cancel()

    def requests_done(self, batch: list[tuple[Any, ...]]) -> None:
        """The requests of an execute batch (their keys last) finished at the instance: forget
        their cancellation."""
        if self._cancelled:
            for request in batch:
                self._cancelled.discard(request[-1])

    def request_done(self, key: int) -> None:
        """One request (its key) finished at the instance: forget its cancellation."""
        if self._cancelled:
            self._cancelled.discard(key)

    # --- dispatch -------------------------------------------------------------------------------
    def handle(self, message: Any) -> None:
        tag = message[0]
        if tag == "@response":
            self._response(message[1], message[2], message[3])
        elif tag == "@answer":
            self._answer(message[1], message[2])
        elif tag == "@call":
            self._call(message[1], message[2], message[3])
        elif tag == "@log":
            self._log(message[1], message[2], message[3], message[4])
        elif tag == "@metric":
            self._metric_update(message[1], message[2], message[3])
        elif tag == "@metric_release":
            family = self._metric_families.pop(message[1], None)
            if family is not None and self._server is not None:
                self._server.custom_metrics.release(family, message[1])
        elif tag == "@cancel_call":
            task = self._tasks.pop(message[1], None)
            if task is not None:
                task.cancel()

    def _reply(self, call_id: int, status: str, payload: Any) -> None:
        self._send(("@reply", call_id, status, payload))

    # --- decoupled responses ----------------------------------------------------------------
    def _response(self, key: int, wire: Any, final: bool) -> None:
        if final:
            self._cancelled.discard(key)
        control = self._streams.pop(key, None) if final else self._streams.get(key)
        if control is None or control.sink is None:
            return  # nobody listens (warmup, or the client went away)
        control.sink(None if wire is None else self._result(wire), final)

    # --- non-decoupled answers sent after execute returned -------------------------------
    def _answer(self, key: int, wire: Any) -> None:
        if key in self._abandoned:
            self._abandoned.discard(key)
            return
        result = self._result(wire)
        future = self._awaited.pop(key, None)
        if future is None:
            self._answers[key] = result
        elif not future.done():
            future.set_result(result)

    async def answer(self, key: int) -> BackendResult:
        """The answer request ``key`` gets through its response sender (it may have come)."""
        found = self._answers.pop(key, None)
        if found is not None:
            return found
        future: asyncio.Future[BackendResult] = asyncio.get_running_loop().create_future()
        self._awaited[key] = future
        try:
            return await future
        except asyncio.CancelledError:
            if self._awaited.pop(key, None) is not None:
                self._abandoned.add(key)
            raise

    # --- logging --------------------------------------------------------------------------------
    def _log(self, level: int, message: str, filename: str, line: int) -> None:
        server = self._server
        logger = server.model_log if server is not None else logging.getLogger("repokit.model")
        python_level = _LOG_LEVELS[level] if 0 <= level < len(_LOG_LEVELS) else logging.INFO
        # the server log names the model's file and line (repokit.core.server_log)
        extra = {"triton_file": filename, "triton_line": line}
        logger.log(python_level, "%s", message, extra=extra)

    # --- metrics --------------------------------------------------------------------------------
    def _metric_update(self, handle: int, op: str, value: float) -> None:
        if self._server is None:
            return
        try:
            self._server.custom_metrics.update(handle, op, value)
        except RepokitError as exc:
            self._log(2, f"metric update failed: {exc.message}", self._instance, 0)

    # --- calls ----------------------------------------------------------------------------------
    def _call(self, call_id: int, op: str, payload: Any) -> None:
        server = self._server
        if server is None:
            self._reply(call_id, "error", NO_SERVER_MESSAGE)
            return
        try:
            if op == "infer":
                parents = set(payload.get("parents", ()))
                if parents and parents <= self._cancelled:
                    self._reply(call_id, "ok", error_to_wire(_parent_cancelled()))
                    return
                if parents:
                    self._bls_parents[call_id] = parents - self._cancelled
                self._start(call_id, self._bls(call_id, server, payload))
            elif op in ("load_model", "unload_model"):
                self._start(call_id, self._control(call_id, server, op, payload))
            elif op == "is_model_ready":
                self._reply(call_id, "ok", server.model_ready(payload[0], payload[1]))
            elif op == "metric_family":
                self._reply(call_id, "ok", server.custom_metrics.family(*payload))
            elif op == "metric":
                family, labels, buckets = payload
                metric = server.custom_metrics.metric(family, json.loads(labels), buckets)
                self._metric_families[metric] = family
                self._reply(call_id, "ok", metric)
            elif op == "metric_value":
                self._reply(call_id, "ok", server.custom_metrics.value(payload))
            else:
                self._reply(call_id, "error", f"unknown call {op!r}")
        except RepokitError as exc:
            self._reply(call_id, "error", exc.message)

    def _start(self, call_id: int, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[call_id] = task
        task.add_done_callback(lambda _: self._call_done(call_id))

    def _call_done(self, call_id: int) -> None:
        self._tasks.pop(call_id, None)
        self._bls_parents.pop(call_id, None)
        self._cancelled_calls.discard(call_id)

    async def _control(self, call_id: int, server: ServerApi, op: str, payload: Any) -> None:
        try:
            if op == "load_model":
                name, config, files = payload
                await server.load_model(name, config, files or None)
            else:
                await server.unload_model(payload[0], payload[1])
        except RepokitError as exc:
            self._reply(call_id, "error", exc.message)
            return
        self._reply(call_id, "ok", None)

    async def _bls(self, call_id: int, server: ServerApi, payload: dict[str, Any]) -> None:
        try:
            await self._run_bls(call_id, server, payload)
        except asyncio.CancelledError:
            if call_id in self._cancelled_calls:  # with its parents: the caller still waits
                wire = error_to_wire(_parent_cancelled())
                if payload["decoupled"]:
                    self._reply(call_id, "more", wire)
                    self._reply(call_id, "end", None)
                else:
                    self._reply(call_id, "ok", wire)
            raise

    async def _run_bls(self, call_id: int, server: ServerApi, payload: dict[str, Any]) -> None:
        try:
            request = bls_request(payload, self._dtypes)
        except Exception as exc:  # inputs the protocol cannot carry
            self._reply(call_id, "ok", error_to_wire(internal(f"invalid BLS request: {exc}")))
            return
        if not payload["decoupled"]:
            try:
                response = await server.infer(request)
            except RepokitError as exc:
                self._reply(call_id, "ok", error_to_wire(exc))
                return
            self._reply(call_id, "ok", response_to_wire(response))
            return
        final = False
        try:
            async for item in server.infer_stream(request):
                final = item.final
                self._reply(call_id, "more", response_to_wire(item))
        except RepokitError as exc:
            self._reply(call_id, "more", error_to_wire(exc))
            final = True
        if not final:  # the model ended with a bare final flag: Triton yields an empty response
            self._reply(call_id, "more", ("ok", [], {}))
        self._reply(call_id, "end", None)


def _parent_cancelled() -> RepokitError:
    return RepokitError(Code.CANCELLED, PARENT_CANCELLED)


def closed_stream_error(instance_name: str) -> RepokitError:
    return RepokitError(Code.INTERNAL, f"Stub process '{instance_name}' is not healthy.")
