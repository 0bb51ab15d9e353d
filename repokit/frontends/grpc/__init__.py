"""gRPC frontend: ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` over grpc.aio."""

from repokit.frontends.grpc.options import GrpcOptions
from repokit.frontends.grpc.server import GrpcServer, build_grpc_server, create_grpc_server

__all__ = ["GrpcOptions", "GrpcServer", "build_grpc_server", "create_grpc_server"]
