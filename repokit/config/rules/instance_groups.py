"""Core ``NormalizeInstanceGroup`` + ``ValidateInstanceGroup`` (§4.5), run once the backend is
found. ``--target cpu`` behaves as Triton on a machine without GPUs (KIND_AUTO becomes KIND_CPU,
KIND_GPU fails); ``--target gpu`` assumes the listed GPU ids exist, unless ``--gpus N`` says the
server has N (ids 0..N-1)."""

from __future__ import annotations

import re

from repokit.config.rules.context import RuleContext
from repokit.protocol.generated import model_config_pb2 as mc

Group = mc.ModelInstanceGroup
_INTEGER = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+")
# tritonserver's default --min-supported-compute-capability, as its message prints a double
MIN_COMPUTE_CAPABILITY = "6.000000"


def check_instance_groups(ctx: RuleContext) -> None:
    config = ctx.config
    if config.HasField("ensemble_scheduling"):
        return  # the ensemble rules own this case
    on_gpu = ctx.options.target == "gpu"
    for i, group in enumerate(config.instance_group):
        path = f"instance_group[{i}]"
        label = group.name or f"{ctx.name}_{i}"
        where = f"instance group {label} of model {ctx.name}"
        kind = group.kind
        if kind == Group.KIND_AUTO:
            usable = on_gpu and all(g >= 0 for g in group.gpus)
            kind = Group.KIND_GPU if usable else Group.KIND_CPU
            if kind == Group.KIND_CPU and group.gpus:
                ctx.report(
                    "instance-group-cpu-gpus",
                    f"{where} has kind KIND_CPU but specifies one or more GPUs (kind is not "
                    "set, so it becomes KIND_CPU on a server without those GPUs); remove "
                    "'gpus' or set kind: KIND_GPU for a GPU server",
                    path=f"{path}.gpus",
                )
        elif kind == Group.KIND_MODEL and group.gpus:
            ctx.report(
                "instance-group-model-gpus",
                f"{where} has kind KIND_MODEL but specifies one or more GPUs",
                path=f"{path}.gpus",
            )
        elif kind == Group.KIND_CPU and group.gpus:
            ctx.report(
                "instance-group-cpu-gpus",
                f"{where} has kind KIND_CPU but specifies one or more GPUs",
                path=f"{path}.gpus",
            )
        elif kind == Group.KIND_GPU:
            if not on_gpu:
                ctx.report(
                    "instance-group-gpu-unavailable",
                    f"{where} has kind KIND_GPU but no GPUs are available (validating "
                    "for a CPU-only server; use kind: KIND_CPU, or --target gpu)",
                    path=f"{path}.kind",
                )
            else:
                count = ctx.options.gpus
                for g, gpu in enumerate(group.gpus):
                    if gpu < 0 or 0 <= count <= gpu:
                        ctx.report(
                            "instance-group-gpu-invalid",
                            f"{where} specifies invalid or unsupported gpu id {gpu}. "
                            "GPUs with at least the minimum required CUDA compute "
                            f"compatibility of {MIN_COMPUTE_CAPABILITY} are: " + _gpu_list(count),
                            path=f"{path}.gpus[{g}]",
                        )
                        break  # Triton stops at the first
        _check_profiles(ctx, path, where, group)


def _gpu_list(count: int) -> str:
    """Triton's list of the server's GPUs (``--gpus N``), or what says it is not known."""
    if count < 0:
        return "(not known without a server: give --gpus N)"
    return ", ".join(str(i) for i in range(count))


def _check_profiles(ctx: RuleContext, path: str, where: str, group: mc.ModelInstanceGroup) -> None:
    if not group.profile:
        return
    platform = ctx.config.platform
    if platform != "tensorrt_plan":
        ctx.report(
            "instance-group-profile-platform",
            f"{where} and platform {platform}specifies profile field which is only "
            "supported for TensorRT models",
            path=f"{path}.profile",
        )
        return
    for p, profile in enumerate(group.profile):
        match = _INTEGER.match(profile)
        if not profile:
            problem = "profile name must not be empty"
        elif match is None:
            problem = f"unable to parse '{profile}'"
        elif int(match.group(0)) < 0:
            problem = (
                f"{where} and platform {platform} specifies invalid profile {profile}. "
                "The field should contain the string representation of a non-negative "
                "integer."
            )
        else:
            continue
        ctx.report("instance-group-profile-invalid", problem, path=f"{path}.profile[{p}]")
