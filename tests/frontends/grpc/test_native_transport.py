"""The native gRPC transport (repokit.frontends.grpc.h2) on its own error paths, with real
grpcio clients and, for input no gRPC client sends, raw sockets: bad preface, malformed
frames, CONTINUATION, PING, unknown methods, message size limits, compression, client cancel,
deadlines, flow control with 16 MiB messages both ways, GOAWAY and the drain of running calls.
The servicers' behaviour over this transport is the rest of tests/frontends/grpc and the e2e
tests (the native transport is what they serve through by default)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import hpack
import numpy as np
import pytest

from repokit.frontends.grpc import GrpcOptions, build_grpc_server
from repokit.frontends.grpc.h2 import frames as f
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from repokit.protocol.types import InferRequest, InferResponse
from tests.frontends.grpc.test_server import IdentityService, _infer_request
from tests.tls_helpers import make_self_signed_cert

BIG = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"
INFER = "/inference.GRPCInferenceService/ModelInfer"


class SlowService(IdentityService):
    """``slow`` waits until released; whether its request was cancelled is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    def _check(self, name: str) -> None:
        if name != "slow":
            super()._check(name)

    async def infer(self, request: InferRequest) -> InferResponse:
        if request.model_name == "slow":
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            request.model_name = "echo"
        return await super().infer(request)


async def _serve(service: Any = None, **options: Any) -> Any:
    server = build_grpc_server(
        service or IdentityService(),
        GrpcOptions(address="127.0.0.1", port=0, transport="native", **options),
    )
    await server.start()
    return server


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    s = await _serve()
    yield s
    await s.stop(None)


# --- raw HTTP/2 ------------------------------------------------------------------------------
class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    @classmethod
    async def connect(cls, port: int, preface: bool = True) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        if preface:
            writer.write(f.PREFACE + f.settings_frame({}))
        return client

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def frame(self) -> tuple[int, int, int, bytes] | None:
        """The next frame (type, flags, stream, payload); None at the end of the connection."""
        try:
            head = await asyncio.wait_for(self.reader.readexactly(9), 10)
            length = int.from_bytes(head[:3], "big")
            payload = await self.reader.readexactly(length)
        except asyncio.IncompleteReadError:
            return None
        stream = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
        return head[3], head[4], stream, payload

    async def until(self, kind: int) -> tuple[int, int, int, bytes]:
        while True:
            frame = await self.frame()
            assert frame is not None, f"connection ended before a frame of type {kind}"
            if frame[0] == kind:
                return frame

    async def until_any(self, kinds: tuple[int, ...]) -> tuple[int, int, int, bytes]:
        while True:
            frame = await self.frame()
            assert frame is not None, f"connection ended before a frame of types {kinds}"
            if frame[0] in kinds:
                return frame

    def request_block(self, path: str, **extra: str) -> bytes:
        fields = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *extra.items(),
        ]
        block: bytes = self.encoder.encode(fields)
        return block

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def _goaway_code(client: RawClient) -> int:
    frame = await client.until(f.GOAWAY)
    code: int = struct.unpack(">II", frame[3][:8])[1]
    return code


async def test_bad_preface_gets_goaway_protocol_error(server: Any) -> None:
    client = await RawClient.connect(server.port, preface=False)
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await _goaway_code(client) == f.PROTOCOL_ERROR
    await client.close()


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (f.frame(f.PING, 0, 0, b"1234"), f.FRAME_SIZE_ERROR),  # PING of 4 bytes
        (f.frame(f.PING, 0, 1, b"12345678"), f.PROTOCOL_ERROR),  # PING on a stream
        (f.frame(f.WINDOW_UPDATE, 0, 0, b"\0\0\0\0"), f.PROTOCOL_ERROR),  # increment 0
        (f.frame(f.SETTINGS, 0, 0, b"\0\5\0\0\0\1"), f.PROTOCOL_ERROR),  # MAX_FRAME_SIZE 1
        (f.frame(f.SETTINGS, 0, 0, b"\0\4\xff\xff\xff\xff"), f.FLOW_CONTROL_ERROR),
        (f.frame(f.SETTINGS, 0, 0, b"\0\4\0"), f.FRAME_SIZE_ERROR),  # not 6-byte entries
        (f.frame(f.DATA, 0, 7, b"x"), f.PROTOCOL_ERROR),  # DATA on an idle stream
        (f.frame(f.DATA, 0, 0, b"x"), f.PROTOCOL_ERROR),  # DATA on stream 0
        (f.frame(f.HEADERS, 0x4, 2, b"\x82"), f.PROTOCOL_ERROR),  # even stream id
        (f.frame(f.HEADERS, 0x4, 1, b"\xff\xff\xff\xff\x0f"), f.COMPRESSION_ERROR),  # HPACK
        (f.frame(f.HEADERS, 0, 1, b"\x82") + f.frame(f.PING, 0, 0, b"8bytes!!"), f.PROTOCOL_ERROR),
        (f.frame(f.CONTINUATION, 0x4, 1, b"\x82"), f.PROTOCOL_ERROR),
        (f.frame(f.RST_STREAM, 0, 9, b"\0\0\0\x08"), f.PROTOCOL_ERROR),  # idle stream
        (f.frame(f.PUSH_PROMISE, 0x4, 1, b"\0\0\0\2\x82"), f.PROTOCOL_ERROR),
        (f.frame_head(f.DATA, 0, 1, 2 << 20), f.FRAME_SIZE_ERROR),  # above our MAX_FRAME_SIZE
    ],
)
async def test_malformed_frames_end_the_connection(server: Any, frames: bytes, code: int) -> None:
    client = await RawClient.connect(server.port)
    client.send(frames)
    assert await _goaway_code(client) == code
    await client.close()
    # the server goes on serving others
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        assert (
            await pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest())
        ).live


async def test_first_frame_must_be_settings(server: Any) -> None:
    client = await RawClient.connect(server.port, preface=False)
    client.send(f.PREFACE + f.frame(f.PING, 0, 0, b"12345678"))
    assert await _goaway_code(client) == f.PROTOCOL_ERROR
    await client.close()


async def test_settings_ack_ping_ack_and_continuation(server: Any) -> None:
    client = await RawClient.connect(server.port)
    settings = await client.until(f.SETTINGS)
    assert not settings[1] & f.ACK
    client.send(f.SETTINGS_ACK + f.frame(f.PING, 0, 0, b"pingpong"))
    ack = await client.until(f.PING)
    assert ack[1] & f.ACK and ack[3] == b"pingpong"
    # a request head in HEADERS + two CONTINUATION frames, then an empty message
    block = client.request_block(SERVER_LIVE, **{"x-padding": "p" * 3000})
    third = len(block) // 3
    client.send(
        f.frame(f.HEADERS, 0, 1, block[:third])
        + f.frame(f.CONTINUATION, 0, 1, block[third : 2 * third])
        + f.frame(f.CONTINUATION, f.END_HEADERS, 1, block[2 * third :])
        + f.frame(f.DATA, f.END_STREAM, 1, b"\0\0\0\0\0")
    )
    head = await client.until(f.HEADERS)
    assert dict(client.decoder.decode(head[3]))[":status"] == "200"
    data = await client.until(f.DATA)
    assert pb.ServerLiveResponse.FromString(data[3][5:]).live
    end = await client.until(f.HEADERS)
    assert end[1] & f.END_STREAM
    assert dict(client.decoder.decode(end[3]))["grpc-status"] == "0"
    await client.close()


async def test_non_grpc_request_and_missing_message_are_answered(server: Any) -> None:
    client = await RawClient.connect(server.port)
    block = client.request_block(SERVER_LIVE)
    client.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, block))  # no message
    end = await client.until(f.HEADERS)
    fields = dict(client.decoder.decode(end[3]))
    assert (fields["grpc-status"], fields["grpc-message"]) == ("13", "Missing request message")
    # a message cut short by END_STREAM
    block = client.request_block(SERVER_LIVE)
    client.send(f.frame(f.HEADERS, f.END_HEADERS, 3, block))
    client.send(f.frame(f.DATA, f.END_STREAM, 3, b"\0\0\0\0\x09abc"))
    end = await client.until(f.HEADERS)
    fields = dict(client.decoder.decode(end[3]))
    assert (fields["grpc-status"], fields["grpc-message"]) == ("13", "Incomplete request message")
    await client.close()


# --- grpcio clients ----------------------------------------------------------------------------
async def test_unknown_method_is_unimplemented(server: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        for path in ("/inference.GRPCInferenceService/Nope", "/no.Service/Method"):
            call = channel.unary_unary(path)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(b"")
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert info.value.details() == "Method not found!"


async def test_empty_stream_ends_ok(server: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([]))
        assert [r async for r in call] == []
        assert await call.code() == grpc.StatusCode.OK


async def test_message_size_limits() -> None:
    s = await _serve(max_receive_message_length=4096, max_send_message_length=2048)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}", options=BIG) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(_infer_request("echo", [1.0] * 2000))  # 8 KB in
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "Received message larger than max" in str(info.value.details())
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(_infer_request("echo", [1.0] * 900))  # 3.6 KB out
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "Sent message larger than max" in str(info.value.details())
            reply = await stub.ModelInfer(_infer_request("echo", [1.0] * 10))
            assert reply.model_name == "echo"
    finally:
        await s.stop(None)


@pytest.mark.parametrize("level", ["none", "low", "high"])
@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
async def test_compressed_requests_and_responses(level: str, compression: Any) -> None:
    s = await _serve(infer_response_compression_level=level)
    try:
        target = f"127.0.0.1:{s.port}"
        async with grpc.aio.insecure_channel(target, compression=compression) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            values = [float(i % 7) for i in range(5000)]
            reply = await stub.ModelInfer(_infer_request("echo", values))
            assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == values
    finally:
        await s.stop(None)


async def test_large_responses_are_compressed_and_limited_whole() -> None:
    """A response with more than 64 KiB of outputs is sent as parts (the outputs' own memory):
    compressed, it is joined first; over the send limit, the whole message's size is named."""
    values = [float(i % 7) for i in range(50_000)]  # 200 KB of outputs
    s = await _serve(infer_response_compression_level="high", max_send_message_length=150_000)
    try:
        target = f"127.0.0.1:{s.port}"
        options = [("grpc.max_receive_message_length", -1)]
        async with grpc.aio.insecure_channel(
            target, compression=grpc.Compression.Gzip, options=options
        ) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(_infer_request("echo", values))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            details = str(info.value.details())
            assert details.startswith("Sent message larger than max (2000"), details
            assert details.endswith(" vs. 150000)"), details
            fits = values[:30_000]  # 120 KB
            reply = await stub.ModelInfer(_infer_request("echo", fits))
            assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == fits
    finally:
        await s.stop(None)


async def test_only_inference_responses_are_compressed() -> None:
    """As Triton: the response compression level is set on ModelInfer and ModelStreamInfer;
    ServerLive (like statistics and metadata) answers uncompressed."""
    s = await _serve(infer_response_compression_level="high")
    client = await RawClient.connect(s.port)
    try:
        accept = {"grpc-accept-encoding": "identity,deflate,gzip"}
        calls = [
            (1, SERVER_LIVE, b""),
            (3, INFER, _infer_request("echo", [1.0] * 64).SerializeToString()),
        ]
        for stream, path, body in calls:
            client.send(
                f.frame(f.HEADERS, f.END_HEADERS, stream, client.request_block(path, **accept))
            )
            client.send(
                f.frame(f.DATA, f.END_STREAM, stream, b"\0" + len(body).to_bytes(4, "big") + body)
            )
        heads: dict[int, dict[str, str]] = {}
        flags: dict[int, int] = {}
        while len(flags) < 2:
            kind, _, stream, payload = await client.until_any((f.HEADERS, f.DATA))
            if kind == f.HEADERS and stream not in heads:
                heads[stream] = {k: v for k, v in client.decoder.decode(payload)}
            elif kind == f.DATA and payload and stream not in flags:
                flags[stream] = payload[0]
        assert heads[1].get("grpc-encoding", "identity") == "identity" and flags[1] == 0
        assert heads[3]["grpc-encoding"] in ("gzip", "deflate") and flags[3] == 1
    finally:
        await client.close()
        await s.stop(None)


async def test_details_are_percent_encoded(server: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ModelInfer(_infer_request("n\u00f6 100%\nmodel", [1.0]))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == (
            "Request for unknown model: 'n\u00f6 100%\nmodel' is not found"
        )


async def test_16mb_tensors_both_ways_under_flow_control(server: Any) -> None:
    values = np.arange(4 << 20, dtype=np.float32)  # 16 MiB
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=BIG) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        msg = pb.ModelInferRequest(model_name="echo", raw_input_contents=[values.tobytes()])
        msg.inputs.add(name="INPUT0", datatype="FP32", shape=[values.size])
        replies = await asyncio.gather(stub.ModelInfer(msg), stub.ModelInfer(msg))
        for reply in replies:
            assert reply.raw_output_contents[0] == values.tobytes()
        streamed = [r async for r in stub.ModelStreamInfer(iter([msg, msg]))]
        assert [r.infer_response.raw_output_contents[0] == values.tobytes() for r in streamed] == [
            True,
            True,
        ]


@pytest.mark.parametrize("frame_size", [16 * 1024, 200 * 1024], ids=["16KiB", "200KiB"])
async def test_large_message_in_small_and_large_frames(server: Any, frame_size: int) -> None:
    """A 1 MiB request cut into the client's DATA frames arrives whole: 16 KiB frames (nghttp2's
    size) are read many at a time into the connection's buffer, larger ones head apart and
    payload straight into the message (connection.DIRECT_FRAME_MIN)."""
    values = np.random.default_rng(0).random(1 << 18, dtype=np.float32)  # 1 MiB
    msg = pb.ModelInferRequest(model_name="echo", raw_input_contents=[values.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[values.size])
    raw = msg.SerializeToString()
    framed = b"\0" + len(raw).to_bytes(4, "big") + raw
    client = await RawClient.connect(server.port)
    # windows for the 1 MiB answer (this client gives no credit back)
    client.send(f.settings_frame({f.MAX_FRAME_SIZE: 1 << 20, f.INITIAL_WINDOW_SIZE: 1 << 24}))
    client.send(f.window_update(0, 1 << 24))
    await client.until(f.SETTINGS)
    client.send(f.frame(f.HEADERS, f.END_HEADERS, 1, client.request_block(INFER)))
    for pos in range(0, len(framed), frame_size):
        chunk = framed[pos : pos + frame_size]
        last = pos + frame_size >= len(framed)
        client.send(f.frame(f.DATA, f.END_STREAM if last else 0, 1, chunk))
    received = bytearray()
    while True:
        frame = await client.until_any((f.DATA, f.HEADERS))
        if frame[0] == f.DATA:
            received += frame[3]
        elif frame[1] & f.END_STREAM:
            assert dict(client.decoder.decode(frame[3]))["grpc-status"] == "0"
            break
    reply = pb.ModelInferResponse.FromString(bytes(received[5:]))
    assert reply.raw_output_contents[0] == values.tobytes()
    await client.close()


async def test_client_cancel_cancels_the_call() -> None:
    service = SlowService()
    s = await _serve(service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            call = stub.ModelInfer(_infer_request("slow", [1.0]))
            await service.started.wait()
            call.cancel()
            await asyncio.wait_for(service.cancelled.wait(), 10)
            # a stream cancelled while its request runs
            service.started.clear()
            service.cancelled.clear()
            stream = stub.ModelStreamInfer(iter([_infer_request("slow", [1.0])]))
            await service.started.wait()
            stream.cancel()
            await asyncio.wait_for(service.cancelled.wait(), 10)
            assert (await stub.ServerLive(pb.ServerLiveRequest())).live
    finally:
        await s.stop(None)


async def test_deadline_exceeded_cancels_the_call() -> None:
    service = SlowService()
    s = await _serve(service)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(_infer_request("slow", [1.0]), timeout=0.3)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            await asyncio.wait_for(service.cancelled.wait(), 10)
    finally:
        await s.stop(None)


async def test_graceful_stop_drains_running_calls() -> None:
    service = SlowService()
    s = await _serve(service)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        running = asyncio.ensure_future(stub.ModelInfer(_infer_request("slow", [3.0])))
        await service.started.wait()
        stopping = asyncio.ensure_future(s.stop(30))
        await asyncio.sleep(0)
        service.release.set()  # the call finishes within the grace
        reply = await running
        assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [3.0]
        await stopping
        assert not service.cancelled.is_set()
        with pytest.raises(grpc.aio.AioRpcError) as info:  # the port is closed now
            await stub.ServerLive(pb.ServerLiveRequest(), timeout=5)
        assert info.value.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )


async def test_grace_expiry_cancels_running_calls() -> None:
    service = SlowService()
    s = await _serve(service)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        running = asyncio.ensure_future(stub.ModelInfer(_infer_request("slow", [3.0])))
        await service.started.wait()
        await s.stop(0.2)
        await asyncio.wait_for(service.cancelled.wait(), 10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await running
        assert info.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)


async def test_goaway_reaches_raw_client(server: Any) -> None:
    client = await RawClient.connect(server.port)
    await client.until(f.SETTINGS)
    await server.stop(1)
    assert await _goaway_code(client) == f.NO_ERROR
    await client.close()


async def test_max_connection_age_sends_goaway_and_clients_reconnect() -> None:
    s = await _serve(max_connection_age_ms=300)
    try:
        client = await RawClient.connect(s.port)
        assert await _goaway_code(client) == f.NO_ERROR  # the connection aged
        await client.close()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for _ in range(3):
                assert (await stub.ServerLive(pb.ServerLiveRequest())).live
                await asyncio.sleep(0.2)  # spans the connection's age: the client reconnects
    finally:
        await s.stop(None)


async def test_invocation_metadata_reaches_the_servicer() -> None:
    service = IdentityService()
    seen: list[Any] = []

    async def handler(request: bytes, context: Any) -> bytes:
        seen.append(dict(context.invocation_metadata()))
        seen.append(context.time_remaining())
        return b""

    s = await _serve(service)
    try:
        s.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "test.Meta", {"Echo": grpc.unary_unary_rpc_method_handler(handler)}
                ),
            )
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{s.port}") as channel:
            call = channel.unary_unary("/test.Meta/Echo")
            metadata = (("x-plain", "v1"), ("x-data-bin", b"\x00\xff\x10"))
            assert await call(b"", metadata=metadata, timeout=30) == b""
        fields, remaining = seen
        assert fields["x-plain"] == "v1" and fields["x-data-bin"] == b"\x00\xff\x10"
        assert 0 < remaining <= 30
    finally:
        await s.stop(None)


async def test_mutual_tls(tmp_path: Path) -> None:
    key, cert = make_self_signed_cert(tmp_path)
    s = await _serve(
        use_ssl_mutual=True, server_key=str(key), server_cert=str(cert), root_cert=str(cert)
    )
    try:
        root = cert.read_bytes()
        trusted = grpc.ssl_channel_credentials(
            root_certificates=root, private_key=key.read_bytes(), certificate_chain=root
        )
        async with grpc.aio.secure_channel(f"localhost:{s.port}", trusted) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(pb.ServerLiveRequest())).live
        anonymous = grpc.ssl_channel_credentials(root_certificates=root)
        async with grpc.aio.secure_channel(f"localhost:{s.port}", anonymous) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await s.stop(None)


def test_unknown_transport_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown gRPC transport 'h3'"):
        build_grpc_server(IdentityService(), GrpcOptions(port=0, transport="h3"))
