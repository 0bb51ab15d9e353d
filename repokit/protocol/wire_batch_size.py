"""The batch size of a request given as its wire bytes, read without decoding its tensors.

The dynamic batcher's wire lane (:mod:`repokit.core.wire_lane`) queues requests as the bytes
they arrived in; the batcher needs each one's batch size to form batches, and the instance
process decodes the rest. The batch size is the first dim of the request's first input, as the
plain-request rules read it (:func:`repokit.protocol.plain_request.fit_plain_shape`: every
input of a plain request has the same first dim, from 1 to ``max_batch_size``). The instance
decodes the request with those rules, so a request it takes has exactly this batch size; one
that it does not take runs on the standard path, which decides any error. None here means "not
a request for the lane" (the standard path takes it at once).

What decides where a request queues is refused here already, not left to the instance: request
parameters (a priority, a queue timeout, sequence controls) and input parameters (shared
memory, binary data), which the lane's decoders refuse too. Such a request queued here would
wait at the default priority level, and its turn would be lost when the instance hands it back.
"""

from __future__ import annotations

from typing import Any

# what a JSON request on the lane may hold (the HTTP lane decoder's own rule)
_REQUEST_KEYS = frozenset({"id", "inputs", "outputs"})


def _orjson() -> Any:
    import orjson

    return orjson


def _infer_request() -> Any:
    from repokit.protocol.generated import grpc_service_pb2

    return grpc_service_pb2.ModelInferRequest


def json_batch_size(body: bytes, max_batch_size: int) -> int | None:
    """The batch size of an HTTP JSON infer request body (0 when the model does not batch)."""
    try:
        document = _orjson().loads(body)
    except Exception:
        return None
    if type(document) is not dict or not document.keys() <= _REQUEST_KEYS:
        return None
    inputs = document.get("inputs")
    if type(inputs) is not list or not inputs:
        return None
    for item in inputs:
        if type(item) is not dict or "parameters" in item:
            return None
    if max_batch_size <= 0:
        return 0
    shape = inputs[0].get("shape")
    if type(shape) is not list or not shape:
        return None
    return _fitting(shape[0], max_batch_size)


def grpc_batch_size(raw: bytes, max_batch_size: int) -> int | None:
    """The batch size of a serialized ModelInferRequest (0 when the model does not batch)."""
    try:
        message = _infer_request().FromString(raw)
    except Exception:
        return None
    inputs = message.inputs
    if message.parameters or not inputs:
        return None
    for tensor in inputs:
        if tensor.parameters:
            return None
    if max_batch_size <= 0:
        return 0
    if not inputs[0].shape:
        return None
    return _fitting(inputs[0].shape[0], max_batch_size)


def _fitting(batch: Any, max_batch_size: int) -> int | None:
    if type(batch) is not int or batch < 1 or batch > max_batch_size:
        return None
    return batch


# the wire lane's codecs (``InferCodec.lane``) -> the reader of their batch sizes
BATCH_SIZE_READERS = {"json": json_batch_size, "grpc": grpc_batch_size}


def wire_batch_size(codec: str, raw: bytes, max_batch_size: int) -> int | None:
    """The batch size of ``raw`` in the lane protocol ``codec``; None when it is not one the
    lane can queue (see the module docstring)."""
    reader = BATCH_SIZE_READERS.get(codec)
    return None if reader is None else reader(raw, max_batch_size)
