"""Platform, backend and model file names (core ``constants.h``, ``model_config_utils.cc``).

``autocomplete_backend_fields`` mirrors ``AutoCompleteBackendFields``, which Triton runs on every
config, even in strict mode. It inspects only the FIRST subdirectory of the model directory in
byte order (so ``10`` comes before ``2`` and a ``configs`` folder may be the one inspected).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from repokit.errors import ConfigError
from repokit.protocol.generated import model_config_pb2 as mc

ENSEMBLE_PLATFORM = "ensemble"
TENSORRT, ONNXRUNTIME, PYTORCH, TENSORFLOW = "tensorrt", "onnxruntime", "pytorch", "tensorflow"
OPENVINO, PYTHON = "openvino", "python"

# backend -> the platforms that pass the pair check; other backends accept any platform.
KNOWN_BACKEND_PLATFORMS: dict[str, frozenset[str]] = {
    TENSORRT: frozenset({"tensorrt_plan"}),
    ONNXRUNTIME: frozenset({"onnxruntime_onnx"}),
    PYTORCH: frozenset({"pytorch_libtorch"}),
    TENSORFLOW: frozenset({"tensorflow_graphdef", "tensorflow_savedmodel"}),
}
# Backends whose model can be loaded without a config.pbtxt when auto-complete is on.
AUTOCOMPLETE_BACKENDS = frozenset({TENSORRT, ONNXRUNTIME, OPENVINO, TENSORFLOW, PYTHON})


@dataclass(frozen=True)
class ModelArtifact:
    """What a backend opens in ``<model>/<version>/``."""

    filename: str
    kind: str  # "file", "dir" or "any" (onnx: a file, or a directory holding model.onnx)


def expected_artifact(config: mc.ModelConfig) -> ModelArtifact | None:
    """The model file the backend will open, or None when repokit cannot know (custom backends,
    ensembles)."""
    backend, platform = config.backend, config.platform
    name = config.default_model_filename
    if backend == PYTHON:
        return ModelArtifact(name or "model.py", "file")
    if backend == ONNXRUNTIME:
        return ModelArtifact(name or "model.onnx", "any")
    if backend == TENSORRT:
        return ModelArtifact(name or "model.plan", "file")
    if backend == PYTORCH:
        return ModelArtifact(name or "model.pt", "file")
    if backend == OPENVINO:
        return ModelArtifact(name or "model.xml", "file")
    if backend == TENSORFLOW:
        if platform == "tensorflow_savedmodel":
            return ModelArtifact(name or "model.savedmodel", "dir")
        return ModelArtifact(name or "model.graphdef", "file")
    return None


def _subdirs(model_dir: Path) -> list[str]:
    try:
        with os.scandir(model_dir) as entries:
            return sorted(e.name for e in entries if e.is_dir())
    except OSError:
        return []


def _contents(path: Path) -> dict[str, bool]:
    """name -> is_dir for the entries of ``path`` ({} if unreadable)."""
    try:
        with os.scandir(path) as entries:
            return {e.name: e.is_dir() for e in entries}
    except OSError:
        return {}


def autocomplete_backend_fields(
    config: mc.ModelConfig, model_name: str, model_dir: Path, subdirs: list[str] | None = None
) -> None:
    """Fill name/platform/backend/default_model_filename in place, as Triton does.

    Raises ConfigError with Triton's message when the backend cannot be determined.
    ``subdirs`` (the model directory's subdirectories) avoids a second scan when known.
    """
    dirs = sorted(subdirs) if subdirs is not None else _subdirs(model_dir)
    has_version = bool(dirs)
    content = _contents(model_dir / dirs[0]) if has_version else {}
    if not config.name:
        config.name = model_name
    filename = config.default_model_filename

    if not config.platform and config.backend in ("", TENSORFLOW):
        if filename == "model.savedmodel":
            config.platform = "tensorflow_savedmodel"
        elif filename == "model.graphdef":
            config.platform = "tensorflow_graphdef"
        elif not filename and has_version:
            if content.get("model.savedmodel") is True:
                config.platform = "tensorflow_savedmodel"
            if content.get("model.graphdef") is False:
                config.platform = "tensorflow_graphdef"
    if config.platform in ("tensorflow_savedmodel", "tensorflow_graphdef"):
        config.backend = config.backend or TENSORFLOW
        if not config.default_model_filename:
            saved = config.platform == "tensorflow_savedmodel"
            config.default_model_filename = "model.savedmodel" if saved else "model.graphdef"
        return

    nothing_given = not config.platform and not filename and has_version
    if not config.backend and (
        config.platform == "tensorrt_plan"
        or filename == "model.plan"
        or (nothing_given and content.get("model.plan") is False)
    ):
        config.backend = TENSORRT
    if config.backend == TENSORRT:
        config.platform = config.platform or "tensorrt_plan"
        config.default_model_filename = filename or "model.plan"
        return

    if not config.backend and (
        config.platform == "onnxruntime_onnx"
        or filename == "model.onnx"
        or (nothing_given and "model.onnx" in content)  # a file, or a directory
    ):
        config.backend = ONNXRUNTIME
    if config.backend == ONNXRUNTIME:
        config.platform = config.platform or "onnxruntime_onnx"
        config.default_model_filename = filename or "model.onnx"
        return

    if not config.backend and (
        filename == "model.xml" or (nothing_given and "model.xml" in content)
    ):
        config.backend = OPENVINO
    if config.backend == OPENVINO:
        config.default_model_filename = filename or "model.xml"
        return

    if not config.backend and (
        config.platform == "pytorch_libtorch"
        or filename == "model.pt"
        or (nothing_given and content.get("model.pt") is False)
    ):
        config.backend = PYTORCH
    if config.backend == PYTORCH:
        config.platform = config.platform or "pytorch_libtorch"
        if config.runtime != "model.py" and not filename:
            config.default_model_filename = "model.pt"
        return

    if not config.backend and (filename == "model.py" or (nothing_given and "model.py" in content)):
        config.backend = PYTHON
    if config.backend == PYTHON:
        config.default_model_filename = filename or "model.py"
        return

    if not config.backend and not config.platform and not filename:
        dot = model_name.find(".")
        if dot < 0:
            raise ConfigError(
                "Invalid model name: Could not determine backend for model "
                f"'{model_name}' with no backend in model configuration. Expected model name of "
                "the form 'model.<backend_name>'."
            )
        backend = model_name[dot + 1 :]
        config.backend = backend
        config.default_model_filename = f"model.{backend}"


def backend_platform_pair_ok(backend: str, platform: str) -> bool:
    """Triton's pair check: only the four known backends constrain the platform."""
    allowed = KNOWN_BACKEND_PLATFORMS.get(backend)
    return allowed is None or platform in allowed
