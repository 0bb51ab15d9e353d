"""Fuzzing the HTTP infer codecs (JSON and binary tensor extension): the pure decoder, and a
real server answering every request with a client status."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from repokit.errors import RepokitError
from repokit.frontends.http.infer_request import decode_infer_request
from repokit.frontends.runner import ServerHandle
from repokit.frontends.status import http_status
from tests.fuzz.conftest import PURE, PURE_SLOW, SERVED, SERVED_SLOW, long_run
from tests.fuzz.http_client import FuzzClient
from tests.fuzz.strategies import MODELS, encode_json, infer_documents, mangled

LIMIT = 1 << 26


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    return draw(mangled(encode_json(draw(infer_documents()))))


@st.composite
def binary_bodies(draw: st.DrawFn) -> tuple[bytes, str]:
    """(body, Inference-Header-Content-Length value): a JSON head and binary tensors."""
    document = draw(infer_documents())
    sizes = []
    inputs = document.get("inputs")
    for item in inputs if isinstance(inputs, list) else []:
        if isinstance(item, dict) and draw(st.booleans()):
            size = draw(st.sampled_from([0, 4, 64, 128, 2**31, -1]) | st.integers(0, 300))
            item.pop("data", None)
            item["parameters"] = {**(item.get("parameters") or {}), "binary_data_size": size}
            sizes.append(max(0, min(size, 300)))
    head = encode_json(document)
    tail = draw(st.binary(min_size=sum(sizes), max_size=sum(sizes) + 8))
    length = draw(
        st.sampled_from([str(len(head))] * 4 + ["0", "-1", "x", str(len(head) + len(tail) + 1)])
        | st.integers(0, len(head) + len(tail)).map(str)
    )
    return head + tail, length


def _check_decode(body: bytes, header_length: int) -> None:
    try:
        decode_infer_request("add_sub", "", body, header_length, LIMIT)
    except RepokitError as error:
        assert http_status(error.code) < 500, error.message


def _json_decode(body: bytes) -> None:
    _check_decode(body, 0)


def _binary_decode(case: tuple[bytes, str]) -> None:
    body, length = case
    try:
        header_length = int(length)
    except ValueError:
        return
    if 0 <= header_length <= len(body):
        _check_decode(body, header_length)


test_json_decoder = PURE(given(json_bodies())(_json_decode))
test_binary_decoder = PURE(given(binary_bodies())(_binary_decode))
test_json_decoder_long = long_run(PURE_SLOW(given(json_bodies())(_json_decode)))
test_binary_decoder_long = long_run(PURE_SLOW(given(binary_bodies())(_binary_decode)))


def _assert_client_answer(status: int, body: bytes) -> None:
    assert status < 500, body[:2000]
    if status != 200:
        assert set(json.loads(body)) == {"error"}, body[:2000]


def _served_json(fuzz_server: ServerHandle, model: str, body: bytes, chunked: bool) -> None:
    with FuzzClient(fuzz_server.http_port or 0) as client:
        answer = client.request(
            "POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"}, chunked
        )
    _assert_client_answer(answer.status, answer.body)


def _served_binary(
    fuzz_server: ServerHandle, model: str, case: tuple[bytes, str], chunked: bool
) -> None:
    body, length = case
    headers = {"Inference-Header-Content-Length": length}
    with FuzzClient(fuzz_server.http_port or 0) as client:
        answer = client.request("POST", f"/v2/models/{model}/infer", body, headers, chunked)
    _assert_client_answer(answer.status, answer.body)


models = st.sampled_from(MODELS[:-1])
test_served_json = SERVED(
    given(model=models, body=json_bodies(), chunked=st.booleans())(_served_json)
)
test_served_binary = SERVED(
    given(model=models, case=binary_bodies(), chunked=st.booleans())(_served_binary)
)
test_served_json_long = long_run(
    SERVED_SLOW(given(model=models, body=json_bodies(), chunked=st.booleans())(_served_json))
)
test_served_binary_long = long_run(
    SERVED_SLOW(given(model=models, case=binary_bodies(), chunked=st.booleans())(_served_binary))
)
