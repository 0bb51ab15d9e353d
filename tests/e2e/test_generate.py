"""The generate extension on a real repokit server (port 0): /generate and /generate_stream
with python models (decoupled or not, dynamic batching), the errors, and the statistics; the
same cases run against Triton 2.51 in tests/differential/test_generate_vs_triton.py."""

from __future__ import annotations

import http.client
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.generate_cases import CASES, answer, post
from tests.e2e.generate_models import build_generate_repository
from tests.frontends.http.server_thread import ServerThread, running_server

NOT_ONE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)
NOT_OBJECT = "attempt to access JSON non-object as object"
NOT_SIGNED = "attempt to access JSON non-signed-integer as signed-integer"
PARAMETER_TYPES = "It should be either 'int', 'bool', or 'string'."
JSON = "application/json"
SSE = "text/event-stream"


def _echo(text: str, counts: list[float], **extra: str) -> dict[str, Any]:
    return {
        "COUNT_OUT": counts,
        "TEXT_OUT": text,
        "model_name": "text_echo",
        "model_version": "1",
        **extra,
    }


def _token(value: int) -> dict[str, Any]:
    return {"TOKEN": value, "model_name": "token_stream", "model_version": "1"}


def _missing(expected: int, got: list[str], missing: list[str], model: str) -> str:
    return (
        f"[request id: <id_unknown>] expected {expected} inputs but got {len(got)} inputs for "
        f"model '{model}'. Got input(s) {got}, but missing required input(s) {missing}. "
        "Please provide all required input(s)."
    )


def _exists(name: str, request_id: str = "<id_unknown>") -> str:
    return f"[request id: {request_id}] input '{name}' already exists in request"


NESTED = "Converting keyword: 'parameters': "
HALF = "sending FP16 data via JSON is not supported. Please use the binary data format for output"


def _typed(name: str, value: Any) -> dict[str, Any]:
    return {name: value, "model_name": "typed_stream", "model_version": "1"}


EXPECTED: dict[str, tuple[int, str, Any]] = {
    "echo": (200, JSON, _echo("abababx", [3.0, 1.5], id="7")),
    "echo_nested": (200, JSON, _echo("abab", [2.0, 1.0])),
    "echo_version": (200, JSON, _echo("a", [1.0, 0.5])),
    "batched": (
        200,
        JSON,
        {"Y": [2.5, 3.0, 0.0], "model_name": "batched_add", "model_version": "1"},
    ),
    "batched_scalar": (200, JSON, {"Y": 1.25, "model_name": "batched_add", "model_version": "1"}),
    "missing_input": (400, JSON, {"error": _missing(2, ["TEXT"], ["COUNT"], "text_echo")}),
    "wrong_type": (
        400,
        JSON,
        {"error": "Unable to parse 'data': " + NOT_SIGNED},
    ),
    "wrong_shape": (
        400,
        JSON,
        {"error": "The schema can not convert input 'TEXT' to tensor with proper shape"},
    ),
    "bad_parameter": (
        400,
        JSON,
        {"error": "parameter 'extra' has invalid type. " + PARAMETER_TYPES},
    ),
    "parameters_not_object": (
        400,
        JSON,
        {"error": "Expected JSON object for keyword: 'parameters': " + NOT_OBJECT},
    ),
    "model_error": (400, JSON, {"error": "COUNT must not be negative"}),
    "unknown_model": (
        404,
        JSON,
        {"error": "Request for unknown model: 'nothing_here' is not found"},
    ),
    "decoupled_one": (200, JSON, _token(0)),
    "decoupled_many": (200, JSON, {"error": NOT_ONE}),
    "decoupled_error": (400, JSON, {"error": "N must not be negative"}),
    "stream_tokens": (200, SSE, [_token(0), _token(1), _token(2)]),
    "stream_none": (200, SSE, []),
    "stream_error": (400, SSE, [{"error": "N must not be negative"}]),
    "stream_plain_model": (200, SSE, [_echo("aa", [2.0, 1.0])]),
    "stream_missing_input": (400, JSON, {"error": _missing(1, [], ["N"], "token_stream")}),
    "stream_plain_error": (400, SSE, [{"error": "COUNT must not be negative"}]),
    "repeated_input": (400, JSON, {"error": _exists("TEXT")}),
    "repeated_input_first": (400, JSON, {"error": _exists("TEXT")}),
    "repeated_input_escaped": (400, JSON, {"error": _exists("TEXT")}),
    "repeated_parameter": (200, JSON, _echo("ax", [1.0, 0.5])),
    "repeated_nested_parameter": (200, JSON, _echo("ax", [1.0, 0.5])),
    "repeated_id": (200, JSON, _echo("a", [1.0, 0.5], id="a")),
    "repeated_parameters_object": (400, JSON, {"error": NESTED + _exists("COUNT")}),
    "stream_repeated_input": (400, JSON, {"error": _exists("N")}),
    "nested_bad_parameter": (
        400,
        JSON,
        {"error": NESTED + "parameter 'extra' has invalid type. " + PARAMETER_TYPES},
    ),
    "nested_wrong_type": (400, JSON, {"error": NESTED + "Unable to parse 'data': " + NOT_SIGNED}),
    "bytes_not_string": (
        400,
        JSON,
        {"error": "Unable to parse JSON bytes array: attempt to access JSON non-string as string"},
    ),
    "bytes_nested_one": (200, JSON, _echo("abab", [2.0, 1.0])),
    "bytes_nested_many": (
        400,
        JSON,
        {
            "error": "[request id: <id_unknown>] unexpected number of string elements 2 for "
            "inference input 'TEXT' for model 'text_echo', expecting 1"
        },
    ),
    "bytes_nested_none": (
        400,
        JSON,
        {
            "error": "[request id: n] expected 1 string elements for inference input 'TEXT' "
            "for model 'text_echo', got 0"
        },
    ),
    "typed_half": (400, JSON, {"error": HALF}),
    "typed_infinite": (200, JSON, _typed("DOUBLE", [math.inf, -math.inf, 0.25])),
    "stream_typed_half_first": (400, SSE, [{"error": HALF}, _typed("TEXT", "ok")]),
    "stream_typed_half_middle": (
        200,
        SSE,
        [_typed("TEXT", "ok"), {"error": HALF}, _typed("TEXT", "ok")],
    ),
    "stream_typed_infinite": (200, SSE, [_typed("DOUBLE", [math.inf, -math.inf, 0.25])]),
    "parameters_text": (
        200,
        JSON,
        {
            "P": '{"g":"\u00e9\\"/\\u0001","d":0.5,"n":-5,"b":false}',
            "model_name": "parameters_text",
            "model_version": "1",
        },
    ),
    "nested_repeated_input": (400, JSON, {"error": NESTED + _exists("TEXT", "q")}),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_generate_repository(tmp_path_factory.mktemp("generate") / "models")
    with running_server(repo) as srv:
        yield srv


def _address(server: ServerThread) -> tuple[str, int]:
    host, port = server.http_url.split(":")
    return host, int(port)


@pytest.mark.parametrize(("name", "suffix", "body"), CASES, ids=[c[0] for c in CASES])
def test_generate_answers(server: ServerThread, name: str, suffix: str, body: Any) -> None:
    host, port = _address(server)
    assert answer(*post(host, port, suffix, body)) == EXPECTED[name]


def test_body_that_is_not_json_is_a_bad_request(server: ServerThread) -> None:
    host, port = _address(server)
    status, content_type, body = post(host, port, "text_echo/generate", b"{not json")
    assert (status, content_type) == (400, JSON)
    assert "error" in json.loads(body)


def test_body_that_is_not_an_object_is_a_bad_request(server: ServerThread) -> None:
    host, port = _address(server)
    status, _, body = post(host, port, "text_echo/generate", [1, 2])
    assert status == 400
    assert json.loads(body) == {"error": "the generate request body must be a JSON object"}


def test_generate_counts_as_inference(server: ServerThread) -> None:
    host, port = _address(server)

    def successes() -> int:
        _, _, body = post_get(host, port, "/v2/models/batched_add/stats")
        stats = json.loads(body)["model_stats"][0]
        return int(stats["inference_stats"]["success"]["count"])

    before = successes()
    assert post(host, port, "batched_add/generate", {"X": [1.0]})[0] == 200
    assert post(host, port, "batched_add/generate_stream", {"X": [1.0]})[0] == 200
    assert successes() == before + 2


def post_get(host: str, port: int, path: str) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def test_generate_not_advertised_as_an_extension(server: ServerThread) -> None:
    """Triton 2.51 serves generate without listing it in the server metadata."""
    host, port = _address(server)
    _, _, body = post_get(host, port, "/v2")
    assert "generate" not in json.loads(body)["extensions"]


def test_non_finite_floats_are_bare_tokens(server: ServerThread) -> None:
    """NaN and Infinity as Triton writes them (rapidjson's flags), in both endpoints."""
    host, port = _address(server)
    _, _, body = post(host, port, "typed_stream/generate", {"KINDS": ["nan"]})
    assert body == b'{"DOUBLE":NaN,"model_name":"typed_stream","model_version":"1"}'
    _, _, body = post(host, port, "typed_stream/generate_stream", {"KINDS": ["infinite", "nan"]})
    assert body == (
        b'data: {"DOUBLE":[Infinity,-Infinity,0.25],"model_name":"typed_stream",'
        b'"model_version":"1"}\n\n'
        b'data: {"DOUBLE":NaN,"model_name":"typed_stream","model_version":"1"}\n\n'
    )


def test_bytes_that_are_not_utf8_are_an_error_that_says_why(server: ServerThread) -> None:
    """Triton 2.51 writes the raw bytes into its JSON (which is then not UTF-8); repokit says
    the output cannot be sent as JSON, in the stream as an error event in that response's
    place."""
    host, port = _address(server)
    message = (
        "output 'TEXT' holds bytes that are not valid UTF-8 and cannot be sent as JSON; the "
        "generate extension has no binary form (/infer has: parameter binary_data: true)"
    )
    found = answer(*post(host, port, "typed_stream/generate", {"KINDS": ["raw"]}))
    assert found == (400, JSON, {"error": message})
    found = answer(*post(host, port, "typed_stream/generate_stream", {"KINDS": ["ok", "raw"]}))
    assert found == (200, SSE, [_typed("TEXT", "ok"), {"error": message}])
