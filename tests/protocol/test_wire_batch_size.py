"""The batch size the dynamic batcher's wire lane reads from a request's bytes
(repokit.protocol.wire_batch_size): what it takes, and every request it leaves to the standard
path (None). The decoder corpus (tests/core/test_decoder_corpus.py) checks that it agrees with
the lane's decoders."""

from __future__ import annotations

import json
from typing import Any

import pytest

from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.wire_batch_size import grpc_batch_size, json_batch_size, wire_batch_size


def body(**document: Any) -> bytes:
    inputs = [{"name": "X", "datatype": "FP32", "shape": [2, 3], "data": [0.0] * 6}]
    return json.dumps({"inputs": inputs, **document}).encode()


def message(shape: tuple[int, ...] = (2, 3), **fields: Any) -> bytes:
    request = pb.ModelInferRequest(model_name="m", **fields)
    tensor = request.inputs.add(name="X", datatype="FP32")
    tensor.shape.extend(shape)
    request.raw_input_contents.append(b"\0" * 24)
    return request.SerializeToString()


def test_json_batch_sizes() -> None:
    assert json_batch_size(body(), 4) == 2
    assert json_batch_size(body(id="r", outputs=[{"name": "Y"}]), 4) == 2
    assert json_batch_size(body(), 0) == 0  # the model does not batch
    assert wire_batch_size("json", body(), 8) == 2


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        body(parameters={"priority": 1}),  # where it queues is the standard path's to decide
        body(sequence_id=3),  # not a key the lane's decoder takes
        json.dumps({"inputs": []}).encode(),
        json.dumps({"inputs": [5]}).encode(),
        json.dumps({"inputs": [{"name": "X", "shape": 2}]}).encode(),
        json.dumps({"inputs": [{"name": "X", "shape": []}]}).encode(),
        json.dumps({"inputs": [{"name": "X", "shape": [True, 3]}]}).encode(),
        json.dumps({"inputs": [{"name": "X", "shape": [2.0, 3]}]}).encode(),
        json.dumps({"inputs": [{"name": "X", "shape": [0, 3]}]}).encode(),
        json.dumps({"inputs": [{"name": "X", "shape": [5, 3]}]}).encode(),  # over the maximum
        json.dumps(
            {
                "inputs": [
                    {"name": "X", "shape": [1, 3], "parameters": {"shared_memory_region": "r"}}
                ]
            }
        ).encode(),
    ],
)
def test_json_requests_left_to_the_standard_path(raw: bytes) -> None:
    assert json_batch_size(raw, 4) is None


def test_grpc_batch_sizes() -> None:
    assert grpc_batch_size(message(), 4) == 2
    assert grpc_batch_size(message((4, 3)), 4) == 4
    assert grpc_batch_size(message(), 0) == 0
    assert wire_batch_size("grpc", message(), 8) == 2


def _with_parameter(raw: bytes, on_input: bool) -> bytes:
    request = pb.ModelInferRequest.FromString(raw)
    target = request.inputs[0].parameters if on_input else request.parameters
    target["priority"].int64_param = 1
    return request.SerializeToString()


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xff\xff",  # not a ModelInferRequest
        message((5, 3)),  # over the maximum
        message((0, 3)),
        message(()),
        pb.ModelInferRequest(model_name="m").SerializeToString(),  # no inputs
        _with_parameter(message(), on_input=False),
        _with_parameter(message(), on_input=True),
    ],
)
def test_grpc_requests_left_to_the_standard_path(raw: bytes) -> None:
    assert grpc_batch_size(raw, 4) is None


def test_a_protocol_without_a_reader() -> None:
    assert wire_batch_size("http binary", body(), 4) is None
