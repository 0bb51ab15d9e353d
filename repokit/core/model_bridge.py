"""The serving core as backends see it (:class:`~repokit.backends.server_api.ServerApi`).

Built by the InferenceService and handed to every backend in ``ModelContext.server``. A BLS
request of a python model runs exactly like a client request (the called model's checks,
scheduler, batching and statistics), with Triton's BLS errors: a model that is not ready, a
decoupled model called without ``decoupled=True`` and a request the core refuses before
scheduling give ``Model <name> - Error when running inference: <reason>``; an error of the
execution itself comes back as the called model returned it.

A BLS request made with ``trace=request.trace()`` of a traced request is traced as a child of
that request's trace (``parent``), as Triton's python backend spawns a child trace: its own id,
``parent_id`` the caller's, the core's timestamps from ``REQUEST_START`` to ``REQUEST_END``
(no frontend timestamps, no ``INFER_RESPONSE_COMPLETE``), written with its caller's trace. A
request refused before it reaches the model leaves no child trace. Decoupled models are not
traced (as their client requests are not).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING

from repokit.backends.server_api import RequestControl
from repokit.core.custom_metrics import CustomMetrics
from repokit.errors import RepokitError, internal
from repokit.protocol.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from repokit.core.loaded_model import LoadedVersion
    from repokit.core.request_checks import PreparedRequest
    from repokit.core.service import InferenceService
    from repokit.core.tracing.trace import Trace

MODEL_LOG = "repokit.model"


def bls_error(model: str, reason: str) -> RepokitError:
    return internal(f"Model {model} - Error when running inference: {reason}")


class ServiceBridge:
    def __init__(self, service: InferenceService) -> None:
        self._service = service
        self._metrics = CustomMetrics()
        self._log = logging.getLogger(MODEL_LOG)

    @property
    def custom_metrics(self) -> CustomMetrics:
        return self._metrics

    @property
    def model_log(self) -> logging.Logger:
        return self._log

    def log_verbose_level(self) -> int:
        return int(self._service.log_settings().get("log_verbose_level", 0))

    # --- inference ------------------------------------------------------------------------------
    def _check_callable(self, request: InferRequest, decoupled_call: bool) -> None:
        name = request.model_name
        if not self._service.model_ready(name, request.model_version):
            raise bls_error(
                name, f"Failed for execute the inference request. Model '{name}' is not ready."
            )
        if not decoupled_call and self._service.is_decoupled(name, request.model_version):
            raise bls_error(
                name,
                "Model "
                + name
                + " is using the decoupled. The current BLS request call doesn't support models "
                "using the decoupled transaction policy. Please use 'decoupled=True' argument to "
                "the 'exec' or 'async_exec' calls for decoupled models.'",
            )

    async def infer(self, request: InferRequest, parent: Trace | None = None) -> InferResponse:
        self._check_callable(request, False)
        try:
            loaded, prepared = self._service.admit(request)
        except RepokitError as exc:
            raise bls_error(request.model_name, exc.message) from exc
        if parent is not None:
            return await self._run_traced(loaded, request, prepared, parent)
        return await self._service.run_admitted(loaded, request, prepared)

    async def _run_traced(
        self,
        loaded: LoadedVersion,
        request: InferRequest,
        prepared: PreparedRequest,
        parent: Trace,
    ) -> InferResponse:
        """The request run with a child trace of ``parent``."""
        child = parent.spawn()
        child.start_request(loaded.name, loaded.version, request.id)
        prepared.backend_request.trace = child
        try:
            return await self._service.run_admitted(loaded, request, prepared)
        finally:
            child.stamp("REQUEST_END")
            child.end()

    def infer_stream(
        self,
        request: InferRequest,
        control: RequestControl | None = None,
        parent: Trace | None = None,
    ) -> AsyncIterator[InferResponse]:
        self._check_callable(request, True)
        try:
            loaded, prepared = self._service.admit(request)
        except RepokitError as exc:
            raise bls_error(request.model_name, exc.message) from exc
        if not loaded.decoupled:  # one response, the final one (as Triton answers it)
            return self._single_response(loaded, request, prepared, parent)
        return self._service.infer_stream(request, control)

    async def _single_response(
        self,
        loaded: LoadedVersion,
        request: InferRequest,
        prepared: PreparedRequest,
        parent: Trace | None,
    ) -> AsyncIterator[InferResponse]:
        if parent is not None:
            response = await self._run_traced(loaded, request, prepared, parent)
        else:
            response = await self._service.run_admitted(loaded, request, prepared)
        yield replace(response, final=True)

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self._service.is_decoupled(name, version)

    # --- model control --------------------------------------------------------------------------
    def model_ready(self, name: str, version: str = "") -> bool:
        return self._service.model_ready(name, version)

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        await self._service.load_model(name, config_json, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self._service.unload_model(name, unload_dependents)
