"""``--grpc-restricted-protocol``: a server interceptor rejecting calls without the header.

A call to an RPC whose category is restricted must carry the metadata
``triton-grpc-protocol-<key>: <value>``; otherwise Triton answers UNAVAILABLE
``This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'`` (server
``src/grpc/grpc_server.cc`` ``CommonCallData::Execute``). A restricted stream fails as a whole.
The legacy v1 service's RPCs are restricted by the categories of their v2 counterparts
(:mod:`repokit.frontends.v1.restricted`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc

from repokit.frontends.restricted_apis import missing_header
from repokit.frontends.v1 import restricted as v1_restricted

SERVICE = "/inference.GRPCInferenceService/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"

#: RPC full method name -> restricted-feature category (server ``src/grpc/grpc_server.cc``:
#: the category each ``Register*`` hands its call data; ``grpc.health.v1.Health/Check`` is
#: ``health``, ``ModelStreamInfer`` ``inference``)
METHOD_CATEGORY: dict[str, str] = {
    SERVICE + "ServerLive": "health",
    SERVICE + "ServerReady": "health",
    SERVICE + "ModelReady": "health",
    HEALTH_CHECK: "health",
    SERVICE + "ServerMetadata": "metadata",
    SERVICE + "ModelMetadata": "metadata",
    SERVICE + "ModelInfer": "inference",
    SERVICE + "ModelStreamInfer": "inference",
    SERVICE + "ModelConfig": "model-config",
    SERVICE + "ModelStatistics": "statistics",
    SERVICE + "RepositoryIndex": "model-repository",
    SERVICE + "RepositoryModelLoad": "model-repository",
    SERVICE + "RepositoryModelUnload": "model-repository",
    SERVICE + "SystemSharedMemoryStatus": "shared-memory",
    SERVICE + "SystemSharedMemoryRegister": "shared-memory",
    SERVICE + "SystemSharedMemoryUnregister": "shared-memory",
    SERVICE + "CudaSharedMemoryStatus": "shared-memory",
    SERVICE + "CudaSharedMemoryRegister": "shared-memory",
    SERVICE + "CudaSharedMemoryUnregister": "shared-memory",
    SERVICE + "TraceSetting": "trace",
    SERVICE + "LogSettings": "logging",
}

STREAMING_METHODS = frozenset({SERVICE + "ModelStreamInfer", *v1_restricted.GRPC_STREAMING})


def restricted_message(key: str) -> str:
    return f"This protocol is restricted, expecting header '{key}'"


def method_restrictions(
    restricted: Mapping[str, tuple[str, str]],
) -> dict[str, tuple[str, ...]]:
    """Full method name -> the categories of it that are restricted, for the methods with at
    least one (decided once: every other method goes straight to its handler)."""
    categories: dict[str, tuple[str, ...]] = {
        path: (category,) for path, category in METHOD_CATEGORY.items()
    }
    categories.update(v1_restricted.GRPC_CATEGORIES)
    found: dict[str, tuple[str, ...]] = {}
    for path, names in categories.items():
        held = tuple(name for name in names if name in restricted)
        if held:
            found[path] = held
    return found


def _reject_unary(message: str) -> grpc.RpcMethodHandler:
    async def handler(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    return grpc.unary_unary_rpc_method_handler(handler)


def _reject_stream(message: str) -> grpc.RpcMethodHandler:
    async def handler(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)
        yield None  # pragma: no cover - abort raises

    return grpc.stream_stream_rpc_method_handler(handler)


class RestrictedProtocolInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Installed only when some category is restricted; a call to a method of no restricted
    category costs one dict lookup."""

    def __init__(self, restricted: Mapping[str, tuple[str, str]]) -> None:
        self._restricted = dict(restricted)
        self._methods = method_restrictions(self._restricted)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        path = handler_call_details.method
        categories = self._methods.get(path)
        if categories is not None:
            metadata = dict(handler_call_details.invocation_metadata or ())
            key = missing_header(self._restricted, categories, metadata.get)
            if key is not None:
                message = restricted_message(key)
                if path in STREAMING_METHODS:
                    return _reject_stream(message)
                return _reject_unary(message)
        return await continuation(handler_call_details)
