"""gRPC ModelInfer straight from and to wire bytes, in the instance process.

The server hands a plain ModelInferRequest to the instance as the bytes it received, and gets
the serialized ModelInferResponse back (:mod:`repokit.core.wire_lane`): the decoding, the checks
and the encoding then run here, beside the model, instead of on the server's event loop.

:func:`decode_request` accepts exactly the requests the server's plain path accepts (the
plain-request rules of :mod:`repokit.protocol.plain_request`, as
:func:`repokit.core.plain_path.prepare_plain` after
:func:`repokit.frontends.grpc.codec.decode_infer_request`): every input once, in
``raw_input_contents``, no parameters anywhere (sequence ids, priorities, shared memory,
classification), requested outputs that exist. Anything else returns None, before the model
runs, and the server takes the request through its standard path, which decides any error and
its message; so this path never changes an answer, it only moves work. :func:`encode_response`
builds the response the server would build for a successful response with numeric outputs and no
parameters; for anything else it returns None and the reply travels in the usual packed form.

The generated protobuf types are imported on the first request (a model that is never asked over
gRPC does not load them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from repokit.backends.python.wire_checks import numeric_outputs
from repokit.backends.python.wire_grpc_response import common_response
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.plain_request import plain_input
from repokit.protocol.plain_response import plain_grpc_response

if TYPE_CHECKING:
    from repokit.backends.python.pb_utils import InferenceResponse

# a decoded request: [(input name, array)], requested output names, request id, batch size
# (0 when the model does not batch)
DecodedRequest = tuple[list[tuple[str, "np.ndarray[Any, Any]"]], set[str], str, int]


_request_type: Any = None  # ModelInferRequest, imported with the first request

# a fixed-dims input of the plan: (datatype, config dims as a list, dtype, elements per batch
# item, bytes per batch item); made once per plan (_fixed_inputs)
_Fixed = tuple[str, list[int], "np.dtype[Any]", int, int]
_cached: tuple[WirePlan, dict[str, _Fixed]] | None = None


def _fixed_inputs(plan: WirePlan) -> dict[str, _Fixed]:
    """The plan's inputs of fixed dims with elements, checked without the general rules'
    calls (the same checks, see :func:`_fits`)."""
    global _cached
    if _cached is not None and _cached[0] is plan:
        return _cached[1]
    fixed = {
        name: (datatype, list(dims), dtype, count, count * dtype.itemsize)
        for name, (datatype, dims, dtype, count) in plan.inputs.items()
        if count > 0
    }
    _cached = (plan, fixed)
    return fixed


def decode_request(raw: bytes, plan: WirePlan, limit: int = 0) -> DecodedRequest | None:
    """The request's inputs as writable arrays, or None when the server must take it
    (``limit`` is for the HTTP decoder's signature: gRPC has its message size limit)."""
    global _request_type
    if _request_type is None:
        from repokit.protocol.generated import grpc_service_pb2

        _request_type = grpc_service_pb2.ModelInferRequest
    try:
        msg = _request_type.FromString(raw)
    except Exception:  # the server parsed these bytes; never decide an error here
        return None
    # slices: one list each (every access to a repeated field builds its container anew)
    tensors = msg.inputs[:]
    contents = msg.raw_input_contents[:]
    expected = plan.inputs
    if msg.parameters or len(tensors) != len(expected) or len(contents) != len(tensors):
        return None
    fixed = _fixed_inputs(plan)
    max_batch = plan.max_batch_size
    batch_size = 0
    arrays: list[tuple[str, np.ndarray[Any, Any]]] = []
    seen: set[str] = set()
    for tensor, data in zip(tensors, contents, strict=True):
        if tensor.parameters or tensor.HasField("contents"):
            return None
        name = tensor.name
        datatype = tensor.datatype
        shape = tensor.shape[:]
        spec = fixed.get(name)
        if spec is not None and name not in seen and datatype == spec[0]:
            batch_size = _fits(spec, shape, len(data), max_batch, batch_size)
            if batch_size < 0:
                return None
            dtype = spec[2]
        else:
            checked = plain_input(
                expected, max_batch, seen, name, datatype, tuple(shape), len(data), batch_size
            )
            if checked is None:
                return None
            dtype, batch_size = checked
        seen.add(name)
        # a writable copy, as the packed path delivers (models may write into their inputs)
        arrays.append((name, np.ndarray(shape, dtype, bytearray(data))))
    requested: set[str] = set()
    outputs = msg.outputs
    if outputs:
        for output in outputs:
            if output.parameters or output.name not in plan.outputs:
                return None
            requested.add(output.name)
    return arrays, requested or set(plan.outputs), msg.id, batch_size


def _fits(spec: _Fixed, shape: list[int], nbytes: int, max_batch: int, batch_size: int) -> int:
    """The request's batch size when a fixed-dims input's ``shape`` and byte count are those
    :func:`~repokit.protocol.plain_request.plain_input` takes (``batch_size``: that of the
    request's other inputs, 0 = none yet), else -1."""
    _, dims, _, _, item_bytes = spec
    if not max_batch:
        return batch_size if shape == dims and nbytes == item_bytes else -1
    batch = shape[0] if shape else 0
    if shape[1:] != dims or batch < 1 or batch > max_batch or nbytes != batch * item_bytes:
        return -1
    if batch_size and batch != batch_size:
        return -1
    return batch


def encode_response(
    plan: WirePlan, response: InferenceResponse, requested: set[str], request_id: str
) -> bytes | None:
    """The serialized ModelInferResponse (:mod:`repokit.protocol.plain_response`, as the server
    writes it), or None when the packed form must carry it (an error, response parameters, or
    an output that is not a plain numeric array). The common response is written from kept
    pieces (:mod:`.wire_grpc_response`)."""
    body = common_response(plan, response, requested, request_id)
    if body is not None:
        return body
    outputs = numeric_outputs(response, requested)
    if outputs is None:
        return None
    return plain_grpc_response(request_id, plan.model_name, plan.version_text, outputs)
