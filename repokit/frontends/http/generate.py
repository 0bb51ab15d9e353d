"""Triton's generate extension: ``/generate`` and ``/generate_stream`` JSON <-> core requests.

As Triton 2.51's HTTP frontend (``HTTPAPIServer::HandleGenerate``): every top-level key of the
request object (and every key of its ``parameters`` object) that names a model input becomes
that input, with the datatype and shape of the model's metadata (a scalar is one element; the
elements fill the fixed dimensions and the innermost variable one, other variable ones are 1);
any other key becomes a request parameter (string, integer, boolean or number). ``id`` is also
the request id. A response is one flat object: ``id`` (when set), ``model_name``,
``model_version``, the response parameters and the outputs (a one-element output as a scalar),
keys in name order as Triton's ``std::map`` gives them.

A key given more than once counts as Triton's rapidjson reads it: each occurrence is converted
again with the key's first value, so a repeated input is refused (``input 'X' already exists
in request``) and a repeated parameter or ``id`` keeps its first value. An error inside
``parameters`` names it (``Converting keyword: 'parameters': ...``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from repokit.errors import RepokitError, invalid_arg
from repokit.frontends.http.infer_request import parse_json_document
from repokit.protocol.json_codec import array_from_json, array_to_json
from repokit.protocol.types import InferRequest, InferResponse, InputSpec, ParamValue

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)
# an error response of the model: Triton 2.51's generate handler gives 400 whatever the code
RESPONSE_ERROR_STATUS = 400
_PARAMETERS = "parameters"
_BYTES_ARRAY = "Unable to parse JSON bytes array"


def parse_generate_document(buffer: bytes | memoryview, max_size: int) -> Any:
    """The request body as JSON, keys given more than once kept (:class:`_RepeatedKeys`).

    The body is parsed once (fast, and validated as every JSON body); only when a key of the
    object or of its ``parameters`` may occur twice (its quoted name is in the body more than
    once, or not verbatim) is it parsed again keeping every member."""
    document = parse_json_document(buffer, max_size)
    if not isinstance(document, dict):
        return document
    raw = bytes(buffer)
    if not _may_repeat_keys(raw, document):
        return document
    try:
        return json.loads(raw, object_pairs_hook=_object_keeping_repeats)
    except RecursionError:  # deeper than the standard library goes: no repeats looked for
        return document


class _RepeatedKeys(dict[str, Any]):
    """A JSON object with a key given more than once: each key's first value (the one
    rapidjson's lookup finds) and ``names``, every member's name in document order."""

    __slots__ = ("names",)

    def __init__(self, first_values: dict[str, Any], names: list[str]) -> None:
        super().__init__(first_values)
        self.names = names


def _object_keeping_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        found.setdefault(key, value)
    if len(found) == len(pairs):
        return found
    return _RepeatedKeys(found, [key for key, _ in pairs])


def _may_repeat_keys(raw: bytes, document: dict[str, Any]) -> bool:
    if b"\\u" in raw or b"\\/" in raw:  # a key may be spelt with escapes
        return True
    objects = [document]
    nested = document.get(_PARAMETERS)
    if isinstance(nested, dict):
        objects.append(nested)
    return any(raw.count(b'"' + key.encode() + b'"') != 1 for obj in objects for key in obj)


def _member_names(document: dict[str, Any]) -> list[str]:
    return document.names if isinstance(document, _RepeatedKeys) else list(document)


def decode_generate_request(
    model: str, version: str, document: Any, metadata: dict[str, Any]
) -> InferRequest:
    """The core request for a generate body (``metadata``: the model's metadata JSON)."""
    if not isinstance(document, dict):
        raise invalid_arg("the generate request body must be a JSON object")
    inputs = {item["name"]: item for item in metadata.get("inputs", [])}
    request = InferRequest(model_name=model, model_version=version)
    if "id" in document:
        request_id = document["id"]
        if not isinstance(request_id, str):
            raise invalid_arg("Unable to parse 'id': attempt to access JSON non-string as string")
        request.id = request_id
    deferred: list[RepokitError] = []  # errors Triton's core finds once the request is built
    for key in _member_names(document):
        value = document[key]
        if key == _PARAMETERS:
            if key in inputs:
                raise invalid_arg(
                    f"Keyword '{key}' for nested schema also given as input tensor name"
                )
            if not isinstance(value, dict):
                raise invalid_arg(
                    f"Expected JSON object for keyword: '{key}': "
                    "attempt to access JSON non-object as object"
                )
            try:
                for nested_key in _member_names(value):
                    _map_key(request, nested_key, value[nested_key], inputs, deferred)
            except RepokitError as exc:
                message = f"Converting keyword: '{key}': {exc.message}"
                raise RepokitError(exc.code, message) from None
        else:
            _map_key(request, key, value, inputs, deferred)
    if deferred:
        raise deferred[0]
    return request


def _map_key(
    request: InferRequest,
    key: str,
    value: Any,
    inputs: dict[str, Any],
    deferred: list[RepokitError],
) -> None:
    meta = inputs.get(key)
    if meta is None:
        request.parameters[key] = _parameter(key, value)
        return
    prefix = f"[request id: {request.id or '<id_unknown>'}] "
    if any(spec.name == key for spec in request.inputs):
        raise invalid_arg(f"{prefix}input '{key}' already exists in request")
    datatype = str(meta["datatype"])
    elements = value if isinstance(value, list) else [value]
    strings = _string_leaves(elements) if datatype == "BYTES" else None
    if datatype == "BYTES" and strings is None:
        # Triton sizes a BYTES input's strings before it looks at the shape
        raise invalid_arg(f"{_BYTES_ARRAY}: attempt to access JSON non-string as string")
    shape = _fill_shape(key, [int(d) for d in meta["shape"]], len(elements))
    if strings is not None and len(strings) != math.prod(shape):
        # nested arrays: Triton reads every string and its core counts them
        deferred.append(_string_count_error(prefix, key, request.model_name, strings, shape))
        elements = strings[: math.prod(shape)] + [""] * (math.prod(shape) - len(strings))
    elif strings is not None:
        elements = strings
    data = array_from_json(datatype, shape, elements, input_name=key)
    request.inputs.append(InputSpec(key, datatype, shape, data))


def _string_leaves(elements: list[Any]) -> list[str] | None:
    """Every leaf of a (possibly nested) JSON array in order, or None if one is no string."""
    found: list[str] = []
    pending: list[Any] = [iter(elements)]
    while pending:
        item = next(pending[-1], _END)
        if item is _END:
            pending.pop()
        elif isinstance(item, list):
            pending.append(iter(item))
        elif isinstance(item, str):
            found.append(item)
        else:
            return None
    return found


_END = object()


def _string_count_error(
    prefix: str, key: str, model: str, strings: list[str], shape: tuple[int, ...]
) -> RepokitError:
    expected = math.prod(shape)
    where = f"inference input '{key}' for model '{model}'"
    if len(strings) > expected:
        return invalid_arg(
            f"{prefix}unexpected number of string elements {expected + 1} for {where}, "
            f"expecting {expected}"
        )
    return invalid_arg(
        f"{prefix}expected {expected} string elements for {where}, got {len(strings)}"
    )


def _parameter(key: str, value: Any) -> ParamValue:
    if isinstance(value, (str, bool, int, float)):
        return value
    raise invalid_arg(
        f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    )


def _fill_shape(name: str, dims: list[int], count: int) -> tuple[int, ...]:
    """Triton's two passes: fixed dims divide the count, the innermost -1 takes the rest."""
    fixed = math.prod(d for d in dims if d != -1)
    unfit = f"The schema can not convert input '{name}' to tensor with proper shape"
    if (count % fixed if fixed else count) != 0:
        raise invalid_arg(unfit)
    remaining = count // fixed if fixed else 1
    shape = list(dims)
    for index in range(len(shape) - 1, -1, -1):
        if shape[index] == -1:
            shape[index] = remaining
            remaining = 1
    if remaining != 1:
        raise invalid_arg(unfit)
    return tuple(shape)


def encode_generate_response(response: InferResponse) -> dict[str, Any]:
    """The flat response object (first of equal names wins, as Triton's map emplace)."""
    fields: dict[str, Any] = {}
    if response.id:
        fields["id"] = response.id
    fields["model_name"] = response.model_name
    fields["model_version"] = str(response.model_version)
    for name, param in response.parameters.items():
        fields.setdefault(name, param)
    for tensor in response.outputs:
        if tensor.name in fields:
            continue
        try:
            values = array_to_json(tensor.datatype, tensor.data, output_name=tensor.name)
        except RepokitError:
            if tensor.datatype != "BYTES":
                raise
            raise invalid_arg(  # /infer's message would advise binary_data, which is not here
                f"output '{tensor.name}' holds bytes that are not valid UTF-8 and cannot be "
                "sent as JSON; the generate extension has no binary form (/infer has: "
                "parameter binary_data: true)"
            ) from None
        fields[tensor.name] = values[0] if len(values) == 1 else values
    return {name: fields[name] for name in sorted(fields)}


def json_body(payload: dict[str, Any]) -> bytes:
    """The JSON text; NaN and Infinity as Triton's bare tokens (orjson would write null)."""
    text = orjson.dumps(payload)
    if b"null" in text and any(_non_finite(value) for value in payload.values()):
        return json.dumps(
            payload, separators=(",", ":"), allow_nan=True, ensure_ascii=False
        ).encode()
    return text


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(isinstance(v, float) and not math.isfinite(v) for v in value)
    return False


def sse_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json_body(payload) + b"\n\n"
