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

#: RPC method name -> restricted-feature category (server ``src/restricted_features.h``)
METHOD_CATEGORY: dict[str, str] = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "Check": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}

STREAMING_METHODS = frozenset({"ModelStreamInfer"})


def restricted_message(key: str) -> str:
    return f"This protocol is restricted, expecting header '{key}'"


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
    def __init__(self, restricted: Mapping[str, tuple[str, str]]) -> None:
        self._restricted = dict(restricted)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        path = handler_call_details.method
        categories = v1_restricted.GRPC_CATEGORIES.get(path)
        if categories is None:
            method = path.rsplit("/", 1)[-1]
            category = METHOD_CATEGORY.get(method)
            categories = (category,) if category is not None else ()
            streaming = method in STREAMING_METHODS
        else:
            streaming = path in v1_restricted.GRPC_STREAMING
        if categories:
            metadata = dict(handler_call_details.invocation_metadata or ())
            key = missing_header(self._restricted, categories, metadata.get)
            if key is not None:
                message = restricted_message(key)
                return _reject_stream(message) if streaming else _reject_unary(message)
        return await continuation(handler_call_details)
