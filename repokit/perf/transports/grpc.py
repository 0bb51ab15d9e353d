"""KServe v2 over gRPC, unary or bidirectional streaming, with repokit's generated types.

:meth:`GrpcTransport.prepare` builds and serializes a ``ModelInferRequest`` once (raw input
contents via repokit's tensor codec); sequence requests copy it, set the ``sequence_id`` /
``sequence_start`` / ``sequence_end`` parameters and serialize it.

Sync mode (worker threads, the default) runs on :mod:`repokit.perf.transports.grpc_wire`, our
own blocking HTTP/2 client, one connection per worker: the grpc library costs 100-200 us of
client CPU per call from Python, which made the client the bottleneck against Triton (0.25x
h2load's requests/s at concurrency 1; see benchmarks/perf_vs_wrk.py). :meth:`GrpcTransport.open`
probes it with one ServerLive call; if the server defeats it (e.g. it does not speak HTTP/2 the
way gRPC servers do), sync mode falls back to synchronous grpc channels (streaming then to
asyncio) and ``wire_problem`` says why.
Async and rate modes, and the control calls (metadata, config, statistics, shared memory), use
grpc.aio with the infer stubs registered without serializers (pre-serialized bytes in, parsed
with ``FromString``); workers share up to :data:`CHANNELS` channels (distinct channel arguments
so gRPC does not share one subchannel), opened on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import numpy.typing as npt
from google.protobuf import json_format

from repokit.perf.errors import PerfError
from repokit.perf.transports.base import InferTiming, SequenceFlags, ShmBinding, TransportOptions
from repokit.perf.transports.grpc_wire import WireConnection, WireError, header_block
from repokit.perf.transports.http import split_url
from repokit.perf.transports.tls import grpc_credentials_bytes, grpc_wire_context
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.tensor_codec import array_from_bytes, array_to_bytes

SERVICE = "/inference.GRPCInferenceService/"
CHANNELS = 4
CONNECT_TIMEOUT_S = 10.0  # how long the first channel may take to become ready
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


@dataclass
class PreparedGrpc:
    message: pb.ModelInferRequest
    serialized: bytes
    outputs: list[tuple[str, str]]
    # a decoupled model's request: asks for an empty final response, and its stream is read
    # up to the response flagged final (see StreamReplies)
    decoupled: bool = False


FINAL_PARAMETER = "triton_final_response"


class StreamReplies:
    """The responses of one request on a ModelStreamInfer stream, read up to its final one as
    perf_analyzer does for a decoupled model: the request asks for an empty final response
    (``triton_enable_empty_final_response``), every response with outputs counts, the first
    one's arrival is the time to first response, the last one's ends the request and carries
    the outputs that validation data is checked against. A model that is not decoupled
    answers once."""

    def __init__(self, decoupled: bool) -> None:
        self.decoupled = decoupled
        self.first = 0
        self.last = 0
        self.count = 0
        self.total = 0  # every response, the empty final one too (perf_analyzer's count)
        self.times: list[int] = []  # arrival of each response with outputs (decoupled)
        self.reply: pb.ModelInferResponse | None = None

    def add(self, raw: bytes, now: int) -> tuple[bool, str | None]:
        """Take one stream message: (whether the request is answered, its error)."""
        stream_reply = pb.ModelStreamInferResponse.FromString(raw)
        if stream_reply.error_message:
            return True, stream_reply.error_message
        response = stream_reply.infer_response
        self.total += 1
        if not self.decoupled:
            self.first = self.last = now
            self.count = 1
            self.reply = response
            return True, None
        if not self.first:
            self.first = now
        if len(response.outputs):
            self.count += 1
            self.last = now
            self.times.append(now)
            self.reply = response  # outputs are validated on the last one (as generate_stream)
        parameters = response.parameters
        return FINAL_PARAMETER in parameters and parameters[FINAL_PARAMETER].bool_param, None

    def timing(self, start: int, sent: int, now: int, end: int, want_outputs: bool) -> InferTiming:
        received = self.last or now
        outputs = None
        if want_outputs:
            outputs = decode_grpc_outputs(self.reply) if self.reply is not None else {}
        first = self.first if self.decoupled else 0
        times = tuple(self.times) if self.decoupled else ()
        return InferTiming(start, sent, received, end, None, outputs, first, self.count, times)


def _to_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def decode_grpc_outputs(response: pb.ModelInferResponse) -> dict[str, npt.NDArray[Any]]:
    out: dict[str, npt.NDArray[Any]] = {}
    for i, entry in enumerate(response.outputs):
        if i < len(response.raw_output_contents):
            out[entry.name] = array_from_bytes(
                entry.datatype,
                list(entry.shape),
                response.raw_output_contents[i],
                input_name=entry.name,
                model_name=response.model_name,
            )
    return out


def _sequence_bytes(request: PreparedGrpc, sequence: SequenceFlags) -> bytes:
    message = pb.ModelInferRequest()
    message.CopyFrom(request.message)
    message.parameters["sequence_id"].int64_param = sequence.sequence_id
    message.parameters["sequence_start"].bool_param = sequence.start
    message.parameters["sequence_end"].bool_param = sequence.end
    return message.SerializeToString()


def _rpc_error(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"gRPC {code.name if code is not None else 'error'}: {details}"


class GrpcConnection:
    def __init__(self, owner: GrpcTransport, channel: grpc.aio.Channel, streaming: bool) -> None:
        self._clock = owner.clock
        self._metadata = owner.metadata
        self._unary = channel.unary_unary(SERVICE + "ModelInfer")
        self._stream_factory = channel.stream_stream(SERVICE + "ModelStreamInfer")
        self._streaming = streaming
        self._stream: Any = None

    async def infer(
        self,
        request: PreparedGrpc,
        sequence: SequenceFlags | None = None,
        want_outputs: bool = False,
        on_response: Callable[[int, bool], None] | None = None,
    ) -> InferTiming:
        """One request; on a stream, ``on_response(responses so far, final)`` is called as
        each response arrives (the periodic concurrency mode counts them)."""
        clock = self._clock
        start = clock()
        payload = request.serialized if sequence is None else _sequence_bytes(request, sequence)
        try:
            if self._streaming:
                if self._stream is None:
                    self._stream = self._stream_factory(metadata=self._metadata)
                await self._stream.write(payload)
                sent = clock()
                replies = StreamReplies(request.decoupled)
                while True:
                    raw = await self._stream.read()
                    received = clock()
                    if raw is grpc.aio.EOF:
                        return InferTiming(start, sent, received, clock(), "gRPC stream closed")
                    done, error = replies.add(raw, received)
                    if error is not None:
                        return InferTiming(start, sent, received, clock(), error)
                    if on_response is not None:
                        on_response(replies.total, done)
                    if done:
                        return replies.timing(start, sent, received, clock(), want_outputs)
            else:
                call = self._unary(payload, metadata=self._metadata)
                sent = clock()
                raw = await call
                received = clock()
                reply = pb.ModelInferResponse.FromString(raw)
        except grpc.RpcError as exc:
            now = clock()
            return InferTiming(start, now, now, now, _rpc_error(exc))
        outputs = decode_grpc_outputs(reply) if want_outputs else None
        return InferTiming(start, sent, received, clock(), None, outputs)

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.done_writing()
            self._stream = None


class BlockingGrpcConnection:
    """A worker thread's unary calls on a synchronous grpc channel: the fallback when the
    server defeats :mod:`repokit.perf.transports.grpc_wire` (see ``wire_problem``)."""

    def __init__(self, owner: GrpcTransport, channel: grpc.Channel) -> None:
        self._clock = owner.clock
        self._metadata = owner.metadata
        self._unary = channel.unary_unary(SERVICE + "ModelInfer")

    def infer(
        self,
        request: PreparedGrpc,
        sequence: SequenceFlags | None = None,
        want_outputs: bool = False,
    ) -> InferTiming:
        clock = self._clock
        start = clock()
        payload = request.serialized if sequence is None else _sequence_bytes(request, sequence)
        try:
            raw = self._unary(payload, metadata=self._metadata)
        except grpc.RpcError as exc:
            now = clock()
            return InferTiming(start, now, now, now, _rpc_error(exc))
        received = clock()
        reply = pb.ModelInferResponse.FromString(raw)
        outputs = decode_grpc_outputs(reply) if want_outputs else None
        # a synchronous call gives no "request written" moment: send time is not separable
        return InferTiming(start, start, received, clock(), None, outputs)

    def close(self) -> None:
        pass


class WireGrpcConnection:
    """A worker thread's calls on its own HTTP/2 connection (:mod:`grpc_wire`): unary, or
    one bidirectional ModelStreamInfer stream carrying every request with --streaming."""

    def __init__(self, owner: GrpcTransport, wire: WireConnection) -> None:
        self._clock = owner.clock
        self._wire = wire
        self._streaming = owner.options.streaming
        self._unary_block = owner.header_block("ModelInfer")
        self._stream_block = owner.header_block("ModelStreamInfer")
        self._stream_open = False

    def infer(
        self,
        request: PreparedGrpc,
        sequence: SequenceFlags | None = None,
        want_outputs: bool = False,
    ) -> InferTiming:
        clock = self._clock
        start = clock()
        payload = request.serialized if sequence is None else _sequence_bytes(request, sequence)
        wire = self._wire
        if not self._streaming and not want_outputs:  # the measured path: nothing to decode
            try:
                sent, raw, error = self._unary(payload)
            except (OSError, WireError) as exc:
                now = clock()
                return InferTiming(start, now, now, now, f"gRPC connection failed: {exc}")
            received = clock()
            return InferTiming(start, sent, received, received, error)
        try:
            if self._streaming:
                if not self._stream_open:
                    wire.start_stream(self._stream_block)
                    self._stream_open = True
                wire.send_message(payload)
                sent = clock()
                return self._stream_replies(request.decoupled, start, sent, want_outputs)
            sent, raw, error = self._unary(payload)
        except (OSError, WireError) as exc:
            now = clock()
            return InferTiming(start, now, now, now, f"gRPC connection failed: {exc}")
        received = clock()
        if error is not None or raw is None:
            return InferTiming(start, sent, received, clock(), error or "gRPC error")
        if not want_outputs:
            return InferTiming(start, sent, received, clock(), None)
        else:
            reply = pb.ModelInferResponse.FromString(raw)
        return InferTiming(start, sent, received, clock(), None, decode_grpc_outputs(reply))

    def _stream_replies(
        self, decoupled: bool, start: int, sent: int, want_outputs: bool
    ) -> InferTiming:
        """Read the stream up to the request's last response (see :class:`StreamReplies`)."""
        clock = self._clock
        replies = StreamReplies(decoupled)
        while True:
            raw, error = self._wire.receive_message()
            received = clock()
            if error is not None or raw is None:
                return InferTiming(start, sent, received, clock(), error or "gRPC error")
            done, error = replies.add(raw, received)
            if error is not None:
                return InferTiming(start, sent, received, clock(), error)
            if done:
                return replies.timing(start, sent, received, clock(), want_outputs)

    def _unary(self, payload: bytes) -> tuple[int, bytes | None, str | None]:
        """Send one unary ModelInfer: when it was sent, the reply's bytes and its error."""
        self._wire.send_unary(self._unary_block, payload)
        sent = self._clock()
        raw, error = self._wire.receive_unary()
        return sent, raw, error

    def close(self) -> None:
        if self._stream_open:
            with contextlib.suppress(OSError):
                self._wire.end_stream()
        self._wire.close()


COMPRESSION = {"none": None, "gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}


class GrpcTransport:
    def __init__(self, options: TransportOptions, clock: Callable[[], int]) -> None:
        self.options = options
        self.clock = clock
        self.host, self.port = split_url(options.url, 8001)
        self.target = f"{self.host}:{self.port}"
        self.metadata = tuple((k.lower(), v) for k, v in options.headers.items()) or None
        self.wire_problem: str | None = None  # why the own HTTP/2 client is not used
        tls = options.tls
        self.secure = tls.grpc_use_ssl
        self._credentials = (
            grpc.ssl_channel_credentials(*grpc_credentials_bytes(tls)) if self.secure else None
        )
        self._wire_tls = grpc_wire_context(tls) if self.secure else None
        self._wire_probed = False
        # compressed requests go through the grpc library (the own HTTP/2 client sends them
        # uncompressed only)
        self._compression = COMPRESSION[options.compression]
        self._library_only = self._compression is not None
        self._channels: list[grpc.aio.Channel] = []
        self._sync_channels: list[grpc.Channel] = []
        self._next = itertools.count()
        self._stub: Any = None

    async def open(self) -> None:
        if self._channels:
            return
        self._add_channel()
        from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc

        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channels[0])
        try:
            await asyncio.wait_for(self._channels[0].channel_ready(), CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.close()
            secure = " with TLS" if self.secure else ""
            raise PerfError(f"cannot connect to {self.target} over gRPC{secure}") from None
        if not self._wire_probed and not self._library_only:
            self._wire_probed = True
            self.wire_problem = await asyncio.to_thread(self._probe_wire)

    def header_block(self, method: str) -> bytes:
        return header_block(
            SERVICE + method, self.target, dict(self.metadata or ()), secure=self.secure
        )

    def _probe_wire(self) -> str | None:
        """One ServerLive call on :mod:`grpc_wire`; the reason it cannot be used, or None."""
        try:
            wire = WireConnection.open(self.host, self.port, timeout=10, tls=self._wire_tls)
        except (OSError, WireError) as exc:
            return f"cannot connect: {exc}"
        try:
            _, error = wire.unary(self.header_block("ServerLive"), b"")
        except (OSError, WireError) as exc:
            return str(exc)
        finally:
            wire.close()
        return error

    def supports_blocking(self) -> bool:
        """Worker threads can drive this transport (streaming needs the own HTTP/2 client)."""
        return (self.wire_problem is None and not self._library_only) or not self.options.streaming

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        for sync_channel in self._sync_channels:
            sync_channel.close()
        self._sync_channels.clear()

    def connect_blocking(self) -> WireGrpcConnection | BlockingGrpcConnection:
        """A worker thread's own HTTP/2 connection, or (fallback) a synchronous grpc channel."""
        if self.wire_problem is None and not self._library_only:
            try:
                wire = WireConnection.open(self.host, self.port, tls=self._wire_tls)
                return WireGrpcConnection(self, wire)
            except (OSError, WireError) as exc:
                raise PerfError(f"cannot connect to {self.target} over gRPC: {exc}") from None
        if not self._sync_channels:
            for i in range(CHANNELS):
                options = [*_CHANNEL_OPTIONS, ("repokit.perf.sync_channel", i)]
                self._sync_channels.append(
                    grpc.secure_channel(
                        self.target,
                        self._credentials,
                        options=options,
                        compression=self._compression,
                    )
                    if self._credentials is not None
                    else grpc.insecure_channel(
                        self.target, options=options, compression=self._compression
                    )
                )
        channel = self._sync_channels[next(self._next) % len(self._sync_channels)]
        return BlockingGrpcConnection(self, channel)

    def _add_channel(self) -> None:
        options = [*_CHANNEL_OPTIONS, ("repokit.perf.channel", len(self._channels))]
        self._channels.append(
            grpc.aio.secure_channel(
                self.target, self._credentials, options=options, compression=self._compression
            )
            if self._credentials is not None
            else grpc.aio.insecure_channel(
                self.target, options=options, compression=self._compression
            )
        )

    async def connect(self) -> GrpcConnection:
        """An asyncio connection (async and rate modes); the workers share up to CHANNELS
        channels, opened on demand (idle grpc channels cost the client CPU in the background)."""
        await self.open()
        index = next(self._next) % CHANNELS
        while len(self._channels) <= index:
            self._add_channel()
        channel = self._channels[index]
        return GrpcConnection(self, channel, self.options.streaming)

    async def _call(self, method: str, request: Any, what: str) -> Any:
        await self.open()
        try:
            return await getattr(self._stub, method)(request, metadata=self.metadata, timeout=30)
        except grpc.RpcError as exc:
            raise PerfError(f"failed to get {what}: {_rpc_error(exc)}") from None

    async def server_metadata(self) -> dict[str, Any]:
        reply = await self._call("ServerMetadata", pb.ServerMetadataRequest(), "server metadata")
        return _to_dict(reply)

    async def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        reply = await self._call(
            "ModelMetadata",
            pb.ModelMetadataRequest(name=model, version=version),
            f"metadata of model '{model}'",
        )
        return _to_dict(reply)

    async def model_config(self, model: str, version: str) -> dict[str, Any] | None:
        await self.open()
        try:
            reply = await self._stub.ModelConfig(
                pb.ModelConfigRequest(name=model, version=version), metadata=self.metadata
            )
        except grpc.RpcError:
            return None
        return _to_dict(reply.config)

    async def model_statistics(self, model: str | None, version: str) -> dict[str, Any]:
        request = pb.ModelStatisticsRequest(name=model or "", version=version if model else "")
        return _to_dict(await self._call("ModelStatistics", request, "model statistics"))

    async def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        await self._call(
            "SystemSharedMemoryRegister",
            pb.SystemSharedMemoryRegisterRequest(name=name, key=key, offset=0, byte_size=byte_size),
            f"shared memory region '{name}' registered",
        )

    async def unregister_system_shm(self, name: str) -> None:
        await self._call(
            "SystemSharedMemoryUnregister",
            pb.SystemSharedMemoryUnregisterRequest(name=name),
            f"shared memory region '{name}' unregistered",
        )

    async def update_trace_settings(self, settings: dict[str, str]) -> None:
        """The server's global trace settings (--trace-level, --trace-rate, ...)."""
        request = pb.TraceSettingRequest()
        for key, value in settings.items():
            request.settings[key].value.append(value)
        await self._call("TraceSetting", request, "trace settings updated")

    def prepare(
        self,
        model: str,
        version: str,
        inputs: dict[str, tuple[str, npt.NDArray[Any]]],
        outputs: list[tuple[str, str]],
        shm: ShmBinding | None = None,
        decoupled: bool = False,
    ) -> PreparedGrpc:
        message = pb.ModelInferRequest(model_name=model, model_version=version)
        if decoupled:
            message.parameters["triton_enable_empty_final_response"].bool_param = True
        for key, (value, kind) in self.options.request_parameters.items():
            parameter = message.parameters[key]
            if kind == "int":
                parameter.int64_param = int(value)
            elif kind == "bool":
                parameter.bool_param = value.lower() == "true"
            else:
                parameter.string_param = value
        for name, (datatype, array) in inputs.items():
            tensor = message.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
            if shm is not None:
                region, offset, size = shm.inputs[name]
                tensor.parameters["shared_memory_region"].string_param = region
                tensor.parameters["shared_memory_byte_size"].int64_param = size
                tensor.parameters["shared_memory_offset"].int64_param = offset
            else:
                message.raw_input_contents.append(bytes(array_to_bytes(datatype, array)))
        for name, _ in outputs:
            out = message.outputs.add(name=name)
            if shm is not None and name in shm.outputs:
                region, offset, size = shm.outputs[name]
                out.parameters["shared_memory_region"].string_param = region
                out.parameters["shared_memory_byte_size"].int64_param = size
                out.parameters["shared_memory_offset"].int64_param = offset
        return PreparedGrpc(message, message.SerializeToString(), list(outputs), decoupled)
