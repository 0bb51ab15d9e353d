"""Fuzzing gRPC request decoding: the pure decoder of ModelInferRequest, and a real server's
ModelInfer and ModelStreamInfer fed built, mangled and garbage messages. Every call ends with a
client status (INTERNAL only as Triton's "Unable to parse request" for bytes that are no
message), and a stream answers every message it was sent."""

from __future__ import annotations

import grpc
from hypothesis import given
from hypothesis import strategies as st

from repokit.errors import RepokitError
from repokit.frontends.grpc.codec import decode_infer_request
from repokit.frontends.runner import ServerHandle
from repokit.frontends.status import grpc_status_name
from repokit.protocol.generated import grpc_service_pb2 as pb
from tests.fuzz.conftest import PURE, PURE_SLOW, SERVED, SERVED_SLOW, long_run
from tests.fuzz.grpc_strategies import infer_requests
from tests.fuzz.strategies import mangled

CLIENT_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.ALREADY_EXISTS,
}
UNPARSABLE = "Unable to parse request"
TIMEOUT_S = 10.0


def _decode(msg: pb.ModelInferRequest) -> None:
    try:
        decode_infer_request(msg)
    except RepokitError as error:
        assert grpc_status_name(error.code) not in ("INTERNAL", "UNKNOWN", "UNAVAILABLE"), (
            error.message
        )


test_decoder = PURE(given(infer_requests())(_decode))
test_decoder_long = long_run(PURE_SLOW(given(infer_requests())(_decode)))


@st.composite
def wire_messages(draw: st.DrawFn) -> bytes:
    return draw(mangled(draw(infer_requests()).SerializeToString()))


def _channel(server: ServerHandle) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")


def _unary(fuzz_server: ServerHandle, raw: bytes) -> None:
    with _channel(fuzz_server) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer", request_serializer=lambda b: b
        )
        try:
            call(raw, timeout=TIMEOUT_S)
        except grpc.RpcError as error:
            code, details = error.code(), error.details()
            assert code in CLIENT_CODES or (
                code == grpc.StatusCode.INTERNAL and details == UNPARSABLE
            ), (code, details)


def _stream(fuzz_server: ServerHandle, messages: list[bytes]) -> None:
    with _channel(fuzz_server) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=lambda b: b,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        stream = call(iter(messages), timeout=TIMEOUT_S * 2)
        replies = list(stream)
        assert stream.code() == grpc.StatusCode.OK
    assert len(replies) == len(messages)
    for reply in replies:
        assert not reply.error_message.startswith("internal error"), reply.error_message


test_served_unary = SERVED(given(raw=wire_messages())(_unary))
test_served_stream = SERVED(
    given(messages=st.lists(wire_messages(), min_size=1, max_size=4))(_stream)
)
test_served_unary_long = long_run(SERVED_SLOW(given(raw=wire_messages())(_unary)))
test_served_stream_long = long_run(
    SERVED_SLOW(given(messages=st.lists(wire_messages(), min_size=1, max_size=4))(_stream))
)
