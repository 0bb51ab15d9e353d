"""Server-side completion and load checks of a model config (§4.1 steps 3-6, §4.5, §4.6, §5.3).

``normalize_for_serving`` fills what Triton fills before ``/config`` shows a config: name,
backend/platform/default filename from the files, version policy, pinned-memory flags,
preferred batch sizes, the sequence idle default and instance groups (CPU-only server: KIND_AUTO
becomes KIND_CPU). ``validate_for_serving`` returns the first load-time error as Triton words
it, or "" when the model may load; the complete rule set lives in ``repokit.config``.
"""

from __future__ import annotations

from pathlib import Path

from repokit.protocol.generated import model_config_pb2 as mc

_PLATFORM_BACKEND = {
    "onnxruntime_onnx": ("onnxruntime", "model.onnx"),
    "tensorrt_plan": ("tensorrt", "model.plan"),
    "pytorch_libtorch": ("pytorch", "model.pt"),
    "tensorflow_savedmodel": ("tensorflow", "model.savedmodel"),
    "tensorflow_graphdef": ("tensorflow", "model.graphdef"),
}
_BACKEND_PLATFORM = {
    "onnxruntime": "onnxruntime_onnx",
    "tensorrt": "tensorrt_plan",
    "pytorch": "pytorch_libtorch",
}
_DEFAULT_FILENAME = {
    "python": "model.py",
    "onnxruntime": "model.onnx",
    "tensorrt": "model.plan",
    "pytorch": "model.pt",
}
_FILE_BACKEND = (("model.plan", "tensorrt"), ("model.onnx", "onnxruntime"), ("model.py", "python"))
SEQUENCE_IDLE_DEFAULT_US = 1_000_000


def _autocomplete_backend(config: mc.ModelConfig, versions: dict[int, Path]) -> None:
    if config.platform == "ensemble":
        return
    if not config.backend and config.platform in _PLATFORM_BACKEND:
        config.backend = _PLATFORM_BACKEND[config.platform][0]
    if not config.backend and not config.platform:
        first = sorted(versions.values(), key=lambda p: p.name)[:1]
        for filename, backend in _FILE_BACKEND:
            given = config.default_model_filename == filename
            if given or (
                not config.default_model_filename and first and (first[0] / filename).exists()
            ):
                config.backend = backend
                break
    if config.backend in _BACKEND_PLATFORM and not config.platform:
        config.platform = _BACKEND_PLATFORM[config.backend]
    if not config.default_model_filename and config.backend in _DEFAULT_FILENAME:
        config.default_model_filename = _DEFAULT_FILENAME[config.backend]


def _normalize_instance_groups(config: mc.ModelConfig, name: str) -> None:
    if not config.instance_group:
        config.instance_group.add(name=name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            group.kind = mc.ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            two = group.kind == mc.ModelInstanceGroup.KIND_CPU and config.backend in (
                "onnxruntime",
                "tensorflow",
            )
            group.count = 2 if two else 1


def normalize_for_serving(
    config: mc.ModelConfig, name: str, directory: Path, versions: dict[int, Path]
) -> None:
    """Complete ``config`` in place as Triton's GetNormalizedModelConfig + instance groups."""
    del directory  # the files are looked up through ``versions``
    if not config.name:
        config.name = name
    _autocomplete_backend(config, versions)
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching"):
        dynamic = config.dynamic_batching
        if not dynamic.preferred_batch_size and config.max_batch_size > 0:
            dynamic.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        oldest = sequence.oldest if sequence.HasField("oldest") else None
        if oldest is not None and not oldest.preferred_batch_size and config.max_batch_size > 0:
            oldest.preferred_batch_size.append(config.max_batch_size)
    if config.platform != "ensemble":
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True
        _normalize_instance_groups(config, config.name)


def validate_for_serving(config: mc.ModelConfig, name: str, directory: Path) -> str:
    """The first reason Triton would refuse to load this config, or ""."""
    if config.name != name:
        return (
            f"unexpected directory name '{name}' for model '{config.name}', "
            "directory name must equal model name"
        )
    if config.platform == "ensemble":
        if config.backend:
            return (
                f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"
            )
        if not config.HasField("ensemble_scheduling"):
            return f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
    elif not config.backend:
        if config.platform:
            return f"unexpected platform type '{config.platform}' for {name}"
        return f"must specify 'platform' or 'backend' for '{name}'"
    if config.max_batch_size < 0:
        return f"'max_batch_size' must be non-negative value for {name}"
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            return (
                f"instance group {group.name} of model {name} has kind KIND_GPU but server "
                "does not support GPUs"
            )
    model_root = directory.resolve()
    for output in config.output:
        if output.label_filename:
            label = (directory / output.label_filename).resolve()
            if not label.is_relative_to(model_root):
                return (
                    f"label file path '{output.label_filename}' for output '{output.name}' in "
                    f"model '{name}' is outside model directory"
                )
    return ""
