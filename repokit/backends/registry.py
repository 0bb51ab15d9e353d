"""Choose a backend implementation by the config's backend / platform name.

Each backend module is imported only when a model needs it, so a server without onnxruntime
(or tensorrt) installed still serves python models.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from repokit.backends.base import Backend, ModelContext
from repokit.errors import Code, RepokitError
from repokit.protocol.generated import model_config_pb2 as mc

# backend name -> (module, class); platforms are mapped onto backend names first
_BACKENDS: dict[str, tuple[str, str]] = {
    "python": ("repokit.backends.python.backend", "PythonBackend"),
    "onnxruntime": ("repokit.backends.onnxruntime", "OnnxRuntimeBackend"),
    "tensorrt": ("repokit.backends.tensorrt", "TensorRTBackend"),
}
_PLATFORMS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
}


def backend_name(config: mc.ModelConfig) -> str:
    """The backend a config selects: ``backend`` if set, else the one its ``platform`` implies."""
    if config.backend:
        return config.backend
    return _PLATFORMS.get(config.platform, config.platform)


def instance_count(config: mc.ModelConfig) -> int:
    """Total instances over every instance group (at least one)."""
    return max(1, sum(max(0, group.count) for group in config.instance_group))


def _unknown(name: str) -> RepokitError:
    return RepokitError(
        Code.INVALID_ARG,
        f"unable to find backend library for backend '{name}', "
        "try specifying runtime on the model configuration.",
    )


def backend_factory(name: str) -> Callable[[ModelContext], Backend]:
    """The Backend class registered under ``name`` (imports its module)."""
    entry = _BACKENDS.get(name)
    if entry is None:
        raise _unknown(name)
    module = importlib.import_module(entry[0])
    factory: Callable[[ModelContext], Backend] = getattr(module, entry[1])
    return factory


def create_backend(context: ModelContext) -> Backend:
    """An unloaded backend for one model version (call ``await backend.load()`` next)."""
    return backend_factory(backend_name(context.config))(context)
