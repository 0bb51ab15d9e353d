"""The gRPC response of a plain request, in one place: a successful ModelInferResponse without
parameters whose outputs are fixed-size numeric arrays, each in ``raw_output_contents``.

Written by the server (:class:`repokit.frontends.grpc.infer_codec.GrpcInferCodec`) and by a
python instance on the wire lane (:mod:`repokit.backends.python.wire_grpc`); anything else
(response or output parameters, BYTES or BF16 outputs, shared-memory outputs) is the server's
general encoder's (:func:`repokit.frontends.grpc.codec.encode_infer_response`). numpy only at
import: the generated protobuf types load with the first response (a python instance that is
never asked over gRPC does not load them).
"""

from __future__ import annotations

import numpy as np

from repokit.protocol.datatypes import NUMPY_TO_PROTOCOL
from repokit.protocol.plain_request import PlainOutput


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
