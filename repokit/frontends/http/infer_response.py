"""InferResponse -> HTTP body + headers (Triton's ``InferRequestClass::FinalizeResponse``).

The JSON header is written once with orjson; binary outputs follow it in the order the outputs
appear in the JSON, and the body is joined once. A response carries
``Content-Type: application/octet-stream`` and ``Inference-Header-Content-Length`` only when
at least one binary output has bytes (zero-byte binary outputs add none, as in Triton).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from repokit.frontends.http.infer_request import DecodedInfer
from repokit.protocol.json_codec import array_to_json
from repokit.protocol.tensor_codec import array_to_bytes
from repokit.protocol.types import InferResponse

JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"


@dataclass
class EncodedResponse:
    body: bytes
    content_type: str
    header_length: int | None  # Inference-Header-Content-Length for binary bodies


def _has_non_finite(array: Any) -> bool:
    return bool(array.dtype.kind == "f" and array.size and not np.isfinite(array).all())


def encode_infer_response(response: InferResponse, decoded: DecodedInfer) -> EncodedResponse:
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
    non_finite = False
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": [int(d) for d in tensor.shape],
        }
        if binary_outputs.get(tensor.name, default_binary):
            raw = array_to_bytes(tensor.datatype, tensor.data)
            size = memoryview(raw).nbytes
            entry["parameters"] = {"binary_data_size": size}
            if size:
                blobs.append(raw)
        else:
            data = tensor.data
            if not non_finite and _has_non_finite(data):
                non_finite = True
            entry["data"] = array_to_json(tensor.datatype, data, output_name=tensor.name)
        outputs.append(entry)
    for name, (_ref, datatype, shape) in response.shm_outputs.items():
        outputs.append({"name": name, "datatype": datatype, "shape": [int(d) for d in shape]})
    header["outputs"] = outputs
    if non_finite:
        # orjson writes NaN/Infinity as null; Triton writes the bare tokens (rapidjson flags).
        head = json.dumps(header, separators=(",", ":"), allow_nan=True).encode()
    else:
        head = orjson.dumps(header)
    if not blobs:
        return EncodedResponse(head, JSON_CONTENT_TYPE, None)
    return EncodedResponse(b"".join([head, *blobs]), BINARY_CONTENT_TYPE, len(head))
