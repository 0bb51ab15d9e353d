"""What a frontend hands the core with an encoded infer request: its protocol's codec.

A frontend makes one call per unary infer request,
:meth:`InferenceService.infer_encoded(codec, model, version, raw)
<repokit.core.service.InferenceService.infer_encoded>`, with the request as it arrived (``raw``)
and the codec of its protocol. The core decides the rest: a small request for a model with a
wire lane (:mod:`repokit.core.wire_lane`) goes to the instance process as its bytes, which the
instance decodes and answers with the encoded response (its side of the codec, named by
:attr:`InferCodec.lane`); anything else, and every request the instance hands back, is decoded
here (once) and runs on the standard path. Either way the frontend gets one type back, the
codec's encoded response.

The codecs: :class:`repokit.frontends.http.infer_codec.HttpInferCodec` (KServe v2 JSON and the
binary tensor extension) and :class:`repokit.frontends.grpc.infer_codec.GrpcInferCodec`
(ModelInferRequest bytes).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from repokit.protocol.types import InferRequest, InferResponse

RawT = TypeVar("RawT", contravariant=True)
DecodedT = TypeVar("DecodedT")
OutT = TypeVar("OutT", covariant=True)


class InferCodec(Protocol[RawT, DecodedT, OutT]):
    """Decode and encode of one protocol's unary infer requests, on both sides of the
    process boundary: the server side here, the instance side named by :attr:`lane`."""

    @property
    def lane(self) -> str:
        """The name of this protocol's decoder and encoder in a python instance process
        (:mod:`repokit.backends.python.wire_grpc` "grpc", :mod:`.wire_http` "json")."""

    @property
    def lane_limit(self) -> int:
        """The server's maximum input size, for the instance's decoder (0: none)."""

    @property
    def decoupled_message(self) -> str:
        """The UNSUPPORTED message for a request to a decoupled model."""

    @property
    def trace_stamps(self) -> tuple[str, str, str, str]:
        """The timestamps a traced request records before and after it is decoded, and before
        and after its response is encoded ("": none; the frontend records the others)."""

    def lane_bytes(self, raw: RawT) -> bytes | None:
        """The bytes an instance decodes when the request may take the wire lane, else None
        (a form the instance's decoder never takes)."""

    def decode(self, raw: RawT, model: str, version: str) -> DecodedT:
        """The request decoded on the server (RepokitError with the protocol's messages)."""

    def request(self, decoded: DecodedT) -> InferRequest:
        """The protocol request of a decoded one."""

    def encode(self, decoded: DecodedT, response: InferResponse) -> OutT:
        """The encoded response to a decoded request."""

    def encoded(self, body: bytes) -> OutT:
        """The encoded response an instance built (:meth:`lane_bytes` took the request)."""
