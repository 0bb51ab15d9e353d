"""HTTP/REST infer requests (JSON only) straight from and to their bytes, in the instance process:
the HTTP counterpart of :mod:`.wire_grpc` for the wire lane (:mod:`repokit.core.wire_lane`).

:func:`decode_request` takes a JSON body that the server's decoder would take through its plain
paths (:mod:`repokit.protocol.plain_json`) and its request checks would pass without a second
look (the plain-request rules of :mod:`repokit.protocol.plain_request`): a JSON object with
``inputs`` (each ``{"name", "datatype", "shape", "data"}`` with flat numeric data), optionally
``id`` (a string) and ``outputs`` (each ``{"name"}``, or with ``"parameters": {"binary_data":
false}``), nothing else (no request parameters, no binary data, no shared memory, no
classification). Anything else returns None before the model runs and the server's standard path
answers the request, errors included. :func:`encode_response` writes the JSON the server writes
for a successful response whose outputs are JSON numbers or booleans (finite floats); anything
else travels in the packed form and the server encodes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from repokit.backends.python.wire_checks import numeric_outputs
from repokit.backends.python.wire_json_inputs import common_request, requested_outputs
from repokit.backends.python.wire_json_response import common_response
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.plain_json import plain_json_array
from repokit.protocol.plain_request import plain_input
from repokit.protocol.plain_response import plain_json_response

if TYPE_CHECKING:
    from repokit.backends.python.pb_utils import InferenceResponse

# a decoded request: [(input name, array)], requested output names, request id, batch size
DecodedRequest = tuple[list[tuple[str, "np.ndarray[Any, Any]"]], set[str], str, int]
_KEYS = frozenset({"id", "inputs", "outputs"})


_loads: Any = None  # orjson.loads, imported with the first request


def decode_request(body: bytes, plan: WirePlan, limit: int) -> DecodedRequest | None:
    """The request's inputs as arrays, or None when the server must take it (``limit``: the
    server's maximum input size). A body in the common form takes the one-pass decoding of
    :mod:`.wire_json_inputs`; any other the checked one, which gives the same for that form."""
    global _loads
    if _loads is None:
        import orjson

        _loads = orjson.loads
    try:
        document = _loads(body)
    except Exception:
        return None
    if type(document) is not dict:
        return None
    return common_request(document, plan, limit) or _checked_request(document, plan, limit)


def _checked_request(document: dict[str, Any], plan: WirePlan, limit: int) -> DecodedRequest | None:
    """The request of a JSON object by the plain rules, one call per rule."""
    if not document.keys() <= _KEYS:
        return None
    request_id = document.get("id", "")
    items = document.get("inputs")
    if type(request_id) is not str or type(items) is not list:
        return None
    expected = plan.inputs
    if len(items) != len(expected):
        return None
    max_batch = plan.max_batch_size
    batch_size = 0
    arrays: list[tuple[str, np.ndarray[Any, Any]]] = []
    seen: set[str] = set()
    for item in items:
        given = plain_json_array(item, limit)
        if given is None:
            return None
        name, datatype, shape, data = given
        checked = plain_input(
            expected, max_batch, seen, name, datatype, shape, data.nbytes, batch_size
        )
        if checked is None or data.dtype != checked[0]:
            return None
        batch_size = checked[1]
        seen.add(name)
        arrays.append((name, data))
    requested = requested_outputs(document, plan)
    if requested is None:
        return None
    return arrays, requested, request_id, batch_size


def encode_response(
    plan: WirePlan, response: InferenceResponse, requested: set[str], request_id: str
) -> bytes | None:
    """The response's JSON (:func:`repokit.protocol.plain_response.plain_json_response`, as the
    server writes it), or None when the packed form must carry it (an error, response
    parameters, or an output that is not plain JSON numbers or booleans). The common response
    is written from kept pieces (:mod:`.wire_json_response`)."""
    body = common_response(plan, response, requested, request_id)
    if body is not None:
        return body
    outputs = numeric_outputs(response, requested)
    if outputs is None:
        return None
    return plain_json_response(request_id, plan.model_name, plan.version_text, outputs)
