"""``--grpc-restricted-protocol``: a server interceptor rejecting calls without the header.

A call to an RPC whose category is restricted must carry the metadata
``triton-grpc-protocol-<key>: <value>``; otherwise Triton answers UNAVAILABLE
``This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'`` (server
``src/grpc/grpc_server.cc`` ``CommonCallData::Execute``). A restricted stream fails as a whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc

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
        method = handler_call_details.method.rsplit("/", 1)[-1]
        category = METHOD_CATEGORY.get(method)
        rule = self._restricted.get(category) if category is not None else None
        if rule is not None:
            key, expected = rule
            metadata = handler_call_details.invocation_metadata or ()
            if not any(k == key and v == expected for k, v in metadata):
                message = restricted_message(key)
                if method in STREAMING_METHODS:
                    return _reject_stream(message)
                return _reject_unary(message)
        return await continuation(handler_call_details)
