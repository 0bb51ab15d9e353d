"""Plain responses, encoded in one place for every protocol and both sides of the process
boundary: the server's codecs (:mod:`repokit.frontends.http.infer_response`,
:mod:`repokit.frontends.grpc.infer_codec`) and a python instance on the wire lane
(:mod:`repokit.backends.python.wire_http`, :mod:`repokit.backends.python.wire_grpc`) call these.

A plain response is a successful one without parameters whose outputs are numeric arrays of
their datatype's native dtype (:data:`~repokit.protocol.plain_request.PlainOutput`): over HTTP
the JSON body with every output as JSON data, over gRPC a ``ModelInferResponse`` with every
output in ``raw_output_contents``. Each function returns None for a response that is not plain
(BYTES or BF16 outputs, NaN in JSON, ...): the server's general encoders
(:func:`repokit.frontends.http.infer_response.encode_infer_response`,
:func:`repokit.frontends.grpc.codec.encode_infer_response`) then write it. numpy only at import:
orjson and the generated protobuf types load with the first response of their protocol (a
python instance that is never asked over gRPC does not load protobuf).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from repokit.protocol.datatypes import INTEGERS, JSON_FLOATS, NUMPY_TO_PROTOCOL
from repokit.protocol.plain_request import PlainOutput

# output datatypes written as plain JSON numbers or booleans (FP16 and BF16 have conversions of
# their own, BYTES are strings: the server's encoder writes those)
PLAIN_JSON_OUTPUTS = frozenset(("BOOL", *INTEGERS, *JSON_FLOATS))


def plain_json_response(
    request_id: str, model_name: str, model_version: str, outputs: list[PlainOutput]
) -> bytes | None:
    """The JSON body of a successful response without parameters whose outputs all go back as
    JSON data: where the HTTP response of a plain request is written, by the server
    (:func:`repokit.frontends.http.infer_response.encode_infer_response`) and by a python
    instance on the wire lane (:mod:`repokit.backends.python.wire_http`). None when an output is
    not plain (a datatype outside :data:`PLAIN_JSON_OUTPUTS`, NaN or infinity, which Triton
    writes as bare tokens): the server's encoder then writes the response."""
    header: dict[str, Any] = {}
    if request_id:
        header["id"] = request_id
    header["model_name"] = model_name
    header["model_version"] = model_version
    written: list[dict[str, Any]] = []
    for name, datatype, shape, array in outputs:
        if datatype not in PLAIN_JSON_OUTPUTS:
            return None
        data = array.ravel().tolist()
        if array.dtype.kind == "f":
            # NaN or an infinity makes the sum NaN or infinite (x - x is then NaN, not 0); a
            # sum that overflows only sends the response to the server's encoder. Summing the
            # list costs a fraction of np.isfinite(array).all() on small outputs.
            total = sum(data)
            if total - total != 0:
                return None
        written.append(
            {"name": name, "datatype": datatype, "shape": [int(d) for d in shape],
             "data": data}
        )  # fmt: skip
    header["outputs"] = written
    import orjson  # here: a python instance loads it with its first HTTP request

    body: bytes = orjson.dumps(header)
    return body


def plain_grpc_response(
    request_id: str, model_name: str, model_version: str, outputs: list[PlainOutput]
) -> bytes | None:
    """The serialized ModelInferResponse, or None when an output is not a fixed-size numeric
    array of its datatype's native dtype (BYTES, BF16, another dtype)."""
    from repokit.protocol.generated import grpc_service_pb2

    msg = grpc_service_pb2.ModelInferResponse(
        model_name=model_name, model_version=model_version, id=request_id
    )
    add_output = msg.outputs.add
    contents = msg.raw_output_contents
    for name, datatype, shape, array in outputs:
        if NUMPY_TO_PROTOCOL.get(array.dtype) != datatype:
            return None
        add_output(name=name, datatype=datatype, shape=shape)
        contents.append(np.ascontiguousarray(array).tobytes())
    body: bytes = msg.SerializeToString()
    return body
