"""Triton's config normalisation: the defaults that show up in ``GET /v2/models/<m>/config``.

- ``normalize_model_config`` = core ``NormalizeModelConfig`` (runs for every model, strict or not);
- ``normalize_instance_groups`` = core ``NormalizeInstanceGroup`` (runs once the backend is
  known; never for ensembles). ``gpus`` lists the GPU ids of the target server: () for a
  CPU-only server, in which case KIND_AUTO becomes KIND_CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from repokit.protocol.generated import model_config_pb2 as mc

SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000
DEFAULT_CPU_INSTANCE_COUNT = 2  # for the tensorflow and onnxruntime backends
_TWO_CPU_INSTANCE_BACKENDS = frozenset({"tensorflow", "onnxruntime"})

Kind = mc.ModelInstanceGroup.Kind


def normalize_model_config(config: mc.ModelConfig) -> None:
    """Fill version_policy, preferred batch sizes, the sequence idle time and pinned memory
    (an ensemble's transaction policy instead)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        if not batching.preferred_batch_size and config.max_batch_size > 0:
            batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        if (
            sequence.HasField("oldest")
            and not sequence.oldest.preferred_batch_size
            and config.max_batch_size > 0
        ):
            sequence.oldest.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("ensemble_scheduling"):
        # Triton's served ensemble configs carry an empty model_transaction_policy (its
        # L0_model_config expected files and a running 2.51 agree)
        config.model_transaction_policy.SetInParent()
    else:
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True


def default_instance_count(kind: int, backend: str) -> int:
    if kind == mc.ModelInstanceGroup.KIND_CPU and backend in _TWO_CPU_INSTANCE_BACKENDS:
        return DEFAULT_CPU_INSTANCE_COUNT
    return 1


def normalize_instance_groups(config: mc.ModelConfig, gpus: Sequence[int] = ()) -> None:
    """Name, kind, count and gpus of every instance group (one default group if none)."""
    if config.HasField("ensemble_scheduling"):
        return
    supported = sorted(set(gpus))
    if not config.instance_group:
        config.instance_group.add().name = config.name
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            if not supported or any(g not in supported for g in group.gpus):
                group.kind = mc.ModelInstanceGroup.KIND_CPU
            else:
                group.kind = mc.ModelInstanceGroup.KIND_GPU
        if group.count < 1:
            group.count = default_instance_count(group.kind, config.backend)
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(supported)


def normalized_copy(config: mc.ModelConfig, gpus: Sequence[int] = ()) -> mc.ModelConfig:
    """A normalised copy of an already backend-resolved config (model + instance groups)."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    normalize_model_config(out)
    normalize_instance_groups(out, gpus)
    return out
