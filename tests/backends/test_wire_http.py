"""The instance side of the HTTP wire lane (repokit.backends.python.wire_http): which JSON
bodies it takes, the arrays it gives the model, and that the JSON it writes is byte for byte
the server's (repokit.frontends.http.infer_response); every body it does not take is None."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from repokit.backends.python import pb_utils
from repokit.backends.python.wire_http import decode_request, encode_response
from repokit.backends.wire_plan import WirePlan
from repokit.frontends.http.infer_request import DecodedInfer
from repokit.frontends.http.infer_response import encode_infer_response
from repokit.protocol.types import InferRequest, InferResponse, InferTensor

LIMIT = 64 * 1024 * 1024
PLAN = WirePlan(
    model_name="picky",
    version_text="2",
    max_batch_size=4,
    inputs={
        "X": ("INT32", (2,), np.dtype(np.int32), 2),
        "F": ("FP32", (-1,), np.dtype(np.float32), -1),
    },
    outputs=frozenset({"Y", "Z"}),
)


def body(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "r1",
        "inputs": [
            {"name": "X", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]},
            {"name": "F", "datatype": "FP32", "shape": [2, 3], "data": [0.5, 1, 2, 3, 4, 5]},
        ],
    }
    document.update(changes)
    return document


def decode(document: Any) -> Any:
    return decode_request(orjson.dumps(document), PLAN, LIMIT)


def test_plain_body_is_decoded() -> None:
    decoded = decode(body(outputs=[{"name": "Y"}, {"name": "Z", "parameters": {}}]))
    assert decoded is not None
    arrays, requested, request_id, batch = decoded
    assert [(name, a.dtype.name, a.shape) for name, a in arrays] == [
        ("X", "int32", (2, 2)),
        ("F", "float32", (2, 3)),
    ]
    assert arrays[1][1].tolist() == [[0.5, 1, 2], [3, 4, 5]]
    assert arrays[0][1].flags.writeable
    assert requested == {"Y", "Z"} and request_id == "r1" and batch == 2
    no_id = decode(
        body(id=None) | {"outputs": [{"name": "Z", "parameters": {"binary_data": False}}]}
    )
    assert no_id is None  # a null id is the standard path's error to give
    assert decode({"inputs": body()["inputs"]})[1:] == ({"Y", "Z"}, "", 2)


def _input(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def spoil(document: dict[str, Any]) -> None:
        document["inputs"][0].update(changes)

    return spoil


SPOILED: dict[str, Callable[[dict[str, Any]], None]] = {
    "parameters": lambda d: d.update(parameters={"priority": 1}),
    "empty parameters": lambda d: d.update(parameters={}),
    "unknown key": lambda d: d.update(extra=1),
    "id not a string": lambda d: d.update(id=7),
    "inputs not a list": lambda d: d.update(inputs={}),
    "no inputs": lambda d: d.pop("inputs"),
    "missing input": lambda d: d["inputs"].pop(),
    "duplicate input": lambda d: d["inputs"][1].update(name="X"),
    "unknown input": _input(name="Q"),
    "input parameters": _input(parameters={"binary_data_size": 16}),
    "wrong datatype": _input(datatype="INT64"),
    "nested data": _input(data=[[1, 2], [3, 4]]),
    "count mismatch": _input(data=[1, 2, 3]),
    "float for int": _input(data=[1, 2, 3, 4.5]),
    "string data": _input(data=["1", "2", "3", "4"]),
    "beyond int64": _input(data=[1, 2, 3, 2**64 - 1]),
    "wrong dims": _input(shape=[1, 4], data=[1, 2, 3, 4]),
    "batch too large": _input(shape=[5, 2], data=list(range(10))),
    "batch mismatch": _input(shape=[1, 2], data=[1, 2]),
    "outputs not a list": lambda d: d.update(outputs={"name": "Y"}),
    "unknown output": lambda d: d.update(outputs=[{"name": "W"}]),
    "binary output": lambda d: d.update(
        outputs=[{"name": "Y", "parameters": {"binary_data": True}}]
    ),
    "classification": lambda d: d.update(
        outputs=[{"name": "Y", "parameters": {"classification": 1}}]
    ),
}


@pytest.mark.parametrize("spoil", SPOILED.values(), ids=SPOILED.keys())
def test_bodies_the_full_path_must_take_are_left_to_it(
    spoil: Callable[[dict[str, Any]], None],
) -> None:
    document = body()
    spoil(document)
    assert decode(document) is None


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b"NaN", b"\xff"])
def test_bodies_that_are_no_json_object_are_left_to_the_server(raw: bytes) -> None:
    assert decode_request(raw, PLAN, LIMIT) is None


def test_inputs_beyond_the_size_limit_are_left_to_the_server() -> None:
    assert decode_request(orjson.dumps(body()), PLAN, 8) is None


def _server_json(outputs: list[tuple[str, np.ndarray]], request_id: str) -> bytes:
    tensors = [
        InferTensor(name, datatype, array.shape, array)
        for name, array in outputs
        for datatype in [{"int32": "INT32", "float64": "FP64", "bool": "BOOL"}[array.dtype.name]]
    ]
    response = InferResponse(model_name="picky", model_version="2", id=request_id, outputs=tensors)
    return encode_infer_response(response, DecodedInfer(InferRequest(model_name="picky"))).head


@pytest.mark.parametrize("request_id", ["r1", ""])
def test_response_json_is_the_servers(request_id: str) -> None:
    y = np.array([[1, -2], [3, 4]], dtype=np.int32)
    z = np.array([0.25, 1e300, -3.0])
    flags = np.array([[True], [False]])
    response = pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("Y", y),
            pb_utils.Tensor("Z", z),
            pb_utils.Tensor("NOT_ASKED", flags),
        ]
    )
    got = encode_response(PLAN, response, {"Y", "Z"}, request_id)
    assert got == _server_json([("Y", y), ("Z", z)], request_id)
    only_flags = encode_response(
        PLAN, pb_utils.InferenceResponse([pb_utils.Tensor("Y", flags)]), {"Y"}, request_id
    )
    assert only_flags == _server_json([("Y", flags)], request_id)


@pytest.mark.parametrize(
    "response",
    [
        pytest.param(
            lambda: pb_utils.InferenceResponse(error=pb_utils.TritonError("no")), id="error"
        ),
        pytest.param(
            lambda: pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", np.zeros(1, np.int32))], parameters={"k": 1}
            ),
            id="parameters",
        ),
        pytest.param(
            lambda: pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([np.nan]))]),
            id="nan",
        ),
        pytest.param(
            lambda: pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros(2, np.float16))]),
            id="fp16",
        ),
        pytest.param(
            lambda: pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", np.array([b"a"], dtype=object))]
            ),
            id="bytes",
        ),
    ],
)
def test_responses_it_cannot_write_travel_in_the_packed_form(
    response: Callable[[], pb_utils.InferenceResponse],
) -> None:
    assert encode_response(PLAN, response(), {"Y"}, "") is None
