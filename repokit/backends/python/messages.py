"""Every message between the server and a python-backend instance process, in one place.

Both ends import this module (the instance process too: besides :mod:`.ipc` it imports only
the standard library). Messages are plain tuples pickled by :mod:`.ipc`; the aliases below
name their fields. They stay plain tuples on purpose: a ``NamedTuple`` pickles through
its class (``__reduce_ex__``, the class reference, a Python-level ``__new__`` per record when
unpickled), which costs more than a tuple on both sides of every request.

Server -> instance: operations, answered in order, one reply each
-------------------------------------------------------------------
- ``(AUTO_COMPLETE, {"model_file", "args"})`` -> ``(OK, {"config": json | None})`` or
  ``(ERROR, message)``: import the model, run ``auto_complete_config``;
- ``(INIT, {"model_file", "args"})`` -> ``(OK, {"config": None})`` or ``(ERROR, message)``:
  import the model if not yet, run ``initialize``;
- ``(EXECUTE, [item, ...])`` -> ``(OK, [BatchReply, ...])`` (one per item, in order) or
  ``(ERROR, message)`` when the message as a whole failed. An item is a :data:`RequestBatch`
  (a ``list`` of :data:`RequestItem`: one ``execute`` call) or a :data:`WireItem` (a ``tuple``:
  one request as its protocol bytes): ``isinstance(item, tuple)`` tells them apart. A batch
  of the dynamic batcher's wire lane also holds :data:`WireEntryItem` records (five fields,
  a :data:`RequestItem` has seven): requests as their bytes, which the instance decodes and
  whose responses it encodes;
- ``(FINALIZE, None)`` -> ``(OK, None)``: run ``finalize`` and exit.

A :data:`BatchReply` is ``(status, body, (input_ns, infer_ns, output_ns, started_ns))``
(``started_ns``: the instance's CLOCK_MONOTONIC moment the execution started, 0 for none):

- ``OK``: body lists one :data:`PackedResult` per request;
- ``ERROR``: body is the message; every request of the batch fails with it (INTERNAL);
- ``RESCHEDULED``: body is ``(results, indexes)``: the model released the requests at
  ``indexes`` with RESCHEDULE (their result is None);
- ``FALLBACK`` (wire items only): nothing ran, the server takes the request through its
  standard path;
- ``WIRE`` (wire items only): body is ``(kind, payload, batch size)`` where kind is ``BODY``
  (payload: the encoded response bytes) or the status and body of a one-request batch
  (``OK`` with ``[PackedResult]``, ``ERROR``, ``RESCHEDULED``).

A :data:`PackedResult` is ``(OK, [(name, packed array)], parameters)``,
``(ERROR, code name, message)``, None (no response: rescheduled, or decoupled) or
:data:`SENT_LATER`; for a :data:`WireEntryItem` also ``(BODY, encoded response)`` or
:data:`FELL_BACK` (the instance did not take it: nothing ran for it, the server's standard path
answers it).

Server -> instance, one way (tags start with ``@``)
---------------------------------------------------
- ``(REPLY, call id, status, payload)``: the answer to a :data:`CALL` (status ``OK``,
  ``ERROR``, or for a decoupled BLS request one ``MORE`` per response and a closing ``END``);
- ``(CANCEL, request key)``: the request was cancelled (``is_cancelled()``).

Instance -> server, unprompted (tags start with ``@``; :mod:`.server_link` handles them)
---------------------------------------------------------------------------------------
- ``(CALL, call id, op, payload)``: ``CALL_INFER`` (a BLS request, payload a dict),
  ``CALL_LOAD_MODEL`` ``(name, config, files)``, ``CALL_UNLOAD_MODEL`` ``(name, dependents)``,
  ``CALL_IS_MODEL_READY`` ``(name, version)``, ``CALL_METRIC_FAMILY`` ``(name, description,
  kind)``, ``CALL_METRIC`` ``(family, labels json, buckets)``, ``CALL_METRIC_VALUE`` handle,
  ``CALL_TRACE_CONTEXT`` request key (``request.trace().get_context()``: the trace context of a
  request being executed, or None). A ``CALL_INFER`` payload's ``"trace"`` is the key of the
  request whose trace the model passed (``trace=request.trace()``), 0 for none;
- ``(CANCEL_CALL, call id)``: the model stopped iterating a decoupled BLS request;
- ``(LOG, level, message, file, line)``: a model log line;
- ``(METRIC, handle, op, value)`` / ``(METRIC_RELEASE, handle)``: custom metric updates;
- ``(RESPONSE, request key, PackedResult | None, final)``: a decoupled model's response;
- ``(ANSWER, request key, PackedResult)``: a non-decoupled request's answer sent through its
  response sender after ``execute`` returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from repokit.backends.python import ipc

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    import numpy.typing as npt

    from repokit.backends.wire_plan import WirePlan
    from repokit.errors import RepokitError
    from repokit.protocol.types import InferResponse

    # what packing reads of a model's pb_utils objects (repokit.backends.python.pb_utils)
    class ModelError(Protocol):
        def code_name(self) -> str: ...
        def message(self) -> str: ...

    class ModelTensor(Protocol):
        def name(self) -> str: ...
        def as_numpy(self) -> npt.NDArray[Any]: ...

    class ModelResponse(Protocol):
        def error(self) -> ModelError | None: ...
        def output_tensors(self) -> Sequence[ModelTensor]: ...
        def parameter_dict(self) -> dict[str, Any]: ...


# --- operations (server -> instance, one reply each) ---------------------------------------
AUTO_COMPLETE: Final = "auto_complete"
INIT: Final = "init"
EXECUTE: Final = "execute"
FINALIZE: Final = "finalize"

# --- one-way and unprompted messages (first item; the channel routes on the "@") -----------
REPLY: Final = "@reply"
CANCEL: Final = "@cancel"
CALL: Final = "@call"
CANCEL_CALL: Final = "@cancel_call"
LOG: Final = "@log"
METRIC: Final = "@metric"
METRIC_RELEASE: Final = "@metric_release"
RESPONSE: Final = "@response"
ANSWER: Final = "@answer"

# --- what a CALL asks for -------------------------------------------------------------------
CALL_INFER: Final = "infer"
CALL_LOAD_MODEL: Final = "load_model"
CALL_UNLOAD_MODEL: Final = "unload_model"
CALL_IS_MODEL_READY: Final = "is_model_ready"
CALL_METRIC_FAMILY: Final = "metric_family"
CALL_METRIC: Final = "metric"
CALL_METRIC_VALUE: Final = "metric_value"
CALL_TRACE_CONTEXT: Final = "trace_context"

# --- statuses -------------------------------------------------------------------------------
OK: Final = "ok"
ERROR: Final = "error"
RESCHEDULED: Final = "rescheduled"
FALLBACK: Final = "fallback"
WIRE: Final = "wire"
BODY: Final = "body"
MORE: Final = "more"
END: Final = "end"

# a result item: this (non-decoupled) request's answer comes separately, as an ANSWER message
# sent through its response sender after execute returned
SENT_LATER: Final = ("sender",)
# a wire entry's result: the instance did not take the request (nothing ran for it)
FELL_BACK: Final = (FALLBACK,)
NO_TIMING: Final = (0, 0, 0, 0)

# --- records --------------------------------------------------------------------------------
# one input: (name, packed array (ipc.PackedArray), "BF16" or None)
PackedInput = tuple[str, Any, "str | None"]
# one request of a batch: (inputs, requested output names, request id, correlation id, flags,
# parameters JSON, request key); the key is last (ServerLink.requests_done relies on it)
RequestItem = tuple[list[PackedInput], tuple[str, ...], str, "int | str", int, str, int]
RequestBatch = list["RequestItem | WireEntryItem"]
# a request as its wire bytes: (protocol, the bytes, request key, the model's plan the first
# time this instance gets it else None, the server's maximum input size)
WireItem = tuple[str, bytes, int, "WirePlan | None", int]
# a request of a batch as its wire bytes (the dynamic batcher's wire lane): (protocol, the
# bytes, the plan or None as in a WireItem, the server's maximum input size, request key); the
# key is last, as in a RequestItem
WireEntryItem = tuple[str, bytes, "WirePlan | None", int, int]
# (input_ns, infer_ns, output_ns, started_ns): the durations, and when the instance started
# the execution (time.monotonic_ns(): CLOCK_MONOTONIC, the server's trace clock too; 0: none)
Timing = tuple[int, int, int, int]
# (status, body, timing) of one execute item
BatchReply = tuple[str, Any, Timing]
# (OK, [(name, packed array)], parameters), (ERROR, code name, message) or SENT_LATER
PackedResult = tuple[Any, ...]


# --- packing --------------------------------------------------------------------------------
def pack_model_response(
    response: ModelResponse | None, requested: set[str] | None
) -> PackedResult | None:
    """A model's ``pb_utils.InferenceResponse`` (instance side) as a :data:`PackedResult`,
    keeping only the ``requested`` outputs (all when None)."""
    if response is None:
        return None
    error = response.error()
    if error is not None:
        return (ERROR, error.code_name(), error.message())
    pack_array = ipc.pack_array
    if requested is None:
        outputs = [(t.name(), pack_array(t.as_numpy())) for t in response.output_tensors()]
    else:
        outputs = [
            (name, pack_array(t.as_numpy()))
            for t in response.output_tensors()
            if (name := t.name()) in requested
        ]
    return (OK, outputs, response.parameter_dict())


def pack_server_response(response: InferResponse) -> PackedResult:
    """The server core's answer to a BLS request (an ``InferResponse``) as the
    :data:`PackedResult` of its REPLY."""
    pack_array = ipc.pack_array
    outputs = [(t.name, pack_array(t.data)) for t in response.outputs]
    return (OK, outputs, dict(response.parameters))


def pack_server_error(error: RepokitError) -> PackedResult:
    """A server error as the :data:`PackedResult` of a BLS REPLY."""
    return (ERROR, error.code.name, error.message)
