"""The server's side of what an instance process starts itself (see ``child_link``).

- ``CALL``: a BLS request (``CALL_INFER``), a metric family / metric creation or value read,
  or model control; answered with ``REPLY`` (a decoupled BLS request with one ``MORE`` reply
  per response and a closing ``END`` or ``ERROR``). BLS requests run as tasks through the core
  (``ServerApi``), so several of one instance run concurrently and the instance keeps
  executing meanwhile;
- ``CANCEL_CALL``: the model stopped iterating a decoupled BLS request;
- ``LOG``: a model log line for the server's log;
- ``METRIC`` / ``METRIC_RELEASE``: custom metric updates;
- ``RESPONSE``: a decoupled model's response for a request, handed to that request's sink;
- ``ANSWER``: the answer of a non-decoupled model's request that it sent through the request's
  response sender after ``execute`` returned (:meth:`ServerLink.answer` waits for it).

The fields of each are in :mod:`repokit.backends.python.messages`.

The traces of the requests being executed at the instance are kept by their keys
(:attr:`ServerLink.traces`, filled and emptied by the backend around each execution): a BLS
request made with ``trace=request.trace()`` of one of them is traced as its child, and
``request.trace().get_context()`` reads its context.

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
from repokit.backends.python.messages import (
    ANSWER,
    CALL,
    CALL_INFER,
    CALL_IS_MODEL_READY,
    CALL_LOAD_MODEL,
    CALL_METRIC,
    CALL_METRIC_FAMILY,
    CALL_METRIC_VALUE,
    CALL_TRACE_CONTEXT,
    CALL_UNLOAD_MODEL,
    CANCEL_CALL,
    END,
    ERROR,
    LOG,
    METRIC,
    METRIC_RELEASE,
    MORE,
    OK,
    REPLY,
    RESPONSE,
    RequestBatch,
    pack_server_error,
    pack_server_response,
)
from repokit.backends.server_api import NO_SERVER_MESSAGE, RequestControl, ServerApi
from repokit.errors import Code, RepokitError, internal
from repokit.protocol import datatypes
from repokit.protocol.types import (
    InferRequest,
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
        self._answers: dict[int, BackendResult] = {}  # ANSWERs nobody waits for yet
        self._awaited: dict[int, asyncio.Future[BackendResult]] = {}
        self._abandoned: set[int] = set()  # keys whose waiter went away (cancelled)
        self.traces: dict[int, Any] = {}  # key -> Trace of the traced requests executing

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
        self.traces.clear()
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

    def requests_done(self, batch: RequestBatch) -> None:
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
        if tag == RESPONSE:
            self._response(message[1], message[2], message[3])
        elif tag == ANSWER:
            self._answer(message[1], message[2])
        elif tag == CALL:
            self._call(message[1], message[2], message[3])
        elif tag == LOG:
            self._log(message[1], message[2], message[3], message[4])
        elif tag == METRIC:
            self._metric_update(message[1], message[2], message[3])
        elif tag == METRIC_RELEASE:
            family = self._metric_families.pop(message[1], None)
            if family is not None and self._server is not None:
                self._server.custom_metrics.release(family, message[1])
        elif tag == CANCEL_CALL:
            task = self._tasks.pop(message[1], None)
            if task is not None:
                task.cancel()

    def _reply(self, call_id: int, status: str, payload: Any) -> None:
        self._send((REPLY, call_id, status, payload))

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
            self._reply(call_id, ERROR, NO_SERVER_MESSAGE)
            return
        try:
            if op == CALL_INFER:
                parents = set(payload.get("parents", ()))
                if parents and parents <= self._cancelled:
                    self._reply(call_id, OK, pack_server_error(_parent_cancelled()))
                    return
                if parents:
                    self._bls_parents[call_id] = parents - self._cancelled
                # looked up now: the request's execution may end before the task starts
                trace = self.traces.get(payload.get("trace") or 0)
                self._start(call_id, self._bls(call_id, server, payload, trace))
            elif op in (CALL_LOAD_MODEL, CALL_UNLOAD_MODEL):
                self._start(call_id, self._control(call_id, server, op, payload))
            elif op == CALL_IS_MODEL_READY:
                self._reply(call_id, OK, server.model_ready(payload[0], payload[1]))
            elif op == CALL_METRIC_FAMILY:
                self._reply(call_id, OK, server.custom_metrics.family(*payload))
            elif op == CALL_METRIC:
                family, labels, buckets = payload
                metric = server.custom_metrics.metric(family, json.loads(labels), buckets)
                self._metric_families[metric] = family
                self._reply(call_id, OK, metric)
            elif op == CALL_METRIC_VALUE:
                self._reply(call_id, OK, server.custom_metrics.value(payload))
            elif op == CALL_TRACE_CONTEXT:
                trace = self.traces.get(payload)
                self._reply(call_id, OK, None if trace is None else trace.context())
            else:
                self._reply(call_id, ERROR, f"unknown call {op!r}")
        except RepokitError as exc:
            self._reply(call_id, ERROR, exc.message)

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
            if op == CALL_LOAD_MODEL:
                name, config, files = payload
                await server.load_model(name, config, files or None)
            else:
                await server.unload_model(payload[0], payload[1])
        except RepokitError as exc:
            self._reply(call_id, ERROR, exc.message)
            return
        self._reply(call_id, OK, None)

    async def _bls(
        self, call_id: int, server: ServerApi, payload: dict[str, Any], trace: Any
    ) -> None:
        try:
            await self._run_bls(call_id, server, payload, trace)
        except asyncio.CancelledError:
            if call_id in self._cancelled_calls:  # with its parents: the caller still waits
                wire = pack_server_error(_parent_cancelled())
                if payload["decoupled"]:
                    self._reply(call_id, MORE, wire)
                    self._reply(call_id, END, None)
                else:
                    self._reply(call_id, OK, wire)
            raise

    async def _run_bls(
        self, call_id: int, server: ServerApi, payload: dict[str, Any], trace: Any
    ) -> None:
        try:
            request = bls_request(payload, self._dtypes)
        except Exception as exc:  # inputs the protocol cannot carry
            self._reply(call_id, OK, pack_server_error(internal(f"invalid BLS request: {exc}")))
            return
        if not payload["decoupled"]:
            try:
                response = await server.infer(request, trace)
            except RepokitError as exc:
                self._reply(call_id, OK, pack_server_error(exc))
                return
            self._reply(call_id, OK, pack_server_response(response))
            return
        final = False
        try:
            async for item in server.infer_stream(request, None, trace):
                final = item.final
                self._reply(call_id, MORE, pack_server_response(item))
        except RepokitError as exc:
            self._reply(call_id, MORE, pack_server_error(exc))
            final = True
        if not final:  # the model ended with a bare final flag: Triton yields an empty response
            self._reply(call_id, MORE, (OK, [], {}))
        self._reply(call_id, END, None)


def _parent_cancelled() -> RepokitError:
    return RepokitError(Code.CANCELLED, PARENT_CANCELLED)


def closed_stream_error(instance_name: str) -> RepokitError:
    return RepokitError(Code.INTERNAL, f"Stub process '{instance_name}' is not healthy.")
