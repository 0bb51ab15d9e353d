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

Large JSON outputs: ``tolist`` and ``orjson.dumps`` hold the GIL for the whole array (an
80 MiB FP32 tensor took about a second), and every client of the event loop waited meanwhile.
:func:`encode_infer_response_async` therefore writes the ``data`` of responses with at least
:data:`LARGE_JSON_ELEMENTS` JSON elements in chunks of :data:`JSON_CHUNK_ELEMENTS`, letting the
loop serve others between chunks; the bytes are the same as :func:`encode_infer_response`'s.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from repokit.frontends.http.infer_request import DecodedInfer
from repokit.protocol.json_codec import array_to_json
from repokit.protocol.tensor_codec import array_to_bytes
from repokit.protocol.types import InferResponse

JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"
# datatypes whose JSON form is a plain ``tolist()`` (BYTES decode, FP16/BF16 refuse JSON)
_PLAIN_JSON = frozenset(
    {"BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP32",
     "FP64"}
)  # fmt: skip


# responses with at least this many elements in JSON outputs are encoded chunk by chunk
LARGE_JSON_ELEMENTS = 1 << 18
JSON_CHUNK_ELEMENTS = 1 << 16


@dataclass
class EncodedResponse:
    head: bytes  # the JSON header (the whole body when there is no binary output)
    content_type: str
    header_length: int | None  # Inference-Header-Content-Length for binary bodies
    # binary outputs, in order; or, for a large JSON body (header_length None), the rest of
    # its text after ``head``
    blobs: list[bytes | memoryview] = field(default_factory=list)

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


def json_elements(response: InferResponse, decoded: DecodedInfer) -> int:
    """How many elements the response's JSON (not binary) outputs hold."""
    binary_outputs = decoded.binary_outputs
    default_binary = decoded.default_binary
    return sum(
        int(t.data.size) for t in response.outputs if not binary_outputs.get(t.name, default_binary)
    )


async def encode_infer_response_async(
    response: InferResponse, decoded: DecodedInfer
) -> EncodedResponse:
    """:func:`encode_infer_response`, in chunks that let the event loop run in between when
    the JSON outputs are large."""
    if json_elements(response, decoded) < LARGE_JSON_ELEMENTS:
        return encode_infer_response(response, decoded)
    deferred: list[tuple[str, str, Any, str]] = []
    # NaN/Infinity in a JSON output: the whole body is written by the standard library
    standard = any(
        _has_non_finite(t.data)
        for t in response.outputs
        if not decoded.binary_outputs.get(t.name, decoded.default_binary)
    )
    encoded = encode_infer_response(response, decoded, deferred, standard_json=standard)
    parts: list[bytes] = []
    head = encoded.head
    position = 0
    for token, datatype, data, name in deferred:
        marker = b'"' + token.encode() + b'"'
        found = head.index(marker, position)
        parts.append(head[position:found])
        parts.append(b"[")
        flat = data.reshape(-1)
        first = True
        for start in range(0, flat.size, JSON_CHUNK_ELEMENTS):
            part = flat[start : start + JSON_CHUNK_ELEMENTS]
            text = _json_array(datatype, part, name, standard)
            if len(text) > 2:
                if not first:
                    parts.append(b",")
                parts.append(text[1:-1])
                first = False
            await asyncio.sleep(0)  # other clients are served between chunks
        parts.append(b"]")
        position = found + len(marker)
    parts.append(head[position:])
    if not encoded.blobs:  # the JSON text stays in its parts: joining it would stall again
        return EncodedResponse(parts[0], JSON_CONTENT_TYPE, None, list(parts[1:]))
    header = b"".join(parts)
    return EncodedResponse(header, BINARY_CONTENT_TYPE, len(header), encoded.blobs)


def _json_array(datatype: str, part: Any, name: str, standard: bool) -> bytes:
    """One chunk of an output's ``data`` as a JSON array."""
    if datatype in _PLAIN_JSON:
        values = part.tolist()
    else:
        values = array_to_json(datatype, part, output_name=name)
    if standard:
        return json.dumps(values, separators=(",", ":"), allow_nan=True).encode()
    return orjson.dumps(values)


def encode_infer_response(
    response: InferResponse,
    decoded: DecodedInfer,
    deferred: list[tuple[str, str, Any, str]] | None = None,
    *,
    standard_json: bool = False,
) -> EncodedResponse:
    """The response's body. With ``deferred``, JSON outputs are not written: each gets a
    unique placeholder string in the header and ``(placeholder, datatype, data, name)`` in
    ``deferred`` (see :func:`encode_infer_response_async`)."""
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
        if deferred is not None:
            if datatype not in _PLAIN_JSON:  # refuses FP16/BF16 with its error, as below
                array_to_json(datatype, data[:0], output_name=name)
            token = f"repokit-deferred-{uuid.uuid4().hex}"
            deferred.append((token, datatype, data, name))
            values: Any = token
        elif datatype in _PLAIN_JSON:
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
    if standard_json or (
        float_json and b"null" in head and any(_has_non_finite(a) for a in float_json)
    ):
        # orjson wrote NaN/Infinity as null; Triton writes the bare tokens (rapidjson flags).
        head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    if not blobs:
        return EncodedResponse(head, JSON_CONTENT_TYPE, None)
    return EncodedResponse(head, BINARY_CONTENT_TYPE, len(head), blobs)
