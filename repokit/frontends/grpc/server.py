"""create_grpc_server(service, settings): the gRPC server with every service registered.

The server runs on the caller's asyncio loop (the same one as the HTTP frontend), so both
protocols share the model instances, schedulers and statistics of one InferenceService.
``create_grpc_server`` binds the port immediately (port 0 picks a free one) and returns a
:class:`GrpcServer`, which exposes the bound ``port`` and delegates ``start``/``stop``/
``wait_for_termination`` to the server it wraps (available as ``.server``).

Two transports serve the same servicers (``GrpcOptions.transport``, ``--grpc-transport``):
``native``, repokit's own HTTP/2 server (:mod:`repokit.frontends.grpc.h2`), and ``grpcio``,
a ``grpc.aio.Server``. Both take the handlers through the same registration
(:func:`repokit.frontends.grpc.registration.add_service`) and the same interceptors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from repokit.core.service import InferenceService
from repokit.errors import unavailable
from repokit.frontends.grpc.h2.server import NativeServer, bind_socket, tls_context
from repokit.frontends.grpc.options import GrpcOptions, GrpcSettings, grpc_options_from_settings
from repokit.frontends.grpc.registration import add_service
from repokit.frontends.grpc.restricted import RestrictedProtocolInterceptor
from repokit.frontends.grpc.servicer import (
    InferenceServicer,
    guarded,
)
from repokit.frontends.grpc.stream import serialize_stream_response
from repokit.frontends.header_forwarding import forwarding
from repokit.frontends.heap import HeapTrimmer
from repokit.frontends.v1.grpc_service import add_v1_servicer
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from repokit.protocol.generated import health_pb2 as health_pb
from repokit.protocol.generated import health_pb2_grpc as health_grpc
from repokit.protocol.grpc_raw import message_bytes


class HealthServicer:
    """``grpc.health.v1.Health/Check``: SERVING iff the server is ready; ``service`` ignored."""

    def __init__(self, service: InferenceService) -> None:
        self._service = service

    async def Check(
        self, request: health_pb.HealthCheckRequest, context: Any
    ) -> health_pb.HealthCheckResponse:
        async def run() -> health_pb.HealthCheckResponse:
            ready = self._service.server_ready()
            status = (
                health_pb.HealthCheckResponse.SERVING
                if ready
                else health_pb.HealthCheckResponse.NOT_SERVING
            )
            return health_pb.HealthCheckResponse(status=status)

        return await guarded(context, run)


class GrpcServer:
    """A bound gRPC server (grpc.aio's or the native one) and its port."""

    def __init__(self, server: Any, port: int, address: str) -> None:
        self.server = server
        self.port = port
        self.address = address

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace: float | None = None) -> None:
        await self.server.stop(grace)

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        return bool(await self.server.wait_for_termination(timeout))


def _read_pem(path: str, what: str) -> bytes:
    if not path:
        raise ValueError(f"--grpc-use-ssl needs --grpc-{what}")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read --grpc-{what} '{path}': {exc.strerror}") from None


def _credentials(options: GrpcOptions) -> grpc.ServerCredentials | None:
    if not (options.use_ssl or options.use_ssl_mutual):
        return None
    read = _read_pem
    key = read(options.server_key, "server-key")
    cert = read(options.server_cert, "server-cert")
    root = (
        read(options.root_cert, "root-cert")
        if options.root_cert or options.use_ssl_mutual
        else None
    )
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=options.use_ssl_mutual
    )


def _add_inference_service(servicer: InferenceServicer, server: Any, native: bool) -> None:
    """GRPCInferenceService's generated handlers, except that ModelInfer takes the request's
    bytes and answers with the response's bytes (the core decodes and encodes them, or hands
    them to a model's wire lane). Only ModelInfer is a registered method (see
    :mod:`repokit.frontends.grpc.registration`). A response with large outputs comes as
    :class:`~repokit.protocol.grpc_raw.MessageParts`: the native transport writes the parts as
    they are, grpc.aio gets them joined."""
    model_infer = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer, response_serializer=None if native else message_bytes
    )
    # the stream's messages come as their bytes as well (the servicer parses them, and may
    # hand them to a model's wire lane), its responses may be serialized already
    model_stream_infer = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer, response_serializer=serialize_stream_response
    )
    add_service(
        server,
        pb_grpc.add_GRPCInferenceServiceServicer_to_server,
        servicer,
        replace={"ModelInfer": model_infer, "ModelStreamInfer": model_stream_infer},
        registered=("ModelInfer",),
    )


def _add_services(
    service: InferenceService, server: Any, options: GrpcOptions, *, native: bool
) -> None:
    # grpc.aio's threads keep the memory of large messages (repokit.frontends.heap); the
    # native transport receives a message into one buffer on the loop's thread, reused or
    # unmapped once freed
    trimmer = None if native else HeapTrimmer()
    forward = forwarding(options.header_forward_pattern, "grpc-header-forward-pattern")
    _add_inference_service(InferenceServicer(service, trimmer, forward), server, native)
    add_service(server, health_grpc.add_HealthServicer_to_server, HealthServicer(service))
    add_v1_servicer(service, server)  # v1 hook: nvidia.inferenceserver.GRPCService


def _build_native(
    service: InferenceService, options: GrpcOptions, interceptors: list[Any]
) -> GrpcServer:
    tls = None
    if options.use_ssl or options.use_ssl_mutual:
        _read_pem(options.server_key, "server-key")
        _read_pem(options.server_cert, "server-cert")
        if options.root_cert or options.use_ssl_mutual:
            _read_pem(options.root_cert, "root-cert")
        try:
            tls = tls_context(
                options.server_cert,
                options.server_key,
                options.root_cert or None,
                options.use_ssl_mutual,
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ValueError(f"cannot use the gRPC TLS certificates: {exc}") from None
    target = f"{options.address}:{options.port}"
    try:
        sock = bind_socket(options.address, options.port, options.reuse_port)
    except OSError as exc:
        raise unavailable(f"Socket '{target}' already in use ({exc.strerror or exc})") from None
    server = NativeServer(
        sock,
        interceptors=interceptors,
        max_receive=options.max_receive_message_length,
        max_send=options.max_send_message_length,
        max_concurrent_streams=options.max_concurrent_streams,
        compression_level=options.compression_level(),
        keepalive_time=options.keepalive_time_ms / 1000,
        keepalive_timeout=options.keepalive_timeout_ms / 1000,
        keepalive_permit_without_calls=options.keepalive_permit_without_calls,
        min_recv_ping_interval=options.http2_min_recv_ping_interval_without_data_ms / 1000,
        max_ping_strikes=options.http2_max_ping_strikes,
        max_pings_without_data=options.http2_max_pings_without_data,
        max_connection_age=options.max_connection_age_ms / 1000,
        max_connection_age_grace=options.max_connection_age_grace_ms / 1000,
        tls=tls,
    )
    _add_services(service, server, options, native=True)
    return GrpcServer(server, server.port, options.address)


def build_grpc_server(service: InferenceService, options: GrpcOptions) -> GrpcServer:
    """Create and bind the server (call inside the running loop); ValueError on bad options."""
    interceptors = [RestrictedProtocolInterceptor(options.restricted)] if options.restricted else []
    if options.transport == "native":
        return _build_native(service, options, interceptors)
    if options.transport != "grpcio":
        raise ValueError(f"unknown gRPC transport '{options.transport}': native or grpcio")
    server = grpc.aio.server(options=options.channel_options(), interceptors=interceptors)
    _add_services(service, server, options, native=False)
    target = f"{options.address}:{options.port}"
    credentials = _credentials(options)
    try:
        if credentials is None:
            port = server.add_insecure_port(target)
        else:
            port = server.add_secure_port(target, credentials)
    except RuntimeError as exc:
        raise unavailable(f"Socket '{target}' already in use ({exc})") from None
    if port == 0:
        raise unavailable(f"Socket '{target}' already in use ")
    return GrpcServer(server, port, options.address)


def create_grpc_server(service: InferenceService, settings: GrpcSettings) -> GrpcServer:
    """The gRPC server for ``service`` configured from the serving settings' ``grpc_*`` fields."""
    return build_grpc_server(service, grpc_options_from_settings(settings))
