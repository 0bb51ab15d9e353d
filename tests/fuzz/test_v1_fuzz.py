"""Fuzzing the legacy v1 API: the ``NV-InferRequest`` header codec (text InferRequestHeader),
and a real server's ``/api/infer`` and ``GRPCService/Infer`` fed built, mangled and garbage
headers and bodies. No answer is a server error: HTTP 200/400/404, and a RequestStatus code
that is never INTERNAL or UNKNOWN."""

from __future__ import annotations

import grpc
from google.protobuf import text_format
from hypothesis import example, given
from hypothesis import strategies as st

from repokit.errors import Code, RepokitError
from repokit.frontends.runner import ServerHandle
from repokit.frontends.v1.http_api import parse_request_header
from repokit.protocol.generated.v1 import api_pb2
from repokit.protocol.generated.v1 import grpc_service_pb2 as pb
from repokit.protocol.generated.v1 import request_status_pb2 as rs
from tests.fuzz.conftest import PURE, PURE_SLOW, SERVED, SERVED_SLOW, long_run
from tests.fuzz.http_client import FuzzClient
from tests.fuzz.strategies import BIG, MODELS, names

SERVER_ERRORS = {rs.INTERNAL, rs.UNKNOWN}
U64 = st.integers(0, 2**64 - 1) | st.sampled_from([b for b in BIG if b < 2**64])


@st.composite
def request_headers(draw: st.DrawFn) -> api_pb2.InferRequestHeader:
    header = api_pb2.InferRequestHeader(
        id=draw(U64),
        flags=draw(st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 2, 3])),
        correlation_id=draw(U64 | st.just(0)),
        batch_size=draw(st.integers(0, 2**32 - 1) | st.integers(0, 9)),
        priority=draw(st.integers(0, 2**32 - 1)),
        timeout_microseconds=draw(U64),
    )
    for _ in range(draw(st.integers(0, 3))):
        item = header.input.add(
            name=draw(names),
            dims=draw(
                st.lists(st.integers(-3, 20) | st.sampled_from([2**40, -(2**63)]), max_size=3)
            ),
            batch_byte_size=draw(st.sampled_from([0, 16, 64, 128, 2**40]) | U64),
        )
        if draw(st.integers(0, 4)) == 0:
            item.shared_memory.name = draw(st.text(max_size=4))
            item.shared_memory.byte_size = draw(U64)
    for _ in range(draw(st.integers(0, 2))):
        output = header.output.add(name=draw(names))
        if draw(st.booleans()):
            output.cls.count = draw(st.integers(0, 2**32 - 1))
    return header


@st.composite
def header_texts(draw: st.DrawFn) -> str:
    """A header's one-line text form, often mangled; only what an HTTP header can carry."""
    text = text_format.MessageToString(draw(request_headers()), as_one_line=True)
    choice = draw(st.integers(0, 5))
    if choice == 3 and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif choice == 4:
        text = draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60))
    elif choice == 5:  # bytes that are not UTF-8 (sent as they are)
        text = text.replace(
            "INPUT",
            draw(
                st.text(st.characters(min_codepoint=128, max_codepoint=255), min_size=1, max_size=2)
            ),
        )
    return text


def _parse(text: str) -> None:
    try:
        parse_request_header(text)
    except RepokitError as error:
        assert error.code is Code.INVALID_ARG, error.message


test_header_codec = PURE(given(header_texts())(_parse))
test_header_codec_long = long_run(PURE_SLOW(given(header_texts())(_parse)))


def _served_http(fuzz_server: ServerHandle, model: str, text: str, body: bytes) -> None:
    try:
        value = text.encode("latin-1").decode("latin-1")  # these bytes as they are
    except UnicodeEncodeError:
        value = text.encode("utf-8").decode("latin-1")  # the text's UTF-8 bytes
    with FuzzClient(fuzz_server.http_port or 0) as client:
        answer = client.request("POST", f"/api/infer/{model}", body, {"NV-InferRequest": value})
    assert answer.status in (200, 400, 404), (answer.status, answer.body[:500])
    status = text_format.Parse(answer.headers["nv-status"], rs.RequestStatus())
    assert status.code not in SERVER_ERRORS, status.msg


def _served_grpc(
    fuzz_server: ServerHandle, model: str, header: api_pb2.InferRequestHeader, raw: list[bytes]
) -> None:
    request = pb.InferRequest(model_name=model, model_version=-1, meta_data=header, raw_input=raw)
    with grpc.insecure_channel(f"127.0.0.1:{fuzz_server.grpc_port}") as channel:
        call = channel.unary_unary(
            "/nvidia.inferenceserver.GRPCService/Infer",
            request_serializer=pb.InferRequest.SerializeToString,
            response_deserializer=pb.InferResponse.FromString,
        )
        reply = call(request, timeout=10)
    assert reply.request_status.code not in SERVER_ERRORS, reply.request_status.msg


models = st.sampled_from(MODELS[:-1])
bodies = st.binary(max_size=300)
raw_inputs = st.lists(st.binary(max_size=130), max_size=3)
test_served_http = SERVED(
    example(model="add_sub", text='input { name: "\x80" }', body=b"")(
        given(model=models, text=header_texts(), body=bodies)(_served_http)
    )
)
test_served_grpc = SERVED(
    given(model=models, header=request_headers(), raw=raw_inputs)(_served_grpc)
)
test_served_http_long = long_run(
    SERVED_SLOW(given(model=models, text=header_texts(), body=bodies)(_served_http))
)
test_served_grpc_long = long_run(
    SERVED_SLOW(given(model=models, header=request_headers(), raw=raw_inputs)(_served_grpc))
)
