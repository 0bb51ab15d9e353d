"""Bytes that are no valid request message, over gRPC (issue 17, item 8).

Streams: every message gets an answer. Triton 2.51 treats an unparsable stream message as the
end of the stream (status OK, the requests after it never answered); repokit answers it in-band
like any failed request, with an error saying which message it was, and goes on with the next.
Unary RPCs: Triton's INTERNAL "Unable to parse request" for every method (grpc.aio's own answer
would be UNKNOWN with a Python exception name).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from repokit.frontends.runner import ServerHandle
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import health_pb2 as health_pb
from repokit.protocol.generated.v1 import grpc_service_pb2 as v1
from repokit.protocol.generated.v1 import request_status_pb2 as rs
from tests.frontends.grpc.serving import make_repository, running_server

GARBAGE = b"\xff" * 50


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repo = make_repository(tmp_path_factory.mktemp("unparsable"), with_types_model=False)
    with running_server(repo) as handle:
        yield handle


@pytest.fixture
def channel(server: ServerHandle) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as chan:
        yield chan


def _infer(request_id: str) -> bytes:
    request = pb.ModelInferRequest(model_name="add_sub", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        tensor.contents.fp32_contents.extend(range(16))
    return request.SerializeToString()


def _raw_stream(channel: grpc.Channel, method: str, parse: object) -> object:
    return channel.stream_stream(
        method,
        request_serializer=lambda raw: raw,
        response_deserializer=parse,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("bad", [GARBAGE, b"\x0a\x09add_sub", b"\x80"])
def test_stream_answers_every_message(channel: grpc.Channel, bad: bytes) -> None:
    call = _raw_stream(
        channel,
        "/inference.GRPCInferenceService/ModelStreamInfer",
        pb.ModelStreamInferResponse.FromString,
    )
    replies = list(call(iter([_infer("r1"), bad, _infer("r3")]), timeout=60))  # type: ignore[operator]
    assert len(replies) == 3
    good = sorted(r.infer_response.id for r in replies if not r.error_message)
    assert good == ["r1", "r3"]
    (failed,) = [r for r in replies if r.error_message]
    assert failed.error_message == (
        f"Unable to parse request: stream message 2 ({len(bad)} bytes) is not a valid "
        "inference.ModelInferRequest"
    )
    assert failed.infer_response.id == ""


def test_stream_of_only_garbage_is_answered_and_closed_ok(channel: grpc.Channel) -> None:
    call = _raw_stream(
        channel,
        "/inference.GRPCInferenceService/ModelStreamInfer",
        pb.ModelStreamInferResponse.FromString,
    )
    stream = call(iter([GARBAGE, GARBAGE]), timeout=60)  # type: ignore[operator]
    replies = list(stream)
    assert [r.error_message.split(":")[0] for r in replies] == ["Unable to parse request"] * 2
    assert stream.code() == grpc.StatusCode.OK


def test_v1_stream_answers_every_message(channel: grpc.Channel) -> None:
    request = v1.InferRequest(model_name="nope")
    call = _raw_stream(
        channel, "/nvidia.inferenceserver.GRPCService/StreamInfer", v1.InferResponse.FromString
    )
    messages = [request.SerializeToString(), GARBAGE, request.SerializeToString()]
    replies = list(call(iter(messages), timeout=60))  # type: ignore[operator]
    codes = [rs.RequestStatusCode.Name(r.request_status.code) for r in replies]
    assert codes == ["NOT_FOUND", "INVALID_ARG", "NOT_FOUND"]
    assert replies[1].request_status.msg == (
        "Unable to parse request: stream message 2 (50 bytes) is not a valid "
        "nvidia.inferenceserver.InferRequest"
    )


UNARY = [
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ModelConfig",
    "/inference.GRPCInferenceService/RepositoryModelLoad",
    "/inference.GRPCInferenceService/SystemSharedMemoryRegister",
    "/grpc.health.v1.Health/Check",
    "/nvidia.inferenceserver.GRPCService/Status",
    "/nvidia.inferenceserver.GRPCService/Infer",
]


@pytest.mark.parametrize("method", UNARY)
def test_unary_garbage_is_triton_s_internal_unable_to_parse(
    channel: grpc.Channel, method: str
) -> None:
    call = channel.unary_unary(method, request_serializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as info:
        call(GARBAGE, timeout=30)
    assert (info.value.code(), info.value.details()) == (
        grpc.StatusCode.INTERNAL,
        "Unable to parse request",
    )
    # the server still answers
    live = channel.unary_unary(
        "/inference.GRPCInferenceService/ServerLive",
        request_serializer=pb.ServerLiveRequest.SerializeToString,
        response_deserializer=pb.ServerLiveResponse.FromString,
    )
    assert live(pb.ServerLiveRequest(), timeout=30).live


def test_health_check_still_parses(channel: grpc.Channel) -> None:
    check = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb.HealthCheckResponse.FromString,
    )
    assert check(health_pb.HealthCheckRequest(), timeout=30).status == 1
