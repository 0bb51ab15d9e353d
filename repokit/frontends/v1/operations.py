"""The v1 operations shared by the HTTP and gRPC v1 frontends: each one calls the
:class:`~repokit.core.service.InferenceService` and returns v1 messages; failures are
``RepokitError``s that the frontends turn into a ``RequestStatus``.

It also keeps what only v1 reports: per-kind durations of successful non-inference requests
(``ServerStatus.status_stats`` etc.) and the uptime origin.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from repokit.core.service import InferenceService
from repokit.errors import invalid_arg, unsupported
from repokit.frontends.v1.infer_codec import Buffer, decode_request, encode_response, split_body
from repokit.frontends.v1.server_status import build_server_status
from repokit.protocol.generated.v1 import server_status_pb2 as ss

REQUEST_KINDS = (
    "status_stats",
    "health_stats",
    "model_control_stats",
    "shm_control_stats",
    "repository_stats",
)
CUDA_UNSUPPORTED = "CUDA shared memory is not supported by this server (no GPU support)"


def model_version(text: str | int) -> str:
    """v1 versions are integers; -1 (and 0 / empty) select the latest READY version."""
    try:
        number = int(text) if text != "" else -1
    except ValueError:
        raise invalid_arg(f"invalid model version '{text}', expected an integer") from None
    return "" if number <= 0 else str(number)


class V1Operations:
    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self._started_ns = time.monotonic_ns()
        self._stats = {kind: ss.StatDuration() for kind in REQUEST_KINDS}

    def record(self, kind: str, started_ns: int) -> None:
        """Count one successful request of ``kind`` (a ``ServerStatus`` *_stats field)."""
        duration = self._stats[kind]
        duration.count += 1
        duration.total_time_ns += time.monotonic_ns() - started_ns

    # --- health & status ---------------------------------------------------------------
    def health(self, mode: str) -> bool:
        if mode == "live":
            return self.service.server_live()
        if mode == "ready":
            return self.service.server_ready()
        raise invalid_arg(f"unknown health mode '{mode}', expected 'live' or 'ready'")

    def status(self, model: str = "") -> ss.ServerStatus:
        uptime = time.monotonic_ns() - self._started_ns
        return build_server_status(self.service, model, uptime, self._stats)

    # --- inference -----------------------------------------------------------------------
    async def infer(
        self,
        model: str,
        version: str,
        header: Any,
        buffers: Sequence[Buffer | None] | None = None,
        body: Buffer | None = None,
    ) -> tuple[Any, list[Buffer]]:
        """Run one v1 request; inputs come from ``buffers`` (gRPC) or one ``body`` (HTTP)."""
        config = self.service.model_config(model, version)
        if buffers is None:
            buffers = split_body(header, config, body if body is not None else b"")
        decoded = decode_request(model, version, header, buffers, config)
        response = await self.service.infer(decoded.request)

        def labels(output: str) -> Sequence[str]:
            return self.service.output_labels(model, response.model_version, output)

        return encode_response(decoded, response, labels, int(header.id))

    # --- model control, shared memory, repository ---------------------------------------
    async def model_control(self, model: str, load: bool) -> None:
        if load:
            await self.service.load_model(model)
        else:
            await self.service.unload_model(model)

    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.service.shm_register(name, key, offset, byte_size)

    def shm_unregister(self, name: str = "") -> None:
        """One region by name, or every region when ``name`` is empty."""
        self.service.shm_unregister(name)

    def shm_status(self) -> ss.SharedMemoryStatus:
        status = ss.SharedMemoryStatus()
        for region in self.service.shm_status():
            status.shared_memory_region.add(
                name=region["name"],
                key=region["key"],
                offset=int(region["offset"]),
                byte_size=int(region["byte_size"]),
            )
        return status

    def cuda_register(self) -> None:
        raise unsupported(CUDA_UNSUPPORTED)

    def repository_index(self) -> ss.ModelRepositoryIndex:
        index = ss.ModelRepositoryIndex()
        for name in dict.fromkeys(entry["name"] for entry in self.service.repository_index()):
            index.models.add(name=name)
        return index
