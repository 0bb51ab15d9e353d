"""Generate-extension requests and how to read their answers, shared by the repokit tests
and the differential tests against Triton 2.51."""

from __future__ import annotations

import http.client
import json
from typing import Any

# (name, path suffix after /v2/models/, JSON body)
CASES: list[tuple[str, str, Any]] = [
    ("echo", "text_echo/generate", {"id": "7", "TEXT": "ab", "COUNT": 3, "tag": "x"}),
    ("echo_nested", "text_echo/generate", {"TEXT": ["ab"], "parameters": {"COUNT": 2}}),
    ("echo_version", "text_echo/versions/1/generate", {"TEXT": "a", "COUNT": 1}),
    ("batched", "batched_add/generate", {"X": [1.5, 2.0, -1]}),
    ("batched_scalar", "batched_add/generate", {"X": 0.25}),
    ("missing_input", "text_echo/generate", {"TEXT": "a"}),
    ("wrong_type", "text_echo/generate", {"TEXT": "a", "COUNT": "3"}),
    ("wrong_shape", "text_echo/generate", {"TEXT": ["a", "b"], "COUNT": 1}),
    ("bad_parameter", "text_echo/generate", {"TEXT": "a", "COUNT": 1, "extra": [1, 2]}),
    ("parameters_not_object", "text_echo/generate", {"TEXT": "a", "parameters": 3}),
    ("model_error", "text_echo/generate", {"TEXT": "a", "COUNT": -1}),
    ("unknown_model", "nothing_here/generate", {"TEXT": "a"}),
    ("decoupled_one", "token_stream/generate", {"N": 1}),
    ("decoupled_many", "token_stream/generate", {"N": 3}),
    ("decoupled_error", "token_stream/generate", {"N": -1}),
    ("stream_tokens", "token_stream/generate_stream", {"N": 3}),
    ("stream_none", "token_stream/generate_stream", {"N": 0}),
    ("stream_error", "token_stream/generate_stream", {"N": -1}),
    ("stream_plain_model", "text_echo/generate_stream", {"TEXT": "a", "COUNT": 2}),
    ("stream_missing_input", "token_stream/generate_stream", {}),
    ("stream_plain_error", "text_echo/generate_stream", {"TEXT": "a", "COUNT": -1}),
    # a key given twice (raw bodies: a dict cannot hold it): converted twice, first value
    ("repeated_input", "text_echo/generate", b'{"TEXT": "a", "COUNT": 1, "TEXT": "b"}'),
    ("repeated_input_first", "text_echo/generate", b'{"TEXT": "a", "TEXT": "b", "COUNT": "x"}'),
    ("repeated_input_escaped", "text_echo/generate", b'{"TEXT": "a", "COUNT": 1, "\\u0054EXT": 0}'),
    (
        "repeated_parameter",
        "text_echo/generate",
        b'{"TEXT": "a", "COUNT": 1, "tag": "x", "tag": "y"}',
    ),
    (
        "repeated_nested_parameter",
        "text_echo/generate",
        b'{"TEXT": "a", "COUNT": 1, "parameters": {"tag": "x", "tag": "y"}}',
    ),
    ("repeated_id", "text_echo/generate", b'{"id": "a", "TEXT": "a", "COUNT": 1, "id": "b"}'),
    (
        "repeated_parameters_object",
        "text_echo/generate",
        b'{"TEXT": "a", "parameters": {"COUNT": 1}, "parameters": {"COUNT": 2}}',
    ),
    ("stream_repeated_input", "token_stream/generate_stream", b'{"N": 1, "N": 2}'),
    # a response JSON cannot carry is an error in its place; non-finite floats as bare tokens
    ("typed_half", "typed_stream/generate", {"KINDS": ["half"]}),
    ("typed_infinite", "typed_stream/generate", {"KINDS": ["infinite"]}),
    ("stream_typed_half_first", "typed_stream/generate_stream", {"KINDS": ["half", "ok"]}),
    ("stream_typed_half_middle", "typed_stream/generate_stream", {"KINDS": ["ok", "half", "ok"]}),
    ("stream_typed_infinite", "typed_stream/generate_stream", {"KINDS": ["infinite"]}),
    # the parameters a python model reads, as text
    (
        "parameters_text",
        "parameters_text/generate",
        {"X": 1, "g": '\u00e9"/\u0001', "d": 0.5, "n": -5, "b": False},
    ),
    # an error inside "parameters" names it
    (
        "nested_bad_parameter",
        "text_echo/generate",
        {"TEXT": "a", "COUNT": 1, "parameters": {"extra": [1]}},
    ),
    ("nested_wrong_type", "text_echo/generate", {"TEXT": "a", "parameters": {"COUNT": "3"}}),
    # BYTES inputs: every string is read (nested arrays too), then counted against the shape
    ("bytes_not_string", "text_echo/generate", {"TEXT": ["a", 5], "COUNT": 1}),
    ("bytes_nested_one", "text_echo/generate", {"TEXT": [["ab"]], "COUNT": 2}),
    ("bytes_nested_many", "text_echo/generate", {"TEXT": [["a", ["b"]]], "COUNT": 1}),
    ("bytes_nested_none", "text_echo/generate", {"id": "n", "TEXT": [[]], "COUNT": 1}),
    (
        "nested_repeated_input",
        "text_echo/generate",
        {"id": "q", "TEXT": "a", "COUNT": 1, "parameters": {"TEXT": "b"}},
    ),
]


def post(host: str, port: int, suffix: str, body: Any) -> tuple[int, str, bytes]:
    """(status, content type without parameters, body) of one POST."""
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request(
            "POST", f"/v2/models/{suffix}", payload, {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        content_type = (response.getheader("Content-Type") or "").split(";")[0].strip()
        return response.status, content_type, response.read()
    finally:
        connection.close()


def events(body: bytes) -> list[Any]:
    """The JSON of each ``data:`` event of an SSE body (which must hold nothing else)."""
    text = body.decode()
    assert text.endswith("\n\n") or text == "", text
    chunks = [chunk for chunk in text.split("\n\n") if chunk]
    assert all(chunk.startswith("data: ") for chunk in chunks), text
    return [json.loads(chunk[len("data: ") :]) for chunk in chunks]


def answer(status: int, content_type: str, body: bytes) -> tuple[int, str, Any]:
    """A comparable form: SSE bodies as their event list, JSON bodies parsed."""
    if content_type == "text/event-stream":
        return status, content_type, events(body)
    return status, content_type, json.loads(body)
