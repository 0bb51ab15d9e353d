"""The composition root: ``build_service(settings)`` wires manager, backends and service.

service = build_service(settings)
await service.start()   # loads the repository (per the model control mode)
...                     # frontends call the service
await service.stop()    # drains in-flight requests (exit_timeout_secs), unloads models
"""

from __future__ import annotations

from repokit.core.loaded_model import BackendFactory, SchedulerFactory
from repokit.core.model_manager import ModelManager
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings


def build_service(
    settings: ServerSettings,
    backend_factory: BackendFactory | None = None,
    scheduler_factory: SchedulerFactory | None = None,
) -> InferenceService:
    """A service over ``settings``; the factories default to the backend registry and the
    default scheduler (tests and the batching issue inject others)."""
    manager = ModelManager(settings, backend_factory, scheduler_factory)
    return InferenceService(settings, manager)
