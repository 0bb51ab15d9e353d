"""A serving version's instances updated in place, as Triton 2.51 updates them.

When a model is loaded again (the load API, or a poll that sees it changed) and a serving
version's files did not change and its config differs at most in ``instance_group`` (and
``version_policy``), Triton does not load the version again: it updates its instances
(``ModelLifeCycle::UpdateModelConfig`` -> ``TritonModel::UpdateInstanceGroup``). Requests in
flight and queued keep running and none is refused meanwhile.

Which instances stay (Triton's ``PrepareInstances``): an instance is identified by its
*signature*, its group's settings without ``name`` and ``count``, and its device. Walking the
new config's instances in order, each takes a serving instance of the same signature when one
is left (the last of them): that instance keeps its process, its state and its name. The other
new instances are created (``initialize``, warmup) and come after the kept ones in the
version's instance list, as in Triton's (which lists them as their creation finishes, so
which of several new instances a later update keeps is not certain there). Serving
instances left over are removed: they get no new work, finish what they were given (an
instance of a sequence batcher keeps the sequences it holds until they end), then run
``finalize``.

An ensemble is not updated (it is loaded again), nor a backend or scheduler that cannot add
and remove instances, nor a version whose instances have ``--rate-limit`` resources: those load
again as before (see the README's differences).
"""

from __future__ import annotations

import dataclasses
import logging

from repokit.core.server_log import VERBOSE_DETAIL
from repokit.protocol.generated import model_config_pb2 as mc

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class InstanceSpec:
    """One instance as a config lays it out."""

    name: str  # <group name>_<i>, as Triton names it
    signature: bytes  # the group without name and count, and the device
    passive: bool

    @property
    def device_id(self) -> str:
        return self.signature.split(b":", 1)[0].decode()


def instance_specs(config: mc.ModelConfig) -> list[InstanceSpec]:
    """The instances of a normalised config in Triton's order (group by group, ``count``
    instances, each on every GPU of a KIND_GPU group)."""
    specs: list[InstanceSpec] = []
    for group in config.instance_group:
        key = mc.ModelInstanceGroup()
        key.CopyFrom(group)
        key.ClearField("name")
        key.count = 1
        settings = key.SerializeToString(deterministic=True)
        gpu = group.kind == mc.ModelInstanceGroup.KIND_GPU and group.gpus
        devices = list(group.gpus) if gpu else [0]
        for index in range(max(group.count, 1)):
            for device in devices:
                specs.append(
                    InstanceSpec(
                        f"{group.name}_{index}", f"{device}:".encode() + settings, group.passive
                    )
                )
    return specs


@dataclasses.dataclass
class InstancePlan:
    """What an update does: the new layout (each an existing instance's slot and spec, or
    None and the spec of an instance to create) and the instances it removes."""

    layout: list[tuple[int | None, InstanceSpec]]
    removed: list[tuple[int, InstanceSpec]]

    @property
    def created(self) -> list[InstanceSpec]:
        return [spec for slot, spec in self.layout if slot is None]

    @property
    def changes(self) -> bool:
        return bool(self.removed) or any(slot is None for slot, _ in self.layout)


def log_created(specs: list[InstanceSpec]) -> None:
    """Triton's --log-verbose 2 line of each instance it created."""
    if log.isEnabledFor(VERBOSE_DETAIL):
        for spec in specs:
            log.log(
                VERBOSE_DETAIL,
                "Created model instance named '%s' with device id '%s'",
                spec.name,
                spec.device_id,
            )


def log_reused(specs: list[InstanceSpec]) -> None:
    """Triton's --log-verbose 2 line of each serving instance an update keeps."""
    if log.isEnabledFor(VERBOSE_DETAIL):
        for spec in specs:
            log.log(
                VERBOSE_DETAIL,
                "Re-using model instance named '%s' with device id '%s'",
                spec.name,
                spec.device_id,
            )


def plan_update(
    serving: list[tuple[int, InstanceSpec]], wanted: list[InstanceSpec]
) -> InstancePlan:
    """Match the wanted instances to the serving ones by signature (the last serving one of
    a signature first, as Triton takes them)."""
    pools: dict[bytes, list[tuple[int, InstanceSpec]]] = {}
    for slot, spec in serving:
        pools.setdefault(spec.signature, []).append((slot, spec))
    layout: list[tuple[int | None, InstanceSpec]] = []
    for spec in wanted:
        pool = pools.get(spec.signature)
        if pool:
            layout.append(pool.pop())
        else:
            layout.append((None, spec))
    removed = [item for pool in pools.values() for item in pool]
    return InstancePlan(layout, removed)


def without_instances(config: mc.ModelConfig) -> mc.ModelConfig:
    """The config without what an in-place update may change (Triton's
    ``ConfigChangeRequiresReload`` ignores ``instance_group`` and ``version_policy``)."""
    copy = mc.ModelConfig()
    copy.CopyFrom(config)
    copy.ClearField("instance_group")
    copy.ClearField("version_policy")
    return copy


def with_groups_of(served: mc.ModelConfig, source: mc.ModelConfig) -> mc.ModelConfig:
    """The served config with ``source``'s instance groups and version policy."""
    copy = mc.ModelConfig()
    copy.CopyFrom(served)
    copy.ClearField("instance_group")
    copy.instance_group.extend(source.instance_group)
    copy.ClearField("version_policy")
    if source.HasField("version_policy"):
        copy.version_policy.CopyFrom(source.version_policy)
    return copy
