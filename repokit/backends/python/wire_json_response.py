"""The JSON of a common response, written from pieces made once (instance process).

:func:`common_response` writes the body
:func:`repokit.protocol.plain_response.plain_json_response` writes (byte for byte: the same
orjson calls on the same values, only split), for the response most models return: an
``InferenceResponse`` without error or parameters whose requested outputs are ``Tensor``
objects of a plain JSON datatype with finite numbers. What does not change from one response
to the next is written once and kept: the part naming the model, and each output's part up to
its data (by name, dtype and shape). Anything else gives None, and :mod:`.wire_http` writes the
response as before (``tests/backends/test_wire_json_response.py`` compares both).
"""

from __future__ import annotations

from typing import Any

from repokit.backends.python import pb_utils
from repokit.backends.python.wire_checks import OUTPUT_DATATYPES
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.plain_response import PLAIN_JSON_OUTPUTS

_PREFIXES_KEPT = 1024  # output parts kept (shapes vary with the batch size, and may vary more)
_dumps: Any = None  # orjson.dumps, imported with the first response
_model_part: tuple[WirePlan, bytes] | None = None
_output_parts: dict[tuple[str, Any, tuple[int, ...]], bytes] = {}


def common_response(
    plan: WirePlan, response: Any, requested: set[str], request_id: str
) -> bytes | None:
    """The response's JSON, or None when it is not in the common form (see the module)."""
    global _dumps, _model_part
    if (
        type(response) is not pb_utils.InferenceResponse
        or response._error is not None
        or response._parameters
    ):
        return None
    dumps = _dumps
    if dumps is None:
        import orjson

        dumps = _dumps = orjson.dumps
    parts: list[bytes] = []
    for tensor in response._outputs:
        if type(tensor) is not pb_utils.Tensor or tensor._bf16:
            return None
        name = tensor._name
        if name not in requested:
            continue
        array = tensor._array
        key = (name, array.dtype, array.shape)
        start = _output_parts.get(key)
        if start is None:
            start = _output_part(dumps, key)
            if start is None:
                return None
        data = array.ravel().tolist()
        if array.dtype.kind == "f":  # NaN and infinities are written by the server's encoder
            total = sum(data)
            if total - total != 0:
                return None
        parts.append(start + dumps(data) + b"}")
    model = _model_part
    if model is None or model[0] is not plan:
        model = _model_part = (plan, _model_json(dumps, plan))
    head = b'{"id":' + dumps(request_id) + b"," if request_id else b"{"
    return head + model[1] + b",".join(parts) + b"]}"


def _model_json(dumps: Any, plan: WirePlan) -> bytes:
    name: bytes = dumps(plan.model_name)
    version: bytes = dumps(plan.version_text)
    return b'"model_name":' + name + b',"model_version":' + version + b',"outputs":['


def _output_part(dumps: Any, key: tuple[str, Any, tuple[int, ...]]) -> bytes | None:
    """An output's JSON up to its data, kept; None for a datatype not written as plain JSON."""
    name, dtype, shape = key
    datatype = OUTPUT_DATATYPES.get(dtype)
    if datatype not in PLAIN_JSON_OUTPUTS:
        return None
    if len(_output_parts) >= _PREFIXES_KEPT:
        _output_parts.clear()
    part: bytes = (
        b'{"name":' + dumps(name) + b',"datatype":' + dumps(datatype)
        + b',"shape":' + dumps([int(d) for d in shape]) + b',"data":'
    )  # fmt: skip
    _output_parts[key] = part
    return part
