"""Choose a backend implementation by the config's backend / platform name.

Each backend module is imported only when a model needs it, so a server without onnxruntime
(or tensorrt) installed still serves python models. The imports are plain ``from ... import``
statements inside small loader functions (the backend modules import this one, so they cannot
sit at the top): a renamed module or class fails the type check and the tests, not a request.
"""

from __future__ import annotations

from collections.abc import Callable

from repokit.backends.base import Backend, ModelContext
from repokit.errors import Code, RepokitError
from repokit.protocol.generated import model_config_pb2 as mc


def _python() -> Callable[[ModelContext], Backend]:
    from repokit.backends.python.backend import PythonBackend

    return PythonBackend


def _onnxruntime() -> Callable[[ModelContext], Backend]:
    from repokit.backends.onnxruntime import OnnxRuntimeBackend

    return OnnxRuntimeBackend


def _tensorrt() -> Callable[[ModelContext], Backend]:
    from repokit.backends.tensorrt import TensorRTBackend

    return TensorRTBackend


# backend name -> its loader; platforms are mapped onto backend names first
_BACKENDS: dict[str, Callable[[], Callable[[ModelContext], Backend]]] = {
    "python": _python,
    "onnxruntime": _onnxruntime,
    "tensorrt": _tensorrt,
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


def _unknown(name: str) -> RepokitError:
    return RepokitError(
        Code.INVALID_ARG,
        f"unable to find backend library for backend '{name}', "
        "try specifying runtime on the model configuration.",
    )


def backend_factory(name: str) -> Callable[[ModelContext], Backend]:
    """The Backend class registered under ``name`` (imports its module)."""
    load = _BACKENDS.get(name)
    if load is None:
        raise _unknown(name)
    return load()


def create_backend(context: ModelContext) -> Backend:
    """An unloaded backend for one model version (call ``await backend.load()`` next)."""
    return backend_factory(backend_name(context.config))(context)
