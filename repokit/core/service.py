"""InferenceService: one method per protocol operation; the only thing frontends call.

CONTRACT (scaffolding written first so the frontends can be built in parallel; the core
engineer replaces every body). All methods raise ``RepokitError`` with Triton's code and
message on failure; frontends map the code to their status in one table.
"""

from __future__ import annotations

from typing import Any

from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferRequest, InferResponse


class InferenceService:
    # --- health & metadata -------------------------------------------------------------
    def server_live(self) -> bool:
        raise NotImplementedError

    def server_ready(self) -> bool:
        raise NotImplementedError

    def server_metadata(self) -> dict[str, Any]:
        """{"name": "triton", "version": ..., "extensions": [...]}"""
        raise NotImplementedError

    def model_ready(self, name: str, version: str = "") -> bool:
        """NOT_FOUND / UNAVAILABLE errors as Triton's GetModel; False if found but not ready."""
        raise NotImplementedError

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """Triton's model metadata JSON shape (batch dim prepended, BYTES for strings)."""
        raise NotImplementedError

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        """The normalised config of the selected version."""
        raise NotImplementedError

    def model_config_json(self, name: str, version: str = "") -> dict[str, Any]:
        """The config in Triton's /config JSON form (int64 fields as numbers, defaults printed)."""
        raise NotImplementedError

    def is_decoupled(self, name: str, version: str = "") -> bool:
        raise NotImplementedError

    # --- inference ---------------------------------------------------------------------
    async def infer(self, request: InferRequest) -> InferResponse:
        raise NotImplementedError

    # --- statistics & metrics ----------------------------------------------------------
    def model_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """{"model_stats": [...]} exactly as Triton's statistics extension JSON."""
        raise NotImplementedError

    def metrics_text(self) -> str:
        """Prometheus text exposition with Triton's nv_* families."""
        raise NotImplementedError

    # --- repository ----------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        raise NotImplementedError

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        raise NotImplementedError

    # --- system shared memory -----------------------------------------------------------
    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        raise NotImplementedError

    def shm_unregister(self, name: str = "") -> None:
        """An empty name unregisters every region."""
        raise NotImplementedError

    def shm_status(self, name: str = "") -> list[dict[str, Any]]:
        """[{"name", "key", "offset", "byte_size"}]; unknown name -> INVALID_ARG."""
        raise NotImplementedError

    # --- logging ------------------------------------------------------------------------
    def log_settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError
