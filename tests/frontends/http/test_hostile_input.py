"""Hostile or careless HTTP input gets an answer with a client status and the connection stays
usable (issue 17, items 7 and 12), sent with a sized body and with a chunked one.

Triton 2.51, asked the same, answers 500 "failed to parse the request JSON buffer: The surrogate
pair in string is invalid." for a lone surrogate; repokit answers 400, as for any malformed JSON
(README, deliberate differences).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from repokit.frontends.http.protocol import error_bytes
from repokit.frontends.http.responses import error_response
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server
from tests.frontends.http.test_protocol import (
    ADD_SUB_BODY,
    INFER,
    Connection,
    chunked_answer,
    request,
)

A = list(range(16))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("hostile") / "models")
    with running_server(repo) as srv:
        yield srv


@pytest.fixture
def conn(server: ServerThread) -> Iterator[Connection]:
    assert server.handle is not None and server.handle.http_port is not None
    connection = Connection(server.handle.http_port)
    yield connection
    connection.close()


def _body(**extra: object) -> bytes:
    inputs = [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": A},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": A},
    ]
    document: dict[str, object] = {"inputs": inputs}
    name = extra.pop("name", None)
    if name is not None:
        inputs[0]["name"] = name
    document.update(extra)
    return json.dumps(document).encode()  # ensure_ascii: lone surrogates as \ud800 escapes


SURROGATES = {
    "input name": _body(name="\ud800"),
    "request id": _body(id="\udc00"),
    "parameter key": _body(parameters={"\ud800": 1}),
    "BYTES element": json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["\ud800"]}]}
    ).encode(),
    "output name": _body(outputs=[{"name": "\udfff"}]),
}


@pytest.mark.parametrize("case", list(SURROGATES))
def test_lone_surrogate_is_a_parse_error(conn: Connection, case: str) -> None:
    body = SURROGATES[case]
    assert b"\\ud" in body
    for answer in (
        (conn.send(request(INFER, body)), conn.read())[1],
        chunked_answer(conn, INFER, body, {}),
    ):
        assert answer.status == 400, answer.body
        message = answer.json()["error"]  # type: ignore[index]
        assert message.startswith("failed to parse the request JSON buffer: ")
        assert "surrogate" in message
    conn.send(request(INFER, ADD_SUB_BODY))  # the connection still serves
    assert conn.read().status == 200


def test_surrogate_pair_is_a_character(conn: Connection) -> None:
    conn.send(request(INFER, _body(name="\U0001f600")))
    answer = conn.read()
    assert answer.status == 400
    assert "\U0001f600" in answer.json()["error"]  # type: ignore[index]


def test_error_bodies_survive_unencodable_messages() -> None:
    """A message holding a lone surrogate (from anywhere) still becomes a JSON body."""
    response = error_response(400, "bad '\ud800'")
    assert json.loads(response.body) == {"error": "bad '\ud800'"}
    head, _, body = error_bytes(400, "bad '\ud800'").partition(b"\r\n\r\n")
    assert json.loads(body) == {"error": "bad '\ud800'"}
    assert f"content-length: {len(body)}".encode() in head.lower()
