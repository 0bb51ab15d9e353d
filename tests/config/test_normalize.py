"""NormalizeModelConfig + NormalizeInstanceGroup defaults (what GET .../config shows)."""

from __future__ import annotations

from repokit.config.normalize import normalize_instance_groups, normalize_model_config
from repokit.config.parse import parse_text
from repokit.protocol.generated import model_config_pb2 as mc


def test_defaults() -> None:
    dynamic = parse_text('name: "m" max_batch_size: 4 dynamic_batching {}')
    normalize_model_config(dynamic)
    assert list(dynamic.dynamic_batching.preferred_batch_size) == [4]
    config = parse_text(
        'name: "m" backend: "python" max_batch_size: 4 sequence_batching { oldest {} }'
    )
    normalize_model_config(config)
    assert config.version_policy.latest.num_versions == 1
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [4]
    assert config.optimization.input_pinned_memory.enable
    assert config.optimization.output_pinned_memory.enable


def test_explicit_values_are_kept() -> None:
    config = parse_text(
        'name: "m" optimization { input_pinned_memory { enable: false } } version_policy { all {} }'
    )
    normalize_model_config(config)
    assert not config.optimization.input_pinned_memory.enable
    assert config.version_policy.WhichOneof("policy_choice") == "all"


def test_ensemble_gets_no_pinned_memory_or_groups() -> None:
    config = parse_text('name: "e" platform: "ensemble" ensemble_scheduling {}')
    normalize_model_config(config)
    normalize_instance_groups(config)
    assert not config.HasField("optimization")
    assert not config.instance_group


def test_instance_groups_cpu_server() -> None:
    config = parse_text(
        'name: "m" backend: "onnxruntime" instance_group [ { count: 0 }, '
        '{ name: "g" kind: KIND_MODEL } ]'
    )
    normalize_instance_groups(config)
    first, second = config.instance_group
    assert (first.name, first.kind, first.count) == ("m_0", mc.ModelInstanceGroup.KIND_CPU, 2)
    assert (second.name, second.count) == ("g", 1)


def test_default_group_and_gpu_server() -> None:
    config = parse_text('name: "m" backend: "python"')
    normalize_instance_groups(config, gpus=(0, 1))
    [group] = config.instance_group
    assert (group.name, group.kind, group.count) == ("m", mc.ModelInstanceGroup.KIND_GPU, 1)
    assert list(group.gpus) == [0, 1]
