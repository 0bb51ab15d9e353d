"""gRPC ModelInfer straight from and to wire bytes, in the instance process.

The server hands a plain ModelInferRequest to the instance as the bytes it received, and gets
the serialized ModelInferResponse back (:mod:`repokit.core.wire_lane`): the decoding, the
checks and the encoding then run here, beside the model, instead of on the server's event loop.

:func:`decode_request` accepts exactly the requests the server's fast path accepts
(:func:`repokit.core.request_fast_path.prepare_plain` after
:func:`repokit.frontends.grpc.codec.decode_infer_request`): every input once, in
``raw_input_contents``, with the model's datatype, a shape matching the config and the exact
byte size, no parameters anywhere (sequence ids, priorities, shared memory, classification),
requested outputs that exist. Anything else returns None, before the model runs, and the server
takes the request through its full path, which decides any error and its message; so this path
never changes an answer, it only moves work. :func:`encode_response` builds the response the
server would build for a successful response with numeric outputs and no parameters; for
anything else it returns None and the reply travels in the usual packed form.

The generated protobuf types are imported on the first request (a model that is never asked
over gRPC does not load them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from repokit.backends.wire_plan import WirePlan

if TYPE_CHECKING:
    from repokit.backends.python.pb_utils import InferenceResponse

# numpy dtypes (native byte order) sent as they are, and their protocol names (the server's
# ``datatypes.from_numpy`` gives the same names)
_DATATYPES: dict[np.dtype[Any], str] = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
}

# a decoded request: [(input name, array)], requested output names, request id, batch size
# (0 when the model does not batch)
DecodedRequest = tuple[list[tuple[str, "np.ndarray[Any, Any]"]], set[str], str, int]


def _messages() -> Any:
    from repokit.protocol.generated import grpc_service_pb2

    return grpc_service_pb2


def decode_request(raw: bytes, plan: WirePlan) -> DecodedRequest | None:
    """The request's inputs as writable arrays, or None when the server must take it."""
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
        name = tensor.name
        entry = expected.get(name)
        if entry is None or name in seen or tensor.parameters or tensor.HasField("contents"):
            return None
        seen.add(name)
        datatype, dims, dtype, count = entry
        if tensor.datatype != datatype:
            return None
        shape = tuple(tensor.shape)
        if max_batch:
            if len(shape) != len(dims) + 1:
                return None
            batch = shape[0]
            if batch_size == 0:
                if batch < 1 or batch > max_batch:
                    return None
                batch_size = batch
            elif batch != batch_size:
                return None
            item = shape[1:]
        else:
            batch = 1
            item = shape
        if count < 0:
            if len(item) != len(dims):
                return None
            count = 1
            for got, want in zip(item, dims, strict=True):
                if got < 0 or (want != -1 and want != got):
                    return None
                count *= got
        elif item != dims:
            return None
        data = contents[index]
        if len(data) != batch * count * dtype.itemsize:
            return None
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
    """The serialized ModelInferResponse, or None when the packed form must carry it (an
    error, response parameters, or an output that is not a plain numeric array)."""
    if response.error() is not None or response.parameter_dict():
        return None
    msg = _messages().ModelInferResponse(
        model_name=plan.model_name, model_version=plan.version_text, id=request_id
    )
    add_output = msg.outputs.add
    contents = msg.raw_output_contents
    try:
        for tensor in response.output_tensors():
            name = tensor.name()
            if name not in requested:
                continue
            array = tensor.as_numpy()
            datatype = _DATATYPES.get(array.dtype)
            if datatype is None:  # also a non-native byte order
                return None
            add_output(name=name, datatype=datatype, shape=array.shape)
            contents.append(np.ascontiguousarray(array).tobytes())
    except Exception:  # e.g. a BF16 tensor: the packed form reports it as it always has
        return None
    body: bytes = msg.SerializeToString()
    return body
