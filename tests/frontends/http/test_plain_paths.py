"""The HTTP codec's plain paths (plain JSON inputs, plain outputs, the NaN check, the route
cache) must give exactly what the checked paths give, and leave every error to them."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from repokit.core.settings import ServerSettings
from repokit.errors import RepokitError
from repokit.frontends.http.app import ROUTE_CACHE_SIZE, HttpFrontend
from repokit.frontends.http.infer_request import DecodedInfer, decode_infer_request
from repokit.frontends.http.infer_response import encode_infer_response
from repokit.frontends.http.routing import resolve
from repokit.frontends.runner import ServeSettings
from repokit.protocol.types import InferResponse, InferTensor

MAX = 1 << 26


def _decode(document: dict[str, Any], max_size: int = MAX) -> DecodedInfer:
    body = orjson.dumps(document)
    return decode_infer_request("m", "", body, len(body), max_size)


def _checked(item: dict[str, Any]) -> dict[str, Any]:
    """The same input with an empty ``parameters``: the plain path declines it."""
    return {**item, "parameters": {}}


def _error(document: dict[str, Any], max_size: int = MAX) -> str:
    with pytest.raises(RepokitError) as info:
        _decode(document, max_size)
    return info.value.message


@pytest.mark.parametrize(
    ("datatype", "data", "dtype"),
    [
        ("FP32", [0.5, 1, -2.25, 3e38], np.float32),
        ("FP64", [1e-300, 2, -0.0, 7.5], np.float64),
        ("INT8", [-128, 127, 300, 0], np.int8),  # narrowing wraps, as in Triton
        ("INT16", [1, -2, 3, -4], np.int16),
        ("INT32", [2**31 - 1, -(2**31), 0, 5], np.int32),
        ("INT64", [2**63 - 1, -(2**63), 1, 2], np.int64),
        ("UINT8", [0, 255, 1, 2], np.uint8),
        ("UINT16", [0, 65535, 1, 2], np.uint16),
        ("UINT32", [0, 2**32 - 1, 1, 2], np.uint32),
        ("UINT64", [0, 2**64 - 1, 1, 2], np.uint64),
    ],
)
def test_plain_json_inputs_match_the_checked_path(
    datatype: str, data: list[Any], dtype: type
) -> None:
    item = {"name": "X", "datatype": datatype, "shape": [2, 2], "data": data}
    fast = _decode({"inputs": [item]}).request.inputs[0]
    checked = _decode({"inputs": [_checked(item)]}).request.inputs[0]
    assert fast.data is not None and checked.data is not None
    assert fast.data.dtype == checked.data.dtype == np.dtype(dtype)
    assert fast.data.shape == checked.data.shape == (2, 2)
    assert fast.data.tobytes() == checked.data.tobytes()
    assert (fast.name, fast.datatype, fast.shape, fast.shm) == ("X", datatype, (2, 2), None)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"name": "X", "datatype": "FP32", "shape": [2], "data": [1.0, True]},
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            {"name": "X", "datatype": "FP32", "shape": [2], "data": [1.0, "2"]},
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            {"name": "X", "datatype": "INT32", "shape": [2], "data": [1, 2.0]},
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            {"name": "X", "datatype": "UINT8", "shape": [2], "data": [1, -1]},
            "Unable to parse 'data': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            {"name": "X", "datatype": "INT64", "shape": [1], "data": [2**63]},
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            {"name": "X", "datatype": "FP32", "shape": [3], "data": [1.0, 2.0]},
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            {"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0, 2.0]},
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            {"name": "X", "datatype": "FP32", "shape": [-1], "data": [1.0]},
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            {"name": 7, "datatype": "FP32", "shape": [1], "data": [1.0]},
            "Unable to parse 'name': attempt to access JSON non-string as string",
        ),
        (
            {"name": "X", "datatype": "FP16", "shape": [1], "data": [1.0]},
            "receiving FP16 data via JSON is not supported. Please use the binary data format "
            "for input X",
        ),
    ],
)
def test_malformed_inputs_get_the_checked_paths_errors(item: dict[str, Any], message: str) -> None:
    assert _error({"inputs": [item]}) == message
    assert _error({"inputs": [_checked(item)]}) == message


def test_size_limit_and_nested_data_take_the_checked_path() -> None:
    item = {"name": "X", "datatype": "INT64", "shape": [20], "data": [0] * 20}
    assert len(orjson.dumps({"inputs": [item]})) < 120
    assert _error({"inputs": [item]}, max_size=120).startswith(
        "JSON input 'X' has a byte_size (160 bytes) that exceeds the maximum allowed value of "
        "120 bytes."
    )
    nested = {"name": "X", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}
    data = _decode({"inputs": [nested]}).request.inputs[0].data
    assert data is not None and data.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    empty = {"name": "X", "datatype": "INT32", "shape": [0, 3], "data": []}
    data = _decode({"inputs": [empty]}).request.inputs[0].data
    assert data is not None and data.shape == (0, 3) and data.dtype == np.int32


def test_plain_outputs_match_the_checked_path() -> None:
    outputs = [
        {"name": "A"},
        {"name": "B", "parameters": {"binary_data": True}},
        {"name": "C", "parameters": {}},
        {"name": "D", "parameters": None},
        {"name": "E", "parameters": {"binary_data": False, "classification": 2}},
    ]
    decoded = _decode({"inputs": [], "outputs": outputs})
    assert decoded.binary_outputs == {"A": False, "B": True, "C": False, "D": False, "E": False}
    assert [(o.name, o.classification) for o in decoded.request.outputs] == [
        ("A", 0), ("B", 0), ("C", 0), ("D", 0), ("E", 2)
    ]  # fmt: skip
    bad = {"inputs": [], "outputs": [{"name": "A", "parameters": {"binary_data": 1}}]}
    assert _error(bad) == (
        "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean"
    )
    bad = {"inputs": [], "outputs": [{"parameters": {"binary_data": True}}]}
    assert _error(bad) == (
        "Unable to parse 'name': attempt to access non-existing object member 'name'"
    )


def test_null_in_the_header_alone_keeps_orjson_output() -> None:
    decoded = _decode({"inputs": []})
    finite = np.array([0.1, 2.5], dtype=np.float32)
    response = InferResponse("m", "1", id="null", outputs=[InferTensor("X", "FP32", (2,), finite)])
    head = encode_infer_response(response, decoded).head
    assert head == orjson.dumps(
        {
            "id": "null",
            "model_name": "m",
            "model_version": "1",
            "outputs": [{"name": "X", "datatype": "FP32", "shape": [2], "data": finite.tolist()}],
        }
    )
    odd = np.array([np.nan, -np.inf, 1.5], dtype=np.float32)
    response = InferResponse("m", "1", outputs=[InferTensor("X", "FP32", (3,), odd)])
    assert b'"data":[NaN,-Infinity,1.5]' in encode_infer_response(response, decoded).head
    nan_only = np.array([np.nan], dtype=np.float64)  # a NaN alone, and infinities that cancel
    for values in (nan_only, np.array([np.inf, -np.inf], dtype=np.float64)):
        response = InferResponse("m", "1", outputs=[InferTensor("X", "FP64", values.shape, values)])
        head = encode_infer_response(response, decoded).head
        assert b"NaN" in head or b"Infinity" in head
    # finite values whose sum overflows: still finite numbers in the body
    huge = np.array([1.7e308, 1.7e308], dtype=np.float64)
    response = InferResponse("m", "1", outputs=[InferTensor("X", "FP64", (2,), huge)])
    written = orjson.loads(encode_infer_response(response, decoded).head)
    assert written["outputs"][0]["data"] == [1.7e308, 1.7e308]


def test_binary_parts_stay_apart() -> None:
    decoded = _decode({"inputs": [], "parameters": {"binary_data_output": True}})
    big = np.arange(1 << 15, dtype=np.float32)
    response = InferResponse("m", "1", outputs=[InferTensor("X", "FP32", big.shape, big)])
    encoded = encode_infer_response(response, decoded)
    assert encoded.header_length == len(encoded.head)
    assert encoded.size == len(encoded.head) + big.nbytes == len(encoded.body)
    assert [bytes(p) for p in encoded.parts] == [encoded.head, big.tobytes()]


def test_route_cache_is_bounded_and_agrees_with_resolve() -> None:
    settings = ServeSettings(core=ServerSettings(http_max_input_size=MAX))
    frontend = HttpFrontend(None, settings)  # type: ignore[arg-type]
    paths = ["/v2/models/m/infer", "/v2/models/m/versions/3/ready", "/v2/nope", "/v2"]
    for path in paths * 2:
        resolved = frontend.route(path)
        assert (resolved.route if resolved else None) == resolve(path)
    infer = frontend.route("/v2/models/m/infer")
    assert infer is not None and infer.methods == ("POST",)
    assert infer.handler == frontend.endpoints.infer
    status = frontend.route("/v2/systemsharedmemory/status")
    assert status is not None and status.methods == ("GET",)
    register = frontend.route("/v2/systemsharedmemory/region/r/register")
    assert register is not None and register.methods == ("POST",)
    for index in range(ROUTE_CACHE_SIZE + 10):
        path = f"/v2/models/m{index}/infer"
        resolved = frontend.route(path)
        assert resolved is not None and resolved.route.model == f"m{index}"
    assert len(frontend._routes) <= ROUTE_CACHE_SIZE
