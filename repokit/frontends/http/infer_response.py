"""InferResponse -> HTTP body + headers (Triton's ``InferRequestClass::FinalizeResponse``).

The JSON header is written once with orjson; binary outputs follow it in the order the outputs
appear in the JSON. The parts are kept apart (:attr:`EncodedResponse.parts`) so the endpoint
writes them to the socket one after the other instead of joining megabytes into one buffer. A
response carries ``Content-Type: application/octet-stream`` and
``Inference-Header-Content-Length`` only when at least one binary output has bytes (zero-byte
binary outputs add none, as in Triton).

Non-finite floats: orjson writes NaN/Infinity as ``null`` where Triton writes the bare tokens,
so a header that contains ``null`` while a JSON output is floating point is checked exactly and
rewritten with the standard library (rare); every other response costs one substring search.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from repokit.frontends.http.infer_request import DecodedInfer
from repokit.protocol.json_codec import array_to_json
from repokit.protocol.plain_response import PLAIN_JSON_OUTPUTS, plain_json_response
from repokit.protocol.tensor_codec import array_to_bytes
from repokit.protocol.types import InferResponse

JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"
# datatypes whose JSON form is a plain ``tolist()`` (BYTES decode, FP16/BF16 refuse JSON)
_PLAIN_JSON = PLAIN_JSON_OUTPUTS


@dataclass
class EncodedResponse:
    head: bytes  # the JSON header (the whole body when there is no binary output)
    content_type: str
    header_length: int | None  # Inference-Header-Content-Length for binary bodies
    blobs: list[bytes | memoryview] = field(default_factory=list)  # binary outputs, in order

    @property
    def parts(self) -> list[bytes | memoryview]:
        return [self.head, *self.blobs]

    @property
    def size(self) -> int:
        return len(self.head) + sum(memoryview(b).nbytes for b in self.blobs)

    @property
    def body(self) -> bytes:
        """The whole body in one buffer (compression and tests; the endpoint streams parts)."""
        if not self.blobs:
            return self.head
        return b"".join(self.parts)


def _has_non_finite(array: Any) -> bool:
    return bool(array.dtype.kind == "f" and array.size and not np.isfinite(array).all())


def encode_infer_response(response: InferResponse, decoded: DecodedInfer) -> EncodedResponse:
    """The response's body: a plain response (no parameters, every output as JSON data) as
    :func:`repokit.protocol.plain_response.plain_json_response` writes it (a python instance on
    the wire lane too), anything else here."""
    if not (
        response.parameters
        or response.shm_outputs
        or decoded.default_binary
        or any(decoded.binary_outputs.values())
    ):
        plain = plain_json_response(
            response.id,
            response.model_name,
            str(response.model_version),
            [(t.name, t.datatype, t.shape, t.data) for t in response.outputs],
        )
        if plain is not None:
            return EncodedResponse(plain, JSON_CONTENT_TYPE, None)
    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = dict(response.parameters)
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes | memoryview] = []
    binary_outputs = decoded.binary_outputs
    default_binary = decoded.default_binary
    float_json: list[Any] = []  # JSON outputs that could hold NaN/Infinity
    for tensor in response.outputs:
        name = tensor.name
        datatype = tensor.datatype
        data = tensor.data
        if binary_outputs.get(name, default_binary):
            raw = array_to_bytes(datatype, data)
            size = memoryview(raw).nbytes
            outputs.append(
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": [int(d) for d in tensor.shape],
                    "parameters": {"binary_data_size": size},
                }
            )
            if size:
                blobs.append(raw)
            continue
        if datatype in _PLAIN_JSON:
            values = data.ravel().tolist()
            if data.dtype.kind == "f":
                float_json.append(data)
        else:
            values = array_to_json(datatype, data, output_name=name)
        outputs.append(
            {
                "name": name,
                "datatype": datatype,
                "shape": [int(d) for d in tensor.shape],
                "data": values,
            }
        )
    for name, (_ref, datatype, shape) in response.shm_outputs.items():
        outputs.append({"name": name, "datatype": datatype, "shape": [int(d) for d in shape]})
    header["outputs"] = outputs
    head = orjson.dumps(header)
    if float_json and b"null" in head and any(_has_non_finite(a) for a in float_json):
        # orjson wrote NaN/Infinity as null; Triton writes the bare tokens (rapidjson flags).
        head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    if not blobs:
        return EncodedResponse(head, JSON_CONTENT_TYPE, None)
    return EncodedResponse(head, BINARY_CONTENT_TYPE, len(head), blobs)
