"""The gRPC server plumbing over a small in-test InferenceService (the real core is exercised by
tests/e2e/test_grpc_tritonclient.py): status mapping, streams, decoupled hooks, restricted
protocols, TLS, health, message-size limits, bound port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from repokit.core.service import InferenceService
from repokit.core.tracing.manager import TraceManager
from repokit.errors import RepokitError, invalid_arg, not_found, unsupported
from repokit.frontends.grpc import GrpcOptions, build_grpc_server
from repokit.frontends.grpc.options import parse_restricted_protocols
from repokit.frontends.grpc.restricted import METHOD_CATEGORY, method_restrictions
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from repokit.protocol.generated import health_pb2 as health_pb
from repokit.protocol.generated import health_pb2_grpc as health_grpc
from repokit.protocol.types import InferRequest, InferResponse, InferTensor
from tests.tls_helpers import make_self_signed_cert


class IdentityService(InferenceService):
    """Two models: ``echo`` returns INPUT0 as OUTPUT0; ``chatty`` is decoupled (3 responses)."""

    def __init__(self) -> None:
        self.ready = True
        self.seen: list[int | str] = []
        self.tracing = TraceManager()  # tracing off

    def server_live(self) -> bool:
        return True

    def server_ready(self) -> bool:
        return self.ready

    def _check(self, name: str) -> None:
        if name not in ("echo", "chatty", "broken"):
            raise not_found(f"Request for unknown model: '{name}' is not found")

    def is_decoupled(self, name: str, version: str = "") -> bool:
        self._check(name)
        return name == "chatty"

    def model_ready(self, name: str, version: str = "") -> bool:
        self._check(name)
        return True

    async def infer_encoded(
        self, codec: Any, model: str, version: str, raw: Any, trace: Any = None
    ) -> Any:
        """The core's standard path (no model process to hand the bytes to)."""
        if self.is_decoupled(model, version):
            raise unsupported(codec.decoupled_message)
        decoded = codec.decode(raw, model, version)
        return codec.encode(decoded, await self.infer(codec.request(decoded)))

    async def infer(self, request: InferRequest) -> InferResponse:
        if request.model_name == "broken":
            raise ZeroDivisionError("boom")
        if request.sequence_id:
            self.seen.append(request.sequence_id)
            await asyncio.sleep(0)
        data = request.inputs[0].data
        if data is None:
            raise invalid_arg("no data")
        if data.dtype == np.uint8:  # raw bytes from the frontend: view them as FP32
            data = data.view(np.float32)
        if data.size and float(np.asarray(data).ravel()[0]) < 0:
            raise invalid_arg(f"[request id: {request.id}] negative input")
        return InferResponse(
            model_name=request.model_name,
            model_version="1",
            id=request.id,
            outputs=[InferTensor("OUTPUT0", request.inputs[0].datatype, data.shape, data)],
        )

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        for _ in range(3):
            yield await self.infer(InferRequest(**{**request.__dict__, "model_name": "echo"}))


def _infer_request(model: str, values: list[float], **kw: Any) -> pb.ModelInferRequest:
    arr = np.asarray(values, dtype=np.float32)
    msg = pb.ModelInferRequest(model_name=model, raw_input_contents=[arr.tobytes()], **kw)
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[len(values)])
    return msg


async def _serve(options: GrpcOptions, service: InferenceService | None = None) -> Any:
    server = build_grpc_server(service or IdentityService(), options)
    await server.start()
    return server


@pytest.fixture(params=["native", "grpcio"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A server on each transport (the tests that build their own use the default one)."""
    s = await _serve(GrpcOptions(address="127.0.0.1", port=0, transport=request.param))
    yield s
    await s.stop(None)


async def test_port_zero_reports_bound_port_and_health(server: Any) -> None:
    assert server.port > 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert (await stub.ServerLive(pb.ServerLiveRequest())).live
        health = health_grpc.HealthStub(channel)
        reply = await health.Check(health_pb.HealthCheckRequest(service="anything"))
        assert reply.status == health_pb.HealthCheckResponse.SERVING


async def test_health_not_serving_when_not_ready() -> None:
    service = IdentityService()
    service.ready = False
    s = await _serve(GrpcOptions(address="127.0.0.1", port=0), service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            reply = await health_grpc.HealthStub(channel).Check(health_pb.HealthCheckRequest())
            assert reply.status == health_pb.HealthCheckResponse.NOT_SERVING
    finally:
        await s.stop(None)


async def test_status_codes_and_unexpected_errors(server: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ModelInfer(_infer_request("nope", [1.0]))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == "Request for unknown model: 'nope' is not found"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ModelInfer(_infer_request("chatty", [1.0]))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert info.value.details() == (
            "ModelInfer RPC doesn't support models with decoupled transaction policy"
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ModelInfer(_infer_request("broken", [1.0]))
        assert info.value.code() == grpc.StatusCode.INTERNAL
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ModelReady(pb.ModelReadyRequest(name="echo", version="x"))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="g"))
        # Triton 2.51's release build without a GPU: the CUDA IPC open fails
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == ("failed to register shared memory region: invalid args")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.RepositoryIndex(pb.RepositoryIndexRequest(repository_name="r"))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert (await stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest())) == (
            pb.CudaSharedMemoryStatusResponse()
        )


async def test_large_messages_pass_the_default_4mb_limit(server: Any) -> None:
    values = np.arange(3_000_000, dtype=np.float32)  # 12 MB each way
    options = [
        ("grpc.max_receive_message_length", 2**31 - 1),
        ("grpc.max_send_message_length", 2**31 - 1),
    ]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=options) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        msg = pb.ModelInferRequest(model_name="echo", raw_input_contents=[values.tobytes()])
        msg.inputs.add(name="INPUT0", datatype="FP32", shape=[values.size])
        reply = await stub.ModelInfer(msg)
        assert reply.raw_output_contents[0] == values.tobytes()


async def test_stream_errors_in_band_and_stream_stays_open(server: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        requests = [
            _infer_request("echo", [1.0], id="good-1"),
            _infer_request("nope", [1.0], id="bad-1"),
            _infer_request("echo", [-1.0], id="bad-2"),
            _infer_request("broken", [1.0], id="bad-3"),
            _infer_request("echo", [2.0], id="good-2"),
        ]
        replies = [r async for r in stub.ModelStreamInfer(iter(requests))]
        by_id = {r.infer_response.id: r for r in replies}
        assert set(by_id) == {"good-1", "bad-1", "bad-2", "bad-3", "good-2"}
        for good in ("good-1", "good-2"):
            assert by_id[good].error_message == ""
            assert by_id[good].infer_response.parameters["triton_final_response"].bool_param
        assert by_id["bad-1"].error_message == "Request for unknown model: 'nope' is not found"
        assert by_id["bad-1"].infer_response.model_name == ""  # as Triton 2.51
        assert by_id["bad-2"].error_message == "[request id: bad-2] negative input"
        assert by_id["bad-3"].error_message.startswith("internal error")


async def test_stream_keeps_sequence_order(server: Any) -> None:
    service = IdentityService()
    s = await _serve(GrpcOptions(address="127.0.0.1", port=0), service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            requests = []
            for i in range(20):
                msg = _infer_request("echo", [float(i)], id=str(i))
                msg.parameters["sequence_id"].string_param = f"seq-{i}"
                requests.append(msg)
            replies = [r async for r in stub.ModelStreamInfer(iter(requests))]
            assert len(replies) == 20
            assert service.seen == [f"seq-{i}" for i in range(20)]
    finally:
        await s.stop(None)


class QueueingService(IdentityService):
    """Answers nothing until ``wanted`` requests reached it (as a sequence batcher held by
    TRITONSERVER_DELAY_SCHEDULER): their ids in the order they came."""

    def __init__(self, wanted: int) -> None:
        super().__init__()
        self.arrived: list[str] = []
        self.wanted = wanted
        self.all_there = asyncio.Event()

    async def infer(self, request: InferRequest) -> InferResponse:
        self.arrived.append(request.id)
        if len(self.arrived) >= self.wanted:
            self.all_there.set()
        await self.all_there.wait()
        return await super().infer(request)


async def test_stream_hands_a_sequences_requests_over_without_waiting_for_answers() -> None:
    """Requests of one sequence reach the core in arrival order, each once the one before it
    went (not once it was answered), as Triton's stream handler queues them: a batcher that
    waits for several requests of the sequence gets them."""
    service = QueueingService(wanted=4)
    s = await _serve(GrpcOptions(address="127.0.0.1", port=0), service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            requests = []
            for i in range(4):
                msg = _infer_request("echo", [float(i)], id=str(i))
                msg.parameters["sequence_id"].int64_param = 7
                requests.append(msg)

            async def replies() -> list[pb.ModelStreamInferResponse]:
                return [r async for r in stub.ModelStreamInfer(iter(requests))]

            answered = await asyncio.wait_for(replies(), 60)  # a guard: chained, it never ends
            assert sorted(r.infer_response.id for r in answered) == ["0", "1", "2", "3"]
            assert all(not r.error_message for r in answered)
            assert service.arrived == ["0", "1", "2", "3"]
    finally:
        await s.stop(None)


class SlowFirstService(IdentityService):
    """Request ``slow`` is answered only after request ``fast`` was (by the core)."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[str] = []
        self.fast_done = asyncio.Event()

    async def infer(self, request: InferRequest) -> InferResponse:
        if request.id == "slow":
            await self.fast_done.wait()
        response = await super().infer(request)
        self.answered.append(request.id)
        if request.id == "fast":
            self.fast_done.set()
        return response


async def test_stream_writes_responses_in_request_order(server: Any) -> None:
    """As Triton 2.51's stream handler: a non-decoupled request's response waits for those
    of the requests before it on the stream, even when the core answered it first."""
    service = SlowFirstService()
    s = await _serve(GrpcOptions(address="127.0.0.1", port=0), service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            requests = [
                _infer_request("echo", [1.0], id="slow"),
                _infer_request("nope", [1.0], id="unknown"),  # an error keeps its place too
                _infer_request("echo", [2.0], id="fast"),
            ]
            replies = [r async for r in stub.ModelStreamInfer(iter(requests))]
            assert service.answered == ["fast", "slow"]
            assert [r.infer_response.id for r in replies] == ["slow", "unknown", "fast"]
            assert replies[1].error_message.startswith("Request for unknown model")
    finally:
        await s.stop(None)


async def test_decoupled_stream_and_empty_final_response(server: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        plain = _infer_request("chatty", [1.0], id="a")
        flagged = _infer_request("chatty", [1.0], id="b")
        flagged.parameters["triton_enable_empty_final_response"].bool_param = True
        replies = [r async for r in stub.ModelStreamInfer(iter([plain]))]
        finals = [r.infer_response.parameters["triton_final_response"].bool_param for r in replies]
        assert finals == [False, False, False]
        replies = [r async for r in stub.ModelStreamInfer(iter([flagged]))]
        finals = [r.infer_response.parameters["triton_final_response"].bool_param for r in replies]
        assert finals == [False, False, False, True]
        last = replies[-1].infer_response
        assert (last.id, last.model_name, len(last.outputs)) == ("b", "chatty", 0)


async def test_restricted_protocols() -> None:
    restricted = parse_restricted_protocols(["inference,health:Infer-Key=secret"])
    assert restricted["inference"] == ("triton-grpc-protocol-infer-key", "secret")
    s = await _serve(GrpcOptions(address="127.0.0.1", port=0, restricted=restricted))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            expected = (
                "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
            )
            for call in (
                stub.ModelInfer(_infer_request("echo", [1.0])),
                stub.ServerLive(pb.ServerLiveRequest()),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
                assert info.value.details() == expected
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for _ in stub.ModelStreamInfer(iter([_infer_request("echo", [1.0])])):
                    pass
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            good = (("triton-grpc-protocol-infer-key", "secret"),)
            reply = await stub.ModelInfer(_infer_request("echo", [1.0]), metadata=good)
            assert reply.model_name == "echo"
            assert (await stub.ModelReady(pb.ModelReadyRequest(name="echo"), metadata=good)).ready
            # categories that are not restricted answer without the header
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelConfig(pb.ModelConfigRequest(name="echo", version="-3"))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await s.stop(None)


def test_every_rpc_has_a_restricted_category() -> None:
    """A method of no category would be open whatever is restricted: each RPC of the v2
    service and the health service is named, with the category Triton gives it."""
    for descriptor in (pb.DESCRIPTOR, health_pb.DESCRIPTOR):
        for service in descriptor.services_by_name.values():
            for method in service.methods:
                assert f"/{service.full_name}/{method.name}" in METHOD_CATEGORY, method.name
    assert METHOD_CATEGORY["/grpc.health.v1.Health/Check"] == "health"
    assert METHOD_CATEGORY["/inference.GRPCInferenceService/ModelStreamInfer"] == "inference"


def test_method_restrictions_hold_only_restricted_methods() -> None:
    found = method_restrictions(parse_restricted_protocols(["logging,trace:k=v"]))
    assert found == {
        "/inference.GRPCInferenceService/LogSettings": ("logging",),
        "/inference.GRPCInferenceService/TraceSetting": ("trace",),
    }
    assert method_restrictions({}) == {}
    v1_status = method_restrictions(parse_restricted_protocols(["health:a=b", "statistics:c=d"]))
    assert v1_status["/nvidia.inferenceserver.GRPCService/Status"] == ("health", "statistics")


def test_bad_restricted_spec_is_rejected() -> None:
    with pytest.raises(ValueError, match="grpc-restricted-protocol"):
        parse_restricted_protocols(["inference"])
    with pytest.raises(ValueError, match="unknown restricted protocol 'bogus'"):
        parse_restricted_protocols(["bogus:k=v"])


def test_bad_compression_level_is_rejected() -> None:
    with pytest.raises(ValueError, match="compression-level 'max'"):
        GrpcOptions(infer_response_compression_level="max").channel_options()


async def test_port_in_use_is_reported(server: Any) -> None:
    with pytest.raises(RepokitError, match="already in use"):
        build_grpc_server(IdentityService(), GrpcOptions(address="127.0.0.1", port=server.port))


@pytest.mark.parametrize("transport", ["native", "grpcio"])
async def test_tls(tmp_path: Path, transport: str) -> None:
    key, cert = make_self_signed_cert(tmp_path)
    options = GrpcOptions(
        address="127.0.0.1",
        port=0,
        use_ssl=True,
        server_key=str(key),
        server_cert=str(cert),
        transport=transport,
    )
    s = await _serve(options)
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{s.port}", creds) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(pb.ServerLiveRequest())).live
    finally:
        await s.stop(None)
    with pytest.raises(ValueError, match="needs --grpc-server-key"):
        build_grpc_server(IdentityService(), GrpcOptions(port=0, use_ssl=True, transport=transport))
