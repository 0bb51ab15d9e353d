"""BLS (``InferenceRequest.exec`` / ``async_exec``) and decoupled response senders, in the
instance process.

A BLS request goes to the server as a call (``(CALL, id, CALL_INFER, {...})``, see
:mod:`repokit.backends.python.messages`); the server runs it through its core (the called
model's checks, scheduler, batching and statistics) and replies with the response, or, for
``exec(decoupled=True)``, with one ``MORE`` reply per response and an ``END`` reply, which
:class:`ResponseIterator` yields as they arrive.
``async_exec`` waits for the reply (with ``decoupled=True``: the first one) on the event loop's
default executor, so a coroutine can run many BLS requests at once (``asyncio.gather``), and
several ``async def execute`` calls of one instance run concurrently.

A :class:`ResponseSender` of a decoupled model sends each response to the server at once
(``(RESPONSE, request key, response, final)``), from ``execute`` or from any thread the
model started. A non-decoupled model may answer a request through its sender too (one
response): while ``execute`` runs the response is kept and goes back with ``execute``'s reply;
once ``execute`` has returned (:meth:`ResponseSender.detach`) it goes at once as
``(ANSWER, request key, response)``, and the server is waiting for it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from repokit.backends.python import ipc
from repokit.backends.python.messages import (
    ANSWER,
    CALL_INFER,
    CALL_TRACE_CONTEXT,
    CANCEL_CALL,
    ERROR,
    MORE,
    OK,
    RESPONSE,
    PackedResult,
    pack_model_response,
)
from repokit.backends.python.pb_runtime import RUNTIME

if TYPE_CHECKING:
    from repokit.backends.python.pb_utils import InferenceRequest, InferenceResponse

_DTYPES: dict[str, Any] = {}


def _pb() -> Any:
    from repokit.backends.python import pb_utils

    return pb_utils


def _error_response(message: str) -> InferenceResponse:
    pb = _pb()
    response: InferenceResponse = pb.InferenceResponse(error=pb.TritonError(message))
    return response


# --- responses on the wire ------------------------------------------------------------------
def response_from_wire(item: PackedResult) -> InferenceResponse:
    """The ``pb_utils.InferenceResponse`` of a BLS reply's packed result."""
    pb = _pb()
    if item[0] == ERROR:
        _, code_name, message = item
        error = pb.TritonError(message, pb.TritonError.code_of(code_name))
        failed: InferenceResponse = pb.InferenceResponse(error=error)
        return failed
    _, outputs, parameters = item
    tensors = [pb.Tensor(name, ipc.unpack_array(packed, _DTYPES)) for name, packed in outputs]
    response: InferenceResponse = pb.InferenceResponse(
        output_tensors=tensors, parameters=parameters
    )
    return response


# --- BLS ------------------------------------------------------------------------------------
def _payload(request: InferenceRequest, decoupled: bool) -> dict[str, Any]:
    pb = _pb()
    inputs = []
    for tensor in request.inputs():
        if not isinstance(tensor, pb.Tensor):
            raise pb.TritonModelException("BLS request inputs must be pb_utils.Tensor objects")
        inputs.append((tensor.name(), tensor.triton_datatype(), ipc.pack_array(tensor.as_numpy())))
    return {
        "model": request.model_name(),
        "version": request.model_version(),
        "id": request.request_id(),
        "inputs": inputs,
        "outputs": sorted(request.requested_output_names()),
        "correlation_id": request.correlation_id(),
        "flags": request.flags(),
        "timeout": request.timeout(),
        "parameters": request.parameters(),
        "decoupled": decoupled,
        "parents": RUNTIME.parents.get(),
        "trace": request.trace()._key,
    }


def _check_phase() -> None:
    if not RUNTIME.executing or RUNTIME.finalizing:
        raise _pb().TritonModelException("BLS is only supported during the 'execute' function.")


def _start(request: InferenceRequest, decoupled: bool) -> int:
    _check_phase()
    link = RUNTIME.require_link("BLS")
    return link.start_call(CALL_INFER, _payload(request, decoupled))


def _finish(call_id: int, decoupled: bool) -> InferenceResponse | ResponseIterator:
    link = RUNTIME.require_link("BLS")
    if decoupled:
        return ResponseIterator(call_id)
    try:
        status, body = link.wait_reply(call_id)
    finally:
        link.forget(call_id)
    if status != OK:
        return _error_response(str(body))
    return response_from_wire(body)


def execute(request: InferenceRequest, decoupled: bool) -> InferenceResponse | ResponseIterator:
    return _finish(_start(request, decoupled), decoupled)


def async_execute(request: InferenceRequest, decoupled: bool) -> asyncio.Future[Any]:
    call_id = _start(request, decoupled)
    loop = asyncio.get_running_loop()
    if decoupled:  # ready once the first response is in: iterating it does not block the loop
        return loop.run_in_executor(None, _first_ready, call_id)
    return loop.run_in_executor(None, _finish, call_id, False)


def _first_ready(call_id: int) -> ResponseIterator:
    RUNTIME.require_link("BLS").wait_pending(call_id)
    return ResponseIterator(call_id)


class ResponseIterator:
    """The responses of a decoupled BLS request, as they arrive (``for r in iterator``)."""

    def __init__(self, call_id: int) -> None:
        self._call_id = call_id
        self._done = False
        self._lock = threading.Lock()

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        link = RUNTIME.require_link("BLS")
        with self._lock:
            status, body = link.wait_reply(self._call_id)
        if status == MORE:
            return response_from_wire(body)
        self._done = True
        link.forget(self._call_id)
        if status == ERROR:
            return _error_response(str(body))
        raise StopIteration

    def cancel(self) -> None:
        """Stop the request at the server; no more responses are delivered."""
        if self._done:
            return
        self._done = True
        link = RUNTIME.require_link("BLS")
        link.forget(self._call_id)
        link.send((CANCEL_CALL, self._call_id))


# --- traces ---------------------------------------------------------------------------------
class InferenceTrace:
    """A request's trace (Triton's ``InferenceTrace``, ``request.trace()``): the key of the
    request it belongs to, 0 for none. The server knows which executing requests are traced;
    a BLS request given the trace of one is traced as its child."""

    __slots__ = ("_key",)
    _key: int

    def __init__(self) -> None:  # as Triton's binding: the module makes them, models do not
        raise TypeError("triton_python_backend_utils.InferenceTrace: No constructor defined!")

    @classmethod
    def _of(cls, key: int) -> InferenceTrace:
        trace = cls.__new__(cls)
        trace._key = key
        return trace

    def get_context(self) -> str | None:
        """The trace's OpenTelemetry context as Triton gives it (JSON with ``traceparent``);
        None when the request is not traced or the server traces in triton mode."""
        link = RUNTIME.link
        if not self._key or link is None:
            return None
        status, body = link.call(CALL_TRACE_CONTEXT, self._key)
        return body if status == OK and isinstance(body, str) else None


# --- decoupled response senders --------------------------------------------------------------
class ResponseSender:
    """Sends the responses of one request (Triton's ``InferenceResponseSender``)."""

    def __init__(self, request: InferenceRequest) -> None:
        self._request = request
        self._closed = False
        self._sent = 0
        self._lock = threading.Lock()
        # non-decoupled models: what was sent while execute ran; after execute returned
        # (detached) responses go to the server at once
        self.kept: list[tuple[InferenceResponse | None, int]] = []
        self._detached = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        pb = _pb()
        if flags not in (0, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise pb.TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise pb.TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, pb.InferenceResponse):
            raise pb.TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response)}'."
            )
        final = flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not RUNTIME.decoupled:
                if response is not None and self._sent > 0:
                    raise pb.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and final and self._sent == 0:
                    raise pb.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise pb.TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                self._closed = True
            if response is not None:
                self._sent += 1
            if not RUNTIME.decoupled:
                if not self._detached:
                    self.kept.append((response, flags))
                elif response is not None:
                    wire = pack_model_response(response, self._request.requested_output_names())
                    RUNTIME.require_link("response sender").send(
                        (ANSWER, self._request.key(), wire)
                    )
                return
            wire = pack_model_response(response, self._request.requested_output_names())
            RUNTIME.require_link("response sender").send(
                (RESPONSE, self._request.key(), wire, final)
            )

    def detach(self, answered: bool) -> InferenceResponse | None:
        """A non-decoupled model's ``execute`` returned: the response sent meanwhile (if any);
        from now on responses go to the server at once. ``answered``: the request's answer is
        settled (``execute`` returned a response or failed), so the sender closes."""
        with self._lock:
            self._detached = True
            sent = next((r for r, _ in self.kept if r is not None), None)
            if answered:
                self._closed = True
            return sent

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()

    @property
    def closed(self) -> bool:
        return self._closed
