"""Large JSON outputs are encoded in chunks, with the event loop serving others in between,
and the bytes are those of the one-piece encoder."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from repokit.errors import RepokitError
from repokit.frontends.http.infer_request import DecodedInfer
from repokit.frontends.http.infer_response import (
    JSON_CHUNK_ELEMENTS,
    LARGE_JSON_ELEMENTS,
    encode_infer_response,
    encode_infer_response_async,
)
from repokit.protocol.types import InferRequest, InferResponse, InferTensor
from tests.frontends.http.server_thread import copy_models, running_server

BIG = LARGE_JSON_ELEMENTS + JSON_CHUNK_ELEMENTS // 2 + 3  # not a whole number of chunks


def _tensor(name: str, datatype: str, data: np.ndarray) -> InferTensor:
    return InferTensor(name, datatype, tuple(data.shape), data)


def _decoded(**binary: bool) -> DecodedInfer:
    return DecodedInfer(InferRequest(model_name="m"), binary_outputs=binary)


def _response(*tensors: InferTensor) -> InferResponse:
    return InferResponse("m", "1", id="req-1", outputs=list(tensors), parameters={"p": 1})


def _floats() -> np.ndarray:
    data = np.random.default_rng(0).standard_normal(BIG).astype(np.float32).reshape(1, -1)
    data[0, 5] = np.nan
    data[0, -1] = np.inf
    data[0, JSON_CHUNK_ELEMENTS + 1] = -np.inf
    return data


CASES = {
    "fp32 with non-finite values": [_tensor("F", "FP32", _floats())],
    "int64 and bool, multi-dimensional": [
        _tensor("I", "INT64", np.arange(BIG, dtype=np.int64).reshape(1, BIG)),
        _tensor("B", "BOOL", (np.arange(2 * 131_072) % 3 == 0).reshape(2, 131_072)),
    ],
    "bytes": [_tensor("S", "BYTES", np.array([b"x%d" % i for i in range(BIG)], dtype=object))],
    "json beside binary and an empty output": [
        _tensor("F", "FP32", _floats()),
        _tensor("R", "FP32", np.ones((1, 4), np.float32)),
        _tensor("E", "INT32", np.zeros((0, 3), np.int32)),
    ],
}


@pytest.mark.parametrize("name", list(CASES))
async def test_chunked_bytes_equal_the_one_piece_encoding(name: str) -> None:
    response = _response(*CASES[name])
    decoded = _decoded(R=True)
    whole = encode_infer_response(response, decoded)
    chunked = await encode_infer_response_async(response, decoded)
    assert chunked.body == whole.body
    assert (chunked.content_type, chunked.header_length) == (
        whole.content_type,
        whole.header_length,
    )
    json.loads(
        chunked.body[: chunked.header_length].replace(b"NaN", b"0").replace(b"Infinity", b"1")
    )


async def test_the_event_loop_serves_others_while_a_large_output_is_encoded() -> None:
    """Before: the encoder ran the whole tensor in one go, the other task only after it."""
    response = _response(_tensor("F", "FP32", np.ones((1, 4 * LARGE_JSON_ELEMENTS), np.float32)))
    order: list[str] = []

    async def encode() -> None:
        await encode_infer_response_async(response, _decoded())
        order.append("large response encoded")

    async def other_client() -> None:
        order.append("other client served")

    large = asyncio.ensure_future(encode())
    await asyncio.sleep(0)  # the encoder has started
    other = asyncio.ensure_future(other_client())
    await asyncio.gather(large, other)
    assert order == ["other client served", "large response encoded"]


async def test_errors_are_the_same() -> None:
    half = _response(_tensor("H", "FP16", np.ones((1, BIG), np.float16)))
    with pytest.raises(RepokitError) as whole:
        encode_infer_response(half, _decoded())
    with pytest.raises(RepokitError) as chunked:
        await encode_infer_response_async(half, _decoded())
    assert chunked.value.message == whole.value.message
    invalid = np.array([b"ok"] * BIG, dtype=object)
    invalid[JSON_CHUNK_ELEMENTS + 2] = b"\xff"
    bad = _response(_tensor("S", "BYTES", invalid))
    with pytest.raises(RepokitError) as whole:
        encode_infer_response(bad, _decoded())
    with pytest.raises(RepokitError) as chunked:
        await encode_infer_response_async(bad, _decoded())
    assert chunked.value.message == whole.value.message


def test_a_large_json_output_through_both_http_lanes(tmp_path: Path) -> None:
    import urllib.request

    import tritonclient.http as httpclient

    values = np.arange(LARGE_JSON_ELEMENTS + 5, dtype=np.float32)
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [values.size],
                    "data": values.tolist(),
                }
            ]
        }
    ).encode()
    with running_server(copy_models(tmp_path / "repo", ("identity",))) as server:
        # Sanic's lane (urllib closes the connection: not the fast lane)
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/models/identity/infer", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            document = json.loads(answer.read())
        assert document["outputs"][0]["data"] == values.tolist()
        # the fast lane (keep-alive)
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", [values.size], "FP32")
        tensor.set_data_from_numpy(values, binary_data=False)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        result = client.infer("identity", [tensor], outputs=[output])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
