"""The v1 gRPC service ``nvidia.inferenceserver.GRPCService`` over :class:`V1Operations`.

Like Triton <= 20.06, every RPC completes with gRPC status OK and reports success or failure in
the response's ``request_status`` (a ``RequestStatus`` with code, msg, server_id and a unique
request_id). ``Infer`` takes one ``raw_input`` per header input that is not in shared memory and
answers one ``raw_output`` per raw output; ``StreamInfer`` answers each request of the stream
in order. Registered on the same grpc.aio server as v2 (a hook in ``build_grpc_server``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from repokit.core.service import InferenceService
from repokit.errors import Code, RepokitError, invalid_arg
from repokit.frontends.grpc.parsing import Unparsable
from repokit.frontends.grpc.registration import add_service
from repokit.frontends.v1 import request_status as rstatus
from repokit.frontends.v1.infer_codec import Buffer
from repokit.frontends.v1.operations import V1Operations, model_version
from repokit.protocol.generated.v1 import grpc_service_pb2 as pb
from repokit.protocol.generated.v1 import grpc_service_pb2_grpc as pb_grpc

Context = Any  # grpc.aio.ServicerContext
_log = logging.getLogger(__name__)

ShmRequest = pb.SharedMemoryControlRequest


class V1Servicer:
    """``nvidia.inferenceserver.GRPCService`` for one InferenceService."""

    def __init__(self, service: InferenceService) -> None:
        self.ops = V1Operations(service)
        self._ids = rstatus.RequestIds()

    async def _answer(self, response: Any, call: Callable[[], Awaitable[None]]) -> Any:
        """Run ``call`` (which fills ``response``) and set ``response.request_status``."""
        request_id = self._ids.next()
        try:
            await call()
        except RepokitError as exc:
            response.request_status.CopyFrom(rstatus.failure(request_id, exc))
            return response
        except Exception as exc:  # a bug must not reach the client as a traceback
            _log.exception("v1 gRPC handler failed")
            bug = RepokitError(Code.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
            response.request_status.CopyFrom(rstatus.failure(request_id, bug))
            return response
        response.request_status.CopyFrom(rstatus.success(request_id))
        return response

    async def Health(self, request: Any, context: Context) -> Any:
        response = pb.HealthResponse()

        async def run() -> None:
            started = time.monotonic_ns()
            response.health = self.ops.health(request.mode)
            self.ops.record("health_stats", started)

        return await self._answer(response, run)

    async def Status(self, request: Any, context: Context) -> Any:
        response = pb.StatusResponse()

        async def run() -> None:
            started = time.monotonic_ns()
            response.server_status.CopyFrom(self.ops.status(request.model_name))
            self.ops.record("status_stats", started)

        return await self._answer(response, run)

    async def _infer_into(self, request: Any, response: Any) -> None:
        header = request.meta_data
        version = model_version(request.model_version)
        self.ops.service.model_config(request.model_name, version)  # unknown model first
        raw = list(request.raw_input)
        buffers: list[Buffer | None] = []
        for item in header.input:
            if item.HasField("shared_memory"):
                buffers.append(None)
            elif raw:
                buffers.append(raw.pop(0))
            else:
                raise invalid_arg(
                    f"no raw_input for input '{item.name}': expected one raw_input per input "
                    "that is not in shared memory, in header order"
                )
        if raw:
            raise invalid_arg(
                f"{len(raw)} raw_input entries more than inputs without shared memory in the header"
            )
        out_header, outputs = await self.ops.infer(request.model_name, version, header, buffers)
        response.meta_data.CopyFrom(out_header)
        response.raw_output.extend(bytes(b) for b in outputs)

    async def _infer(self, request: Any) -> Any:
        response = pb.InferResponse()

        async def run() -> None:
            await self._infer_into(request, response)

        return await self._answer(response, run)

    async def Infer(self, request: Any, context: Context) -> Any:
        return await self._infer(request)

    async def StreamInfer(
        self, request_iterator: AsyncIterator[Any], context: Context
    ) -> AsyncIterator[Any]:
        async for request in request_iterator:
            if isinstance(request, Unparsable):  # answered in its place; the stream goes on
                error = invalid_arg(request.message)
                yield pb.InferResponse(request_status=rstatus.failure(self._ids.next(), error))
                continue
            yield await self._infer(request)

    async def ModelControl(self, request: Any, context: Context) -> Any:
        async def run() -> None:
            started = time.monotonic_ns()
            load = request.type == pb.ModelControlRequest.LOAD
            await self.ops.model_control(request.model_name, load)
            self.ops.record("model_control_stats", started)

        return await self._answer(pb.ModelControlResponse(), run)

    async def SharedMemoryControl(self, request: Any, context: Context) -> Any:
        response = pb.SharedMemoryControlResponse()

        async def run() -> None:
            started = time.monotonic_ns()
            which = request.WhichOneof("shared_memory_control")
            if which == "register":
                reg = request.register
                kind = reg.WhichOneof("shared_memory_types")
                if kind == "cuda_shared_memory":
                    self.ops.cuda_register()
                if kind != "system_shared_memory":
                    raise invalid_arg("register needs system_shared_memory (key and offset)")
                system = reg.system_shared_memory
                self.ops.shm_register(
                    reg.name, system.shared_memory_key, int(system.offset), int(reg.byte_size)
                )
            elif which == "unregister":
                if not request.unregister.name:
                    raise invalid_arg("unregister needs the name of a region")
                self.ops.shm_unregister(request.unregister.name)
            elif which == "unregister_all":
                self.ops.shm_unregister("")
            elif which == "status":
                response.shared_memory_status.CopyFrom(self.ops.shm_status())
            else:
                raise invalid_arg(
                    "SharedMemoryControl needs one of register, unregister, unregister_all, status"
                )
            self.ops.record("shm_control_stats", started)

        return await self._answer(response, run)

    async def Repository(self, request: Any, context: Context) -> Any:
        response = pb.RepositoryResponse()

        async def run() -> None:
            started = time.monotonic_ns()
            if request.WhichOneof("request_type") != "index":
                raise invalid_arg("Repository needs request_type 'index'")
            response.index.CopyFrom(self.ops.repository_index())
            self.ops.record("repository_stats", started)

        return await self._answer(response, run)


def add_v1_servicer(service: InferenceService, server: Any) -> None:
    """Register ``nvidia.inferenceserver.GRPCService`` on ``server`` (a grpc.aio server)."""
    add_service(server, pb_grpc.add_GRPCServiceServicer_to_server, V1Servicer(service))
