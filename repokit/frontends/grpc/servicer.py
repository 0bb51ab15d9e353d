"""The grpc.aio servicer for ``inference.GRPCInferenceService``: decode -> service -> encode.

Every RPC is a thin adapter over :class:`repokit.core.service.InferenceService`. Core errors
(``RepokitError``) become the gRPC status of the one code table in
:mod:`repokit.frontends.status`, with the core's message unchanged; anything unexpected becomes
INTERNAL with a one-line message, never a traceback. Streaming lives in
:mod:`repokit.frontends.grpc.stream`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError

from repokit.core.server_log import VERBOSE
from repokit.core.service import InferenceService
from repokit.errors import Code, RepokitError, unsupported
from repokit.frontends.cuda_shared_memory import cuda_register_refused
from repokit.frontends.grpc import messages
from repokit.frontends.grpc.codec import parse_infer_request
from repokit.frontends.grpc.infer_codec import GrpcInferCall, GrpcInferCodec
from repokit.frontends.grpc.parsing import UNPARSABLE_REQUEST
from repokit.frontends.grpc.stream import (
    GRPC_ERROR_HEADER,
    StreamResponse,
    StreamSession,
    stream_calls,
)
from repokit.frontends.header_forwarding import HeaderForwarding
from repokit.frontends.heap import HeapTrimmer
from repokit.frontends.status import grpc_status_name
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.grpc_raw import MessageParts

T = TypeVar("T")
Context = Any  # grpc.aio.ServicerContext (grpc ships no type information)

_log = logging.getLogger(__name__)


def status_code(code: Code) -> grpc.StatusCode:
    return grpc.StatusCode[grpc_status_name(code)]


async def abort_with(context: Context, error: RepokitError) -> NoReturn:
    await context.abort(status_code(error.code), error.message)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


async def guarded(context: Context, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call``; map RepokitError to its status and anything else to INTERNAL."""
    try:
        return await call()
    except RepokitError as error:
        await abort_with(context, error)
    except (grpc.aio.AbortError, grpc.aio.UsageError):
        raise
    except Exception as exc:  # a bug must not reach the client as a traceback
        _log.exception("gRPC handler failed")
        await context.abort(
            grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        )
        raise AssertionError("unreachable") from None  # pragma: no cover


class InferenceServicer:
    """``inference.GRPCInferenceService`` over one InferenceService."""

    def __init__(
        self,
        service: InferenceService,
        trimmer: HeapTrimmer | None = None,
        forward: HeaderForwarding | None = None,
    ) -> None:
        """``trimmer``: gives the memory of large requests back after them (grpc.aio's; None:
        no trimming, see :mod:`repokit.frontends.heap`); ``forward``: the metadata to pass to
        models as parameters (``--grpc-header-forward-pattern``)."""
        self._service = service
        self._trimmer = trimmer
        self._forward = forward
        self._codec = GrpcInferCodec()

    # --- health & metadata -------------------------------------------------------------
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        async def run() -> pb.ServerLiveResponse:
            return pb.ServerLiveResponse(live=self._service.server_live())

        return await guarded(context, run)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Context
    ) -> pb.ServerReadyResponse:
        async def run() -> pb.ServerReadyResponse:
            return pb.ServerReadyResponse(ready=self._service.server_ready())

        return await guarded(context, run)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Context
    ) -> pb.ModelReadyResponse:
        async def run() -> pb.ModelReadyResponse:
            version = messages.parse_model_version(request.version)
            return pb.ModelReadyResponse(ready=self._service.model_ready(request.name, version))

        return await guarded(context, run)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        async def run() -> pb.ServerMetadataResponse:
            return messages.server_metadata(self._service.server_metadata())

        return await guarded(context, run)

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        async def run() -> pb.ModelMetadataResponse:
            version = messages.parse_model_version(request.version)
            return messages.model_metadata(self._service.model_metadata(request.name, version))

        return await guarded(context, run)

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        async def run() -> pb.ModelConfigResponse:
            version = messages.parse_model_version(request.version)
            response = pb.ModelConfigResponse()
            response.config.CopyFrom(self._service.model_config(request.name, version))
            return response

        return await guarded(context, run)

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        async def run() -> pb.ModelStatisticsResponse:
            version = messages.parse_model_version(request.version)
            stats = self._service.model_statistics(request.name, version)
            return messages.model_statistics(stats)

        return await guarded(context, run)

    # --- inference ---------------------------------------------------------------------
    async def ModelInfer(self, raw: bytes, context: Context) -> bytes | MessageParts:
        """ModelInfer from the request's bytes, answered with the response's bytes: one call
        into the core (:meth:`InferenceService.infer_encoded`), which may hand the bytes to the
        model's instance process (:mod:`repokit.core.wire_lane`). Errors are answered with
        ``set_code`` and an empty message, not ``abort``: an abort keeps the request alive in
        a reference cycle (see :mod:`repokit.frontends.heap`); the memory of a large request
        goes back to the system once it is answered."""
        if self._trimmer is not None:
            self._trimmer.after(len(raw))
        try:
            request, raw_contents = parse_infer_request(raw)
        except DecodeError:
            return _failed(context, grpc.StatusCode.INTERNAL, UNPARSABLE_REQUEST)
        service = self._service
        forward = self._forward
        forwarded = None
        if forward is not None:
            forwarded = forward.parameters(context.invocation_metadata() or ())
        call = GrpcInferCall(raw, request, raw_contents, forwarded)
        tracing = service.tracing
        trace = None
        if tracing.enabled:  # every request is counted by the sampling (rate, count)
            trace = tracing.sample(request.model_name, _traceparent(context))
        try:
            version = messages.parse_model_version(request.model_version)
            return await service.infer_encoded(
                self._codec, request.model_name, version, call, trace
            )
        except asyncio.CancelledError:
            _cancelled("ModelInferHandler")
            raise
        except RepokitError as error:
            return _failed(context, status_code(error.code), error.message)
        except Exception as exc:  # a bug must not reach the client as a traceback
            return _internal(context, exc)
        finally:
            if trace is not None:
                trace.finish()

    async def ModelStreamInfer(
        self,
        request_iterator: AsyncIterator[bytes],
        context: Context,
    ) -> AsyncIterator[StreamResponse]:
        """The stream's messages come as their bytes (parsed by :func:`.stream.stream_calls`)."""
        # grpc.aio needs an async generator function here, not one returning a generator
        grpc_error = any(
            key == GRPC_ERROR_HEADER and value == "true"
            for key, value in context.invocation_metadata() or ()
        )
        calls = stream_calls(request_iterator)
        forwarded = None
        if self._forward is not None:  # the stream's headers go with each of its requests
            forwarded = self._forward.parameters(context.invocation_metadata() or ())
        session = StreamSession(self._service, calls, grpc_error, self._codec, forwarded)
        try:
            async for response in session.responses():
                yield response
        except asyncio.CancelledError:
            _cancelled("ModelStreamInferHandler")
            raise
        if session.failure is not None:
            await abort_with(context, session.failure)

    # --- repository ----------------------------------------------------------------------
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        async def run() -> pb.RepositoryIndexResponse:
            _only_default_repository(request.repository_name)
            return messages.repository_index(self._service.repository_index(request.ready))

        return await guarded(context, run)

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        async def run() -> pb.RepositoryModelLoadResponse:
            _only_default_repository(request.repository_name)
            config, files = messages.load_parameters(request.parameters)
            await self._service.load_model(request.model_name, config, files or None)
            return pb.RepositoryModelLoadResponse()

        return await guarded(context, run)

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        async def run() -> pb.RepositoryModelUnloadResponse:
            _only_default_repository(request.repository_name)
            dependents = messages.unload_dependents(request.parameters)
            await self._service.unload_model(request.model_name, dependents)
            return pb.RepositoryModelUnloadResponse()

        return await guarded(context, run)

    # --- system shared memory -----------------------------------------------------------
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        async def run() -> pb.SystemSharedMemoryStatusResponse:
            return messages.shm_status(self._service.shm_status(request.name))

        return await guarded(context, run)

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        async def run() -> pb.SystemSharedMemoryRegisterResponse:
            self._service.shm_register(request.name, request.key, request.offset, request.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()

        return await guarded(context, run)

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        async def run() -> pb.SystemSharedMemoryUnregisterResponse:
            self._service.shm_unregister(request.name)
            return pb.SystemSharedMemoryUnregisterResponse()

        return await guarded(context, run)

    # --- CUDA shared memory and tracing: not available in this server --------------------
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        if request.name:
            await abort_with(
                context,
                RepokitError(
                    Code.NOT_FOUND,
                    f"Unable to find cuda shared memory region: '{request.name}'",
                ),
            )
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        # as Triton 2.51's release build without a GPU: the CUDA IPC open fails, whatever the
        # request holds (repokit.frontends.cuda_shared_memory)
        await abort_with(context, cuda_register_refused(request.name))

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        # No CUDA region can exist, so unregistering any name (or all) is a no-op.
        return pb.CudaSharedMemoryUnregisterResponse()

    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Context
    ) -> pb.TraceSettingResponse:
        """Settings with values update, an empty value list clears; none given: a read."""

        async def run() -> pb.TraceSettingResponse:
            service, model = self._service, request.model_name
            if request.settings:
                changes: dict[str, list[str] | None] = {
                    key: list(v.value) for key, v in request.settings.items()
                }
                result = service.update_trace_settings(model, changes)
            else:
                result = service.trace_settings(model)
            response = pb.TraceSettingResponse()
            for key, value in result.items():
                response.settings[key].value.extend(value if isinstance(value, list) else [value])
            return response

        return await guarded(context, run)

    # --- logging ------------------------------------------------------------------------
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: Context
    ) -> pb.LogSettingsResponse:
        async def run() -> pb.LogSettingsResponse:
            updates = messages.log_settings_request(request)
            current = (
                self._service.update_log_settings(updates)
                if updates
                else self._service.log_settings()
            )
            return messages.log_settings_response(current)

        return await guarded(context, run)


def _traceparent(context: Context) -> str | None:
    """The W3C trace context a client sent (metadata ``traceparent``)."""
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            return str(value)
    return None


def _cancelled(handler: str) -> None:
    """The client cancelled the call (its requests still waiting in a queue are cancelled),
    logged at --log-verbose 1 as Triton 2.51's gRPC frontend logs it (qa/L0_request_cancellation
    greps the line)."""
    _log.log(VERBOSE, "Cancellation notification received for %s, rpc_ok=1", handler)


def _failed(context: Context, code: grpc.StatusCode, message: str) -> bytes:
    """An error status for the call, without raising (the empty message is not sent)."""
    context.set_code(code)
    context.set_details(message)
    return b""


def _internal(context: Context, exc: Exception) -> bytes:
    """A bug: INTERNAL with a one-line message (logged with its traceback), never the trace."""
    _log.exception("ModelInfer failed")
    message = f"internal error: {type(exc).__name__}: {exc}"
    return _failed(context, grpc.StatusCode.INTERNAL, message)


def _only_default_repository(repository_name: str) -> None:
    if repository_name:
        raise unsupported("'repository_name' specification is not supported")
