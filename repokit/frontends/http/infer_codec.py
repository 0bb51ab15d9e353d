"""The HTTP/REST infer codec: request bodies in, encoded responses out (see
:mod:`repokit.core.infer_codec`).

Server side: :func:`.infer_request.decode_infer_request` and
:func:`.infer_response.encode_infer_response`. Instance side (``lane`` "json"):
:mod:`repokit.backends.python.wire_http`, which takes JSON-only bodies (no
``Inference-Header-Content-Length``) of at most the server's maximum input size.
"""

from __future__ import annotations

from typing import NamedTuple

from repokit.frontends.http.infer_request import (
    DecodedInfer,
    decode_infer_request,
    parse_header_length,
)
from repokit.frontends.http.infer_response import (
    JSON_CONTENT_TYPE,
    EncodedResponse,
    encode_infer_response,
)
from repokit.protocol.types import InferRequest, InferResponse

DECOUPLED_MESSAGE = "HTTP end point doesn't support models with decoupled transaction policy"


class HttpInferBody(NamedTuple):
    """An infer request as it arrived: the (uncompressed) body and the raw value of its
    ``Inference-Header-Content-Length`` header (None when absent)."""

    body: bytes | memoryview  # a large body: a read-only view of the buffer it was read into
    header_length: str | None
    # headers forwarded as parameters (--http-header-forward-pattern; None: none)
    forwarded: dict[str, str] | None = None


class HttpInferCodec:
    def __init__(self, max_input_size: int) -> None:
        self.lane_limit = max_input_size
        self.lane = "json"
        self.decoupled_message = DECOUPLED_MESSAGE
        # HTTP_RECV_START and HTTP_SEND_* are the endpoint's (around reading and writing)
        self.trace_stamps = ("", "HTTP_RECV_END", "", "")

    def lane_bytes(self, raw: HttpInferBody) -> bytes | None:
        body = raw.body
        if raw.header_length is None and len(body) <= self.lane_limit and not raw.forwarded:
            return body if type(body) is bytes else bytes(body)
        return None

    def decode(self, raw: HttpInferBody, model: str, version: str) -> DecodedInfer:
        body = raw.body
        header_length = parse_header_length(raw.header_length, len(body))
        decoded = decode_infer_request(model, version, body, header_length, self.lane_limit)
        if raw.forwarded:
            decoded.request.parameters.update(raw.forwarded)
        return decoded

    def request(self, decoded: DecodedInfer) -> InferRequest:
        return decoded.request

    def encode(self, decoded: DecodedInfer, response: InferResponse) -> EncodedResponse:
        return encode_infer_response(response, decoded)

    def encoded(self, body: bytes) -> EncodedResponse:
        return EncodedResponse(body, JSON_CONTENT_TYPE, None)
