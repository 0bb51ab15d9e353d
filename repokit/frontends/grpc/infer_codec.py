"""The gRPC infer codec: ModelInferRequest bytes in, serialized ModelInferResponse bytes out
(see :mod:`repokit.core.infer_codec`).

Server side: :func:`.codec.decode_infer_request` and :func:`.codec.encode_infer_response`, on
the message the servicer parsed (it needs the model's name), so a request is parsed once here.
Instance side (``lane`` "grpc"): :mod:`repokit.backends.python.wire_grpc`.
"""

from __future__ import annotations

from typing import NamedTuple

from repokit.frontends.grpc.codec import (
    RAW_SPLIT_BYTES,
    DecodedRequest,
    decode_infer_request,
    encode_infer_response_message,
)
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.grpc_raw import MessageParts
from repokit.protocol.plain_request import PlainOutput
from repokit.protocol.plain_response import plain_grpc_response
from repokit.protocol.types import InferRequest, InferResponse

DECOUPLED_MESSAGE = "ModelInfer RPC doesn't support models with decoupled transaction policy"


class GrpcInferCall(NamedTuple):
    """A ModelInfer request as it arrived and as the servicer parsed it (``raw_contents``: the
    raw input contents of a large request, parsed apart: :func:`.codec.parse_infer_request`)."""

    raw: bytes
    message: pb.ModelInferRequest
    raw_contents: list[memoryview] | None
    # metadata forwarded as parameters (--grpc-header-forward-pattern; None: none)
    forwarded: dict[str, str] | None = None


class GrpcInferCodec:
    def __init__(self) -> None:
        self.lane = "grpc"
        self.lane_limit = 0  # gRPC has its own message size limit
        self.decoupled_message = DECOUPLED_MESSAGE
        # grpc has read the message before the handler runs, and writes it after it returns
        self.trace_stamps = (
            "GRPC_WAITREAD_START",
            "GRPC_WAITREAD_END",
            "GRPC_SEND_START",
            "GRPC_SEND_END",
        )

    def lane_bytes(self, raw: GrpcInferCall) -> bytes | None:
        if raw.raw_contents is None and not raw.forwarded:  # large ones are not for the lane
            return raw.raw
        return None

    def decode(self, raw: GrpcInferCall, model: str, version: str) -> DecodedRequest:
        decoded = decode_infer_request(raw.message, raw.raw_contents)
        decoded.request.model_version = version
        if raw.forwarded:
            decoded.request.parameters.update(raw.forwarded)
        return decoded

    def request(self, decoded: DecodedRequest) -> InferRequest:
        return decoded.request

    def encode(self, decoded: DecodedRequest, response: InferResponse) -> bytes | MessageParts:
        """A plain response as :func:`repokit.protocol.plain_response.plain_grpc_response` writes
        it (a python instance on the wire lane too); anything else, and outputs of more than
        :data:`.codec.RAW_SPLIT_BYTES` (their memory as parts of the message, apart from the
        protobuf runtime: the native transport writes them as they are), by the general
        encoder."""
        if not response.parameters and not response.shm_outputs:
            outputs: list[PlainOutput] = []
            size = 0
            for t in response.outputs:
                if t.parameters:  # e.g. classification labels' parameters
                    break
                outputs.append((t.name, t.datatype, t.shape, t.data))
                size += t.data.nbytes
            else:
                if size <= RAW_SPLIT_BYTES:
                    plain = plain_grpc_response(
                        response.id, response.model_name, response.model_version, outputs
                    )
                    if plain is not None:
                        return plain
        return encode_infer_response_message(response)

    def encoded(self, body: bytes) -> bytes | MessageParts:
        return body
