"""HTTP infer request body -> InferRequest (KServe v2 JSON + Triton's binary tensor extension).

Follows Triton's ``HTTPAPIServer::HandleInfer`` / ``EVBufferToInput`` / ``ParseJsonTritonIO`` /
``ParseJsonTritonParams`` (server ``src/http_server.cc``) step by step, with Triton's messages.
The body is sliced with memoryviews; binary tensors become read-only ``uint8`` views of their
bytes, as gRPC's ``raw_input_contents`` do, so the core's request checks decide their byte size
(and BYTES elements) for both protocols, with Triton's core messages (request id included).
Plain JSON inputs and outputs take :mod:`repokit.protocol.plain_json` first; anything else
(and every error) goes through the checked path below.

Deliberate difference: every malformed-JSON / wrong-JSON-type error is INVALID_ARG (HTTP 400),
where Triton answers 500 because its TritonJson errors are INTERNAL (reference §1.4); the
KServe v2 spec asks for 400 on a bad request.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from repokit.errors import RepokitError, invalid_arg
from repokit.protocol import datatypes
from repokit.protocol.array_shape import shaped
from repokit.protocol.json_codec import array_from_json, strings_from_json
from repokit.protocol.model_version import parse_model_version as parse_model_version
from repokit.protocol.plain_json import plain_json_input, plain_output
from repokit.protocol.types import (
    InferRequest,
    InputSpec,
    ParamValue,
    RequestedOutput,
    SharedMemoryRef,
)

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
_STOI = re.compile(r"\s*([+-]?\d+)")
_HEADER = "Inference-Header-Content-Length"
_LIMIT_HINT = "Use --http-max-input-size to increase the limit."


@dataclass
class DecodedInfer:
    """The request plus how each output goes back (Triton's AllocPayload output kinds)."""

    request: InferRequest
    binary_outputs: dict[str, bool] = field(default_factory=dict)  # listed outputs only
    default_binary: bool = False  # outputs not listed (binary_data_output / raw requests)


# --- TritonJson-style accessors: INVALID_ARG with Triton's wording -----------------------------


def _not_string() -> str:
    return "attempt to access JSON non-string as string"


def _member_missing(name: str) -> str:
    return f"attempt to access non-existing object member '{name}'"


def _is_uint(value: Any) -> bool:
    return type(value) is int and 0 <= value <= UINT64_MAX


def _member_string(obj: Any, name: str, context: str) -> str:
    if not isinstance(obj, dict) or name not in obj:
        raise invalid_arg(f"{context}: {_member_missing(name)}")
    value = obj[name]
    if not isinstance(value, str):
        raise invalid_arg(f"{context}: {_not_string()}")
    return value


def _member_array(obj: Any, name: str, context: str) -> list[Any]:
    if not isinstance(obj, dict) or name not in obj:
        raise invalid_arg(f"{context}: {_member_missing(name)}")
    value = obj[name]
    if not isinstance(value, list):
        raise invalid_arg(f"{context}: attempt to access JSON non-array as array")
    return value


def _as_uint(value: Any, context: str) -> int:
    if not _is_uint(value):
        raise invalid_arg(
            f"{context}: attempt to access JSON non-unsigned-integer as unsigned-integer"
        )
    return int(value)


def _as_bool(value: Any, context: str) -> bool:
    if type(value) is not bool:
        raise invalid_arg(f"{context}: attempt to access JSON non-boolean as boolean")
    return value


def _params(obj: Any) -> dict[str, Any]:
    params = obj.get("parameters") if isinstance(obj, dict) else None
    return params if isinstance(params, dict) else {}


# --- body framing ------------------------------------------------------------------------------


def parse_header_length(value: str | None, content_length: int) -> int:
    """The JSON header length (``content_length`` when the header is absent), as Triton's
    ``GetInferenceHeaderLength`` (``std::stoi`` semantics: a leading integer is enough)."""
    if value is None:
        return content_length
    match = _STOI.match(value)
    if match is None:
        raise invalid_arg(f"Unable to parse {_HEADER}, got: {value}")
    parsed = int(match.group(1))
    if not -(2**31) <= parsed < 2**31:
        raise invalid_arg(
            f"Unable to parse {_HEADER}, value is out of range [ -2147483648, 2147483647 ], "
            f"got: {value}"
        )
    if parsed < 0 or parsed > content_length:
        raise invalid_arg(
            f"inference header size should be in range (0, {content_length}), got: {value}"
        )
    return parsed


def parse_json_document(buffer: bytes | memoryview, max_size: int) -> Any:
    """Parse a JSON request document; NaN/Infinity tokens are accepted as in Triton."""
    size = len(buffer)
    if size > max_size:
        raise invalid_arg(
            f"request JSON size of {size} bytes exceeds the maximum allowed input size of "
            f"{max_size} bytes. {_LIMIT_HINT}"
        )
    try:
        return orjson.loads(buffer)
    except orjson.JSONDecodeError as exc:
        # orjson rejects NaN/Infinity, which Triton's rapidjson flags accept: retry once with
        # the standard library (error path only), then report orjson's position. The standard
        # library also takes lone surrogates ("\\ud800"), which orjson and Triton refuse, and
        # numbers past the double range (1e400) as infinity, which both refuse too.
        try:
            document = json.loads(bytes(buffer), parse_float=_finite_float)
            if not _valid_unicode(document):
                raise ValueError("lone surrogate")
            return document
        except _TooBigForDouble as too_big:
            raise invalid_arg(f"failed to parse the request JSON buffer: {too_big}") from None
        except (ValueError, RecursionError):
            if not bytes(buffer).strip(b" \t\r\n"):  # RapidJSON's words, as Triton's
                raise invalid_arg(
                    f"failed to parse the request JSON buffer: The document is empty. at {size}"
                ) from None
            raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None


class _TooBigForDouble(ValueError):
    pass


def _finite_float(text: str) -> float:
    """A JSON number as a double; one too big for a double is refused (rapidjson's
    "Number too big to be stored in double"), the NaN and Infinity tokens are not numbers."""
    value = float(text)
    if math.isinf(value):
        raise _TooBigForDouble(f"number {text} is too big to be stored in double")
    return value


def _valid_unicode(document: Any) -> bool:
    """No string (key or value) in ``document`` holds a lone surrogate."""
    pending = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return False
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


# --- request -----------------------------------------------------------------------------------


def decode_infer_request(
    model_name: str,
    model_version: str,
    body: bytes | memoryview,
    header_length: int,
    max_input_size: int,
) -> DecodedInfer:
    """Decode an infer body whose JSON header is ``body[:header_length]`` (0 = raw request)."""
    view = memoryview(body)
    if header_length == 0:
        return _decode_raw(model_name, model_version, view, max_input_size)
    # a JSON-only body is parsed as it is (orjson reads bytes faster than a memoryview slice)
    head = body if header_length == len(view) else view[:header_length]
    document = parse_json_document(head, max_input_size)
    request = InferRequest(model_name, model_version)
    decoded = DecodedInfer(request, {})
    if isinstance(document, dict) and "id" in document:
        request_id = document["id"]
        if not isinstance(request_id, str):
            raise invalid_arg(f"Unable to parse 'id': {_not_string()}")
        request.id = request_id
    _parse_parameters(document, decoded)
    _parse_inputs(document, request, view, header_length, max_input_size)
    _parse_outputs(document, decoded)
    return decoded


def _decode_raw(
    model_name: str, model_version: str, view: memoryview, max_input_size: int
) -> DecodedInfer:
    size = len(view)
    if size > max_input_size:
        raise invalid_arg(
            f"Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value "
            f"of {max_input_size} bytes. {_LIMIT_HINT}"
        )
    # The core deduces the input's name, datatype and shape from the model's single input.
    raw = np.frombuffer(view, dtype=np.uint8)
    spec = InputSpec(name="", datatype="", shape=(size,), data=raw)
    request = InferRequest(
        model_name=model_name, model_version=model_version, inputs=[spec], raw_input=True
    )
    return DecodedInfer(request, default_binary=True)


def _parse_parameters(document: Any, decoded: DecodedInfer) -> None:
    if not isinstance(document, dict) or "parameters" not in document:
        return
    params = document["parameters"]
    if not isinstance(params, dict):
        raise invalid_arg("failed to get request params.: attempt to access JSON non-object")
    request = decoded.request
    custom: dict[str, ParamValue] = {}
    for key, value in params.items():
        if key == "sequence_id":
            if _is_uint(value):
                request.sequence_id = int(value)
            elif isinstance(value, str):
                request.sequence_id = value
            else:
                raise invalid_arg(f"Unable to parse 'sequence_id': {_not_string()}")
        elif key == "sequence_start":
            request.sequence_start = _as_bool(value, "Unable to parse 'sequence_start'")
        elif key == "sequence_end":
            request.sequence_end = _as_bool(value, "Unable to parse 'sequence_end'")
        elif key == "priority":
            request.priority = _as_uint(value, "Unable to parse 'priority'")
        elif key == "timeout":
            request.timeout_us = _as_uint(value, "Unable to parse 'timeout'")
        elif key == "binary_data_output":
            decoded.default_binary = _as_bool(value, "Unable to parse 'binary_data_output'")
        elif key.startswith("triton_"):
            raise invalid_arg(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        elif isinstance(value, (str, bool)) or (type(value) is int and value <= INT64_MAX):
            custom[key] = value
        elif isinstance(value, (int, float)):
            custom[key] = float(value)
        else:
            raise invalid_arg(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or "
                "'string'."
            )
    request.parameters = custom


def _check_content_fields(item: Any) -> None:
    """Exactly one of data / binary_data_size / shared_memory_region (Triton's
    ``ValidateInputContentType``)."""
    has_data = isinstance(item, dict) and "data" in item
    params = item.get("parameters") if isinstance(item, dict) else None
    has_binary = isinstance(params, dict) and "binary_data_size" in params
    has_shm = isinstance(params, dict) and "shared_memory_region" in params
    count = has_data + has_binary + has_shm
    if count == 1:
        return
    message = (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But"
    )
    if count == 0:
        message += " no field is set"
    else:
        message += " set"
        if has_data:
            message += " 'data'"
        if has_binary:
            message += " 'binary_data_size'"
        if has_shm:
            message += " 'shared_memory_region'"
    raise invalid_arg(message)


def _shm_ref(params: dict[str, Any]) -> SharedMemoryRef | None:
    if "shared_memory_region" not in params:
        return None
    region = params["shared_memory_region"]
    if not isinstance(region, str):
        raise invalid_arg(f"Unable to parse 'shared_memory_region': {_not_string()}")
    offset = 0
    if "shared_memory_offset" in params:
        offset = _as_uint(params["shared_memory_offset"], "Unable to parse 'shared_memory_offset'")
    byte_size = 0
    if "shared_memory_byte_size" in params:
        byte_size = _as_uint(
            params["shared_memory_byte_size"], "Unable to parse 'shared_memory_byte_size'"
        )
    return SharedMemoryRef(region=region, offset=offset, byte_size=byte_size)


def _element_count(name: str, shape: tuple[int, ...]) -> int:
    count = math.prod(shape)
    if count > INT64_MAX:
        raise invalid_arg(
            f"invalid shape for input '{name}': shape {_shape_text(shape)} causes total element "
            f"count to exceed maximum size of {INT64_MAX}"
        )
    return count


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _parse_inputs(
    document: Any,
    request: InferRequest,
    view: memoryview,
    header_length: int,
    max_input_size: int,
) -> None:
    items = _member_array(document, "inputs", "Unable to parse 'inputs'")
    model = request.model_name
    offset = header_length
    total = len(view)
    append = request.inputs.append
    for item in items:
        fast = plain_json_input(item, max_input_size)
        if fast is not None:
            append(fast)
            continue
        _check_content_fields(item)
        name = _member_string(item, "name", "Unable to parse 'name'")
        datatype = _member_string(item, "datatype", "Unable to parse 'datatype'")
        shape_json = _member_array(item, "shape", "Unable to parse 'shape'")
        shape = tuple(_as_uint(d, "Unable to parse 'shape'") for d in shape_json)
        params = _params(item)
        data: npt.NDArray[Any] | None
        shm: SharedMemoryRef | None = None
        if "binary_data_size" in params:
            byte_size = _as_uint(params["binary_data_size"], "Unable to parse 'binary_data_size'")
            available = total - offset
            if byte_size > available:
                raise invalid_arg(
                    f"unexpected size for input '{name}', expecting {byte_size - available} "
                    f"additional bytes for model '{model}'"
                )
            chunk = view[offset : offset + byte_size]
            offset += byte_size
            data = _binary_array(datatype, shape, chunk, name, model)
        elif "shared_memory_region" in params:
            shm = _shm_ref(params)
            data = None
        else:
            data = _json_array(item, name, datatype, shape, max_input_size)
        append(InputSpec(name=name, datatype=datatype, shape=shape, data=data, shm=shm))
    if offset != total:
        raise invalid_arg(f"unexpected additional input data for model '{model}'")


def _binary_array(
    datatype: str, shape: tuple[int, ...], chunk: memoryview, name: str, model: str
) -> npt.NDArray[Any]:
    if datatypes.from_protocol(datatype) is None:
        raise invalid_arg(
            f"inference input '{name}' data-type '{datatype}' is not a valid datatype for "
            f"model '{model}'"
        )
    _element_count(name, shape)
    return np.frombuffer(chunk, dtype=np.uint8)


def _json_array(
    item: dict[str, Any], name: str, datatype: str, shape: tuple[int, ...], max_input_size: int
) -> npt.NDArray[Any]:
    count = _element_count(name, shape)
    info = datatypes.from_protocol(datatype)
    if count == 0:
        dtype = np.uint8 if info is None else object if info.numpy is None else info.numpy
        return shaped(np.empty(0, dtype=dtype), shape)
    data = _member_array(item, "data", "Unable to parse 'data'")
    if datatype == "BYTES":
        return strings_from_json(data)
    if info is not None and info.itemsize > 0:
        byte_size = count * info.itemsize
        if byte_size > max_input_size:
            raise invalid_arg(
                f"JSON input '{name}' has a byte_size ({byte_size} bytes) that exceeds the "
                f"maximum allowed value of {max_input_size} bytes. {_LIMIT_HINT}"
            )
    try:
        return array_from_json(datatype, shape, data, input_name=name)
    except RepokitError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid_arg(f"Unable to parse 'data' for input '{name}': {exc}") from None


def _parse_outputs(document: Any, decoded: DecodedInfer) -> None:
    if not isinstance(document, dict) or "outputs" not in document:
        return
    items = _member_array(document, "outputs", "Unable to parse 'outputs'")
    binary_outputs = decoded.binary_outputs
    requested = decoded.request.outputs
    for item in items:
        fast = plain_output(item)
        if fast is not None:
            binary_outputs[fast[0]] = fast[1]
            requested.append(RequestedOutput(name=fast[0]))
            continue
        params = _params(item)
        if "shared_memory_region" in params:
            if "classification" in params:
                raise invalid_arg(
                    "Output can't set both 'shared_memory_region' and 'classification'"
                )
            if "binary_data" in params and _as_bool(
                params["binary_data"], "Unable to set 'binary_data'"
            ):
                raise invalid_arg("Output can't set both 'shared_memory_region' and 'binary_data'")
        name = _member_string(item, "name", "Unable to parse 'name'")
        classification = 0
        if "classification" in params:
            classification = _as_uint(params["classification"], "Unable to set 'classification'")
        shm = _shm_ref(params)
        if shm is None:
            binary = False
            if "binary_data" in params:
                binary = _as_bool(params["binary_data"], "Unable to parse 'binary_data'")
            decoded.binary_outputs[name] = binary
        decoded.request.outputs.append(
            RequestedOutput(name=name, classification=classification, shm=shm)
        )
