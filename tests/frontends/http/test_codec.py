"""HTTP infer codec, routing, compression and restricted-API parsing (no server needed)."""

from __future__ import annotations

import gzip
import struct
import zlib

import numpy as np
import orjson
import pytest

from repokit.errors import Code, RepokitError
from repokit.frontends.http.compression import (
    choose_response_encoding,
    compress,
    decompress_body,
)
from repokit.frontends.http.infer_request import (
    decode_infer_request,
    parse_header_length,
    parse_json_document,
    parse_model_version,
)
from repokit.frontends.http.infer_response import encode_infer_response
from repokit.frontends.http.restricted import endpoint_restrictions, restricted_response
from repokit.frontends.http.routing import Endpoint, resolve
from repokit.frontends.restricted_apis import parse_restricted_apis
from repokit.frontends.status import grpc_status_name, http_status
from repokit.protocol.types import InferResponse, InferTensor, SharedMemoryRef

MAX = 1 << 26


def _body(header: dict[str, object], *blobs: bytes) -> tuple[bytes, int]:
    head = orjson.dumps(header)
    return head + b"".join(blobs), len(head)


def _decode(header: dict[str, object], *blobs: bytes, max_size: int = MAX):  # type: ignore[no-untyped-def]
    body, length = _body(header, *blobs)
    return decode_infer_request("m", "", body, length, max_size)


def _error(fn, *args, **kwargs) -> RepokitError:  # type: ignore[no-untyped-def]
    with pytest.raises(RepokitError) as info:
        fn(*args, **kwargs)
    return info.value


# --- status table -------------------------------------------------------------------------


def test_status_table_matches_triton() -> None:
    expected = {
        Code.INTERNAL: (500, "INTERNAL"),
        Code.NOT_FOUND: (404, "NOT_FOUND"),
        Code.UNAVAILABLE: (503, "UNAVAILABLE"),
        Code.UNSUPPORTED: (501, "UNIMPLEMENTED"),
        Code.INVALID_ARG: (400, "INVALID_ARGUMENT"),
        Code.ALREADY_EXISTS: (400, "ALREADY_EXISTS"),
        Code.CANCELLED: (400, "CANCELLED"),
        Code.UNKNOWN: (400, "UNKNOWN"),
    }
    for code, (status, grpc_name) in expected.items():
        assert http_status(code) == status
        assert grpc_status_name(code) == grpc_name


# --- routing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "endpoint", "model", "version"),
    [
        ("/v2/models/stats", Endpoint.STATS, "", ""),
        ("/v2/models/m/stats", Endpoint.STATS, "m", ""),
        ("/v2/models/m/versions/3/stats", Endpoint.STATS, "m", "3"),
        ("/v2/models/m", Endpoint.MODEL_METADATA, "m", ""),
        ("/v2/models/m/versions/12", Endpoint.MODEL_METADATA, "m", "12"),
        ("/v2/models/m/versions/1/infer", Endpoint.MODEL_INFER, "m", "1"),
        ("/v2/models/%2e%2e/ready", Endpoint.MODEL_READY, "%2e%2e", ""),
        ("/v2/models/m/config", Endpoint.MODEL_CONFIG, "m", ""),
        ("/v2/models/m/trace/setting", Endpoint.MODEL_TRACE, "m", ""),
        ("/v2", Endpoint.SERVER_METADATA, "", ""),
        ("/v2/health/live", Endpoint.HEALTH_LIVE, "", ""),
        ("/v2/health/ready", Endpoint.HEALTH_READY, "", ""),
        ("/v2/logging", Endpoint.LOGGING, "", ""),
        ("/v2/trace/setting", Endpoint.TRACE, "", ""),
        ("/v2/repository/index", Endpoint.REPOSITORY_INDEX, "", ""),
        ("/v2/repository/models/m/load", Endpoint.REPOSITORY_CONTROL, "m", ""),
    ],
)
def test_routes(path: str, endpoint: Endpoint, model: str, version: str) -> None:
    route = resolve(path)
    assert route is not None
    assert (route.endpoint, route.model, route.version) == (endpoint, model, version)


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models",
        "/v2/models/",
        "/v2/models/m/",
        "/v2/models/m/versions/x",
        "/v2/models/m/versions/1/trace/setting",
        "/v2/health",
        "/v2/repository/models/x/load/",
        "/v2/models/m/infer/",
        "/",
        "/v3",
    ],
)
def test_unrouted_paths(path: str) -> None:
    assert resolve(path) is None


def test_shm_and_repository_routes() -> None:
    route = resolve("/v2/systemsharedmemory/region/r1/register")
    assert route is not None and (route.endpoint, route.region, route.action) == (
        Endpoint.SYSTEM_SHM,
        "r1",
        "register",
    )
    route = resolve("/v2/systemsharedmemory/unregister")
    assert route is not None and route.region == "" and route.action == "unregister"
    route = resolve("/v2/cudasharedmemory/status")
    assert route is not None and route.endpoint is Endpoint.CUDA_SHM
    route = resolve("/v2/repository/other/models/m/unload")
    assert route is not None and route.repository == "other" and route.action == "unload"


# --- header length, versions, JSON -------------------------------------------------------


def test_header_length_rules() -> None:
    assert parse_header_length(None, 42) == 42
    assert parse_header_length("10", 42) == 10
    assert parse_header_length(" 7abc", 42) == 7  # std::stoi accepts a leading integer
    assert _error(parse_header_length, "abc", 42).message == (
        "Unable to parse Inference-Header-Content-Length, got: abc"
    )
    assert _error(parse_header_length, "50", 42).message == (
        "inference header size should be in range (0, 42), got: 50"
    )
    assert _error(parse_header_length, "-1", 42).code is Code.INVALID_ARG
    assert "out of range" in _error(parse_header_length, "99999999999", 42).message


def test_model_version_normalised_like_stol() -> None:
    assert parse_model_version("") == ""
    assert parse_model_version("007") == "7"
    err = _error(parse_model_version, "99999999999999999999")
    assert err.code is Code.INVALID_ARG and "version should be an integral value > 0" in err.message


def test_json_document_accepts_nan_and_reports_parse_errors() -> None:
    doc = parse_json_document(b'{"a": NaN, "b": -Infinity}', MAX)
    assert np.isnan(doc["a"]) and doc["b"] == float("-inf")
    err = _error(parse_json_document, b"{bad", MAX)
    assert err.code is Code.INVALID_ARG  # Triton: 500; KServe spec: 400
    assert err.message.startswith("failed to parse the request JSON buffer: ")
    assert "exceeds the maximum allowed input size of 4 bytes" in (
        _error(parse_json_document, b'{"a":1}', 4).message
    )


def test_json_numbers_past_the_double_range_are_refused() -> None:
    """Triton's rapidjson refuses 1e400 ("Number too big to be stored in double"); it must not
    reach a model as infinity, NaN and Infinity tokens beside it or not."""
    for text, number in (
        (b'{"a": 1e400}', "1e400"),
        (b'{"a": -1e400, "b": NaN}', "-1e400"),
        (b"[Infinity, 2e308]", "2e308"),
    ):
        err = _error(parse_json_document, text, MAX)
        assert err.code is Code.INVALID_ARG
        assert err.message == (
            f"failed to parse the request JSON buffer: number {number} is too big to be stored "
            "in double"
        )
    assert parse_json_document(b'{"a": 1e308, "b": Infinity}', MAX) == {
        "a": 1e308,
        "b": float("inf"),
    }


# --- request decoding ------------------------------------------------------------------------


def test_json_and_binary_inputs_and_output_kinds() -> None:
    b = np.arange(4, dtype=np.float32)
    decoded = _decode(
        {
            "id": "r1",
            "parameters": {
                "sequence_id": 9,
                "sequence_start": True,
                "priority": 2,
                "timeout": 100,
                "binary_data_output": True,
                "custom": "x",
                "n": 3,
                "f": 0.5,
                "flag": False,
            },
            "inputs": [
                {"name": "A", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]},
                {
                    "name": "B",
                    "shape": [4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 16},
                },
                {
                    "name": "C",
                    "shape": [3],
                    "datatype": "BOOL",
                    "parameters": {"binary_data_size": 3},
                },
            ],
            "outputs": [{"name": "X", "parameters": {"binary_data": False}}, {"name": "Y"}],
        },
        b.tobytes(),
        b"\x01\x00\x01",
    )
    req = decoded.request
    assert req.id == "r1" and req.sequence_id == 9 and req.sequence_start and not req.sequence_end
    assert (req.priority, req.timeout_us) == (2, 100)
    assert req.parameters == {"custom": "x", "n": 3, "f": 0.5, "flag": False}
    assert [i.name for i in req.inputs] == ["A", "B", "C"]
    assert req.inputs[0].data is not None and req.inputs[0].data.tolist() == [[1, 2], [3, 4]]
    # binary data: uint8 views of the bytes, as gRPC raw contents (the core checks their size)
    binary = [req.inputs[1].data, req.inputs[2].data]
    assert all(data is not None and data.dtype == np.uint8 for data in binary)
    assert [data.tobytes() for data in binary if data is not None] == [
        b.tobytes(),
        b"\x01\x00\x01",
    ]
    # a listed output without binary_data is JSON even with binary_data_output (Triton's code)
    assert decoded.binary_outputs == {"X": False, "Y": False}
    assert decoded.default_binary is True


def test_bytes_binary_input_is_length_prefixed() -> None:
    blob = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"", b"xyz"))
    decoded = _decode(
        {
            "inputs": [
                {
                    "name": "S",
                    "shape": [3],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(blob)},
                }
            ]
        },
        blob,
    )
    data = decoded.request.inputs[0].data  # the core deserializes it (as for gRPC)
    assert data is not None and data.dtype == np.uint8 and data.tobytes() == blob


def test_string_sequence_id_and_shared_memory_input() -> None:
    decoded = _decode(
        {
            "parameters": {"sequence_id": "abc", "sequence_end": True},
            "inputs": [
                {
                    "name": "A",
                    "shape": [4],
                    "datatype": "FP32",
                    "parameters": {
                        "shared_memory_region": "r",
                        "shared_memory_offset": 8,
                        "shared_memory_byte_size": 16,
                    },
                }
            ],
            "outputs": [
                {
                    "name": "O",
                    "parameters": {"shared_memory_region": "o", "shared_memory_byte_size": 64},
                }
            ],
        }
    )
    req = decoded.request
    assert req.sequence_id == "abc" and req.sequence_end
    assert req.inputs[0].data is None and req.inputs[0].shm == SharedMemoryRef("r", 8, 16)
    assert req.outputs[0].shm == SharedMemoryRef("o", 0, 64)
    assert "O" not in decoded.binary_outputs


def test_raw_request() -> None:
    payload = np.arange(8, dtype=np.float32).tobytes()
    decoded = decode_infer_request("m", "2", payload, 0, MAX)
    req = decoded.request
    assert req.raw_input and req.model_version == "2" and decoded.default_binary
    assert req.inputs[0].data is not None and req.inputs[0].data.tobytes() == payload
    err = _error(decode_infer_request, "m", "", payload, 0, 16)
    assert err.message == (
        "Raw input has a byte_size (32 bytes) that exceeds the maximum allowed value of 16 bytes."
        " Use --http-max-input-size to increase the limit."
    )


FOUR = {"name": "A", "shape": [4], "datatype": "FP32"}


@pytest.mark.parametrize(
    ("header", "blobs", "message"),
    [
        (
            {"inputs": [FOUR]},
            (),
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But no field is set",
        ),
        (
            {"inputs": [{**FOUR, "data": [1, 2, 3, 4], "parameters": {"binary_data_size": 16}}]},
            (b"\0" * 16,),
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
            "'binary_data_size'",
        ),
        (
            {"inputs": [{**FOUR, "parameters": {"binary_data_size": 16}}]},
            (b"\0" * 10,),
            "unexpected size for input 'A', expecting 6 additional bytes for model 'm'",
        ),
        (
            {"inputs": [{**FOUR, "parameters": {"binary_data_size": 16}}]},
            (b"\0" * 20,),
            "unexpected additional input data for model 'm'",
        ),
        (
            {"parameters": {"triton_x": 1}, "inputs": []},
            (),
            "parameter keys starting with 'triton_' are reserved for Triton usage and should "
            "not be specified.",
        ),
        (
            {"parameters": {"p": [1]}, "inputs": []},
            (),
            "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"parameters": {"sequence_start": 1}, "inputs": []},
            (),
            "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean",
        ),
        (
            {"parameters": {"priority": -1}, "inputs": []},
            (),
            "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            {"id": 5, "inputs": []},
            (),
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        ({}, (), "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
        (
            {"inputs": [{**FOUR, "shape": [-4], "data": [1]}]},
            (),
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            {"inputs": [{**FOUR, "datatype": "FP16", "data": [1, 2, 3, 4]}]},
            (),
            "receiving FP16 data via JSON is not supported. Please use the binary data format "
            "for input A",
        ),
        (
            {
                "inputs": [],
                "outputs": [
                    {"name": "o", "parameters": {"shared_memory_region": "r", "binary_data": True}}
                ],
            },
            (),
            "Output can't set both 'shared_memory_region' and 'binary_data'",
        ),
        (
            {
                "inputs": [],
                "outputs": [
                    {"name": "o", "parameters": {"shared_memory_region": "r", "classification": 2}}
                ],
            },
            (),
            "Output can't set both 'shared_memory_region' and 'classification'",
        ),
    ],
)
def test_request_errors(header: dict[str, object], blobs: tuple[bytes, ...], message: str) -> None:
    err = _error(_decode, header, *blobs)
    assert err.code is Code.INVALID_ARG
    assert err.message == message


def test_json_input_size_limit_and_element_counts() -> None:
    err = _error(_decode, {"inputs": [{**FOUR, "data": [1, 2, 3, 4]}]}, max_size=20)
    assert err.message.startswith("request JSON size of ")
    assert err.message.endswith(
        "exceeds the maximum allowed input size of 20 bytes. "
        "Use --http-max-input-size to increase the limit."
    )
    big = {"name": "A", "shape": [300], "datatype": "FP32", "data": [0] * 300}
    err = _error(_decode, {"inputs": [big]}, max_size=1000)
    assert err.message == (
        "JSON input 'A' has a byte_size (1200 bytes) that exceeds the maximum allowed value of "
        "1000 bytes. Use --http-max-input-size to increase the limit."
    )
    err = _error(_decode, {"inputs": [{**FOUR, "data": [1, 2, 3]}]})
    assert err.code is Code.INVALID_ARG  # Triton answers 500 (TritonJson error); we follow KServe
    huge = {"name": "A", "shape": [2**40, 2**40], "datatype": "FP32", "data": [1]}
    message = _error(_decode, {"inputs": [huge]}).message
    assert "causes total element count to exceed maximum size" in message


def test_zero_element_json_input_needs_no_data_values() -> None:
    decoded = _decode({"inputs": [{"name": "A", "shape": [0], "datatype": "FP32", "data": []}]})
    data = decoded.request.inputs[0].data
    assert data is not None and data.shape == (0,) and data.dtype == np.float32


# --- response encoding ------------------------------------------------------------------------


def _response() -> InferResponse:
    return InferResponse(
        model_name="m",
        model_version="3",
        id="",
        outputs=[
            InferTensor("X", "FP32", (2,), np.array([0.5, 1.5], dtype=np.float32)),
            InferTensor("S", "BYTES", (2,), np.array([b"hi", b""], dtype=object)),
            InferTensor("E", "FP32", (0,), np.zeros(0, dtype=np.float32)),
        ],
    )


def test_json_response() -> None:
    decoded = decode_infer_request("m", "", b'{"inputs":[]}', 13, MAX)
    encoded = encode_infer_response(_response(), decoded)
    assert encoded.content_type == "application/json" and encoded.header_length is None
    doc = orjson.loads(encoded.body)
    assert "id" not in doc and doc["model_version"] == "3"
    assert doc["outputs"][0] == {"name": "X", "datatype": "FP32", "shape": [2], "data": [0.5, 1.5]}
    assert doc["outputs"][1]["data"] == ["hi", ""]


def test_binary_response_orders_blobs_like_the_json() -> None:
    head = b'{"inputs":[],"parameters":{"binary_data_output":true}}'
    decoded = decode_infer_request("m", "", head, len(head), MAX)
    response = _response()
    response.id = "abc"
    response.shm_outputs["Z"] = (SharedMemoryRef("r", 0, 8), "INT32", (2,))
    encoded = encode_infer_response(response, decoded)
    assert encoded.content_type == "application/octet-stream"
    assert encoded.header_length is not None
    doc = orjson.loads(encoded.body[: encoded.header_length])
    assert doc["id"] == "abc"
    sizes = [o.get("parameters", {}).get("binary_data_size") for o in doc["outputs"]]
    assert sizes == [8, 4 + 2 + 4, 0, None]  # zero-byte outputs add no bytes; shm has no data
    tail = encoded.body[encoded.header_length :]
    assert tail[:8] == np.array([0.5, 1.5], dtype=np.float32).tobytes()
    assert tail[8:] == struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)


def test_nan_outputs_use_bare_tokens() -> None:
    decoded = decode_infer_request("m", "", b'{"inputs":[]}', 13, MAX)
    response = InferResponse(
        "m", "1", outputs=[InferTensor("X", "FP64", (2,), np.array([np.nan, np.inf]))]
    )
    body = encode_infer_response(response, decoded).body
    assert b"[NaN,Infinity]" in body


# --- compression and restrictions --------------------------------------------------------------


def test_compression_round_trip_and_errors() -> None:
    data = b"x" * 1000
    assert decompress_body(gzip.compress(data), "gzip", MAX) == data
    assert decompress_body(zlib.compress(data), "deflate", MAX) == data
    assert decompress_body(data, "identity", MAX) == data
    assert _error(decompress_body, data, "br", MAX).code is Code.UNSUPPORTED
    assert _error(decompress_body, b"not gzip", "gzip", MAX).code is Code.INVALID_ARG
    assert (
        "--http-max-input-size" in _error(decompress_body, gzip.compress(data), "gzip", 10).message
    )
    assert gzip.decompress(compress(data, "gzip")) == data
    assert zlib.decompress(compress(data, "deflate")) == data


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (None, "identity"),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip;q=0.5, deflate;q=0.8", "deflate"),
        ("br, gzip;q=0.2", "gzip"),
        ("gzip;q=0", "identity"),
        ("identity, gzip", "identity"),
        ("br", "identity"),
    ],
)
def test_response_encoding_by_q_value(header: str | None, chosen: str) -> None:
    assert choose_response_encoding(header) == chosen


def test_restricted_api_parsing_and_routes() -> None:
    restrictions = parse_restricted_apis(["health,inference:key=secret", "logging:k2=v"])
    assert restrictions["health"] == ("key", "secret") and restrictions["logging"] == ("k2", "v")
    routes = endpoint_restrictions(restrictions)
    # only the endpoints of restricted categories carry a check, decided once
    assert routes == {
        Endpoint.HEALTH_LIVE: ("key", "secret"),
        Endpoint.HEALTH_READY: ("key", "secret"),
        Endpoint.MODEL_READY: ("key", "secret"),
        Endpoint.MODEL_INFER: ("key", "secret"),
        Endpoint.MODEL_GENERATE: ("key", "secret"),
        Endpoint.LOGGING: ("k2", "v"),
    }
    assert endpoint_restrictions({}) == {}
    response = restricted_response("key")
    assert response.status == 403 and response.content_type == "text/plain"
    assert response.body == b'{"error":"This API is restricted, expecting header \'key\'"}'


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        # Triton's ParseGenericConfigOption / ParseRestrictedFeatureOption, word for word
        (["nope:k=v"], "unknown restricted api 'nope'"),
        (["health,,metadata:k=v"], "unknown restricted api ''"),
        (["health:a=b", "health:c=d"], "restricted api 'health' can not be specified in multiple"),
        (["health,health:a=b"], "restricted api 'health' can not be specified in multiple"),
        (
            ["health"],
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health",
        ),
        (["health=v"], "option format is '<config name>:<setting>=<value>'. Got health=v"),
        (["health:k"], "option format is '<config name>:<setting>=<value>'. Got health:k"),
        ([":k=v"], "option format is '<config name>:<setting>=<value>'. Got :k=v"),
        (["health:=v"], "option format is '<config name>:<setting>=<value>'. Got health:=v"),
        (["health:k="], "option format is '<config name>:<setting>=<value>'. Got health:k="),
        (["health=k:v"], "option format is '<config name>:<setting>=<value>'. Got health=k:v"),
    ],
)
def test_restricted_api_bad_specs(specs: list[str], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_restricted_apis(specs)
    assert message in str(caught.value)


def test_restricted_api_spec_splits_at_the_first_colon_and_equals() -> None:
    assert parse_restricted_apis(["trace:k:x=v=w"]) == {"trace": ("k:x", "v=w")}
