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
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.plain_request import plain_input
from repokit.protocol.plain_response import plain_grpc_response

if TYPE_CHECKING:
    from repokit.backends.python.pb_utils import InferenceResponse

# a decoded request: [(input name, array)], requested output names, request id, batch size
# (0 when the model does not batch)
DecodedRequest = tuple[list[tuple[str, "np.ndarray[Any, Any]"]], set[str], str, int]


def _messages() -> Any:
    from repokit.protocol.generated import grpc_service_pb2

    return grpc_service_pb2


def decode_request(raw: bytes, plan: WirePlan, limit: int = 0) -> DecodedRequest | None:
    """The request's inputs as writable arrays, or None when the server must take it
    (``limit`` is for the HTTP decoder's signature: gRPC has its message size limit)."""
    try:
        msg = _messages().ModelInferRequest.FromString(raw)
    except Exception:  # the server parsed these bytes; never decide an error here
        return None
    contents = msg.raw_input_contents
    tensors = msg.inputs
    expected = plan.inputs
    if msg.parameters or len(tensors) != len(expected) or len(contents) != len(tensors):
        return None
    max_batch = plan.max_batch_size
    batch_size = 0
    arrays: list[tuple[str, np.ndarray[Any, Any]]] = []
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        if tensor.parameters or tensor.HasField("contents"):
            return None
        name = tensor.name
        data = contents[index]
        shape = tuple(tensor.shape)
        checked = plain_input(
            expected, max_batch, seen, name, tensor.datatype, shape, len(data), batch_size
        )
        if checked is None:
            return None
        dtype, batch_size = checked
        seen.add(name)
        # a writable copy, as the packed path delivers (models may write into their inputs)
        arrays.append((name, np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)))
    requested: set[str] = set()
    for output in msg.outputs:
        if output.parameters or output.name not in plan.outputs:
            return None
        requested.add(output.name)
    return arrays, requested or set(plan.outputs), msg.id, batch_size


def encode_response(
    plan: WirePlan, response: InferenceResponse, requested: set[str], request_id: str
) -> bytes | None:
    """The serialized ModelInferResponse (:mod:`repokit.protocol.plain_response`, as the server
    writes it), or None when the packed form must carry it (an error, response parameters, or
    an output that is not a plain numeric array)."""
    outputs = numeric_outputs(response, requested)
    if outputs is None:
        return None
    return plain_grpc_response(request_id, plan.model_name, plan.version_text, outputs)
