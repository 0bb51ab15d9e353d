"""How an infer request that crosses still encoded, and its encoded answer, travel.

A worker decodes most requests itself and sends the core's ``InferRequest``; a request the
model's instances may decode themselves (a wire lane) or that the scheduling process traces
crosses as it arrived, and the scheduling process runs
:meth:`~repokit.core.service.InferenceService.infer_encoded` with the same codec (named by its
``lane``: "json" for HTTP, "grpc"). Each protocol's raw request and encoded response get a
picklable form here: gRPC's request as its bytes (parsed again on arrival), HTTP's binary
outputs as buffers (out of band when large).
"""

from __future__ import annotations

import pickle
from typing import Any

from repokit.core.infer_codec import InferCodec
from repokit.frontends.grpc.codec import parse_infer_request
from repokit.frontends.grpc.infer_codec import GrpcInferCall, GrpcInferCodec
from repokit.frontends.http.infer_codec import HttpInferBody, HttpInferCodec
from repokit.frontends.http.infer_response import EncodedResponse
from repokit.protocol.grpc_raw import MessageParts

HTTP_LANE = "json"
GRPC_LANE = "grpc"

AnyCodec = InferCodec[Any, Any, Any]


class Codecs:
    """The scheduling process's codecs, one per (lane, input size limit)."""

    def __init__(self) -> None:
        self._codecs: dict[tuple[str, int], AnyCodec] = {}

    def get(self, lane: str, limit: int) -> AnyCodec:
        codec = self._codecs.get((lane, limit))
        if codec is None:
            if lane == HTTP_LANE:
                codec = HttpInferCodec(limit)
            elif lane == GRPC_LANE:
                codec = GrpcInferCodec()
            else:
                raise ValueError(f"no infer codec for lane '{lane}'")
            self._codecs[(lane, limit)] = codec
        return codec


def request_form(lane: str, raw: Any) -> Any:
    """The picklable form of a raw request of ``lane``."""
    if lane == GRPC_LANE:
        call: GrpcInferCall = raw
        data: Any = call.raw
        data = data if isinstance(data, bytes) else bytes(data)
        return (data, call.forwarded) if call.forwarded else data
    return raw  # HttpInferBody: bytes, a header value and any forwarded headers


def request_of(lane: str, form: Any) -> Any:
    """The raw request of :func:`request_form`'s ``form`` (raises DecodeError as the
    servicer's parse did: it parsed these bytes once already)."""
    if lane == GRPC_LANE:
        data, forwarded = form if isinstance(form, tuple) else (form, None)
        message, contents = parse_infer_request(data)
        return GrpcInferCall(data, message, contents, forwarded)
    body: HttpInferBody = form
    return body


def response_form(out: Any) -> Any:
    """The picklable form of an encoded response (HTTP: its parts as buffers; gRPC: bytes, or
    a large response's parts as a list of buffers)."""
    if isinstance(out, EncodedResponse):
        blobs = [pickle.PickleBuffer(blob) for blob in out.blobs]
        return (out.head, out.content_type, out.header_length, blobs)
    if isinstance(out, MessageParts):
        return [pickle.PickleBuffer(part) for part in out.parts]
    return out  # gRPC: bytes


def response_of(form: Any) -> Any:
    if isinstance(form, tuple):
        head, content_type, header_length, blobs = form
        return EncodedResponse(head, content_type, header_length, [memoryview(b) for b in blobs])
    if isinstance(form, list):
        return MessageParts([memoryview(part) for part in form])
    return form
