"""Lint rules for ``instance_group.rate_limiter``: what Triton 2.51 loads but does not do what
the config seems to say, and what fails a load only once ``--rate-limit execution_count`` is on.

Checked against Triton 2.51: a resource named twice in one group, a count of 0 and an empty
name all load; a resource both global and per device across the loaded models fails the second
model's load with ``Resource "R" is present as both global and device-specific resource in the
model configuration.`` when rate limiting is on, and loads when it is off. Negative counts and
priorities are not numbers the proto takes: validate reports them as parse errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.protocol.generated import model_config_pb2 as mc

if TYPE_CHECKING:  # lint.py imports these rules
    from repokit.config.lint import LintContext

ENSEMBLE = "ensemble"

RATE_LIMITER_LINT_RULES: dict[str, str] = {
    "lint-rate-limiter-duplicate-resource": "a rate_limiter resource named twice in a group",
    "lint-rate-limiter-zero-count": "a rate_limiter resource with count 0",
    "lint-rate-limiter-empty-name": "a rate_limiter resource without a name",
    "lint-rate-limiter-priority-only": "a rate_limiter priority without resources",
    "lint-rate-limiter-global-conflict": "a resource both global and per device",
    "lint-rate-limiter-server-flag": "rate_limiter needs the server's --rate-limit",
}


def _limited_groups(config: mc.ModelConfig) -> Iterator[tuple[int, mc.ModelInstanceGroup]]:
    if config.platform == ENSEMBLE:
        return
    for index, group in enumerate(config.instance_group):
        if group.HasField("rate_limiter"):
            yield index, group


def _kinds(config: mc.ModelConfig) -> dict[str, set[bool]]:
    """Resource name -> the ``global`` values it is declared with in this config."""
    kinds: dict[str, set[bool]] = {}
    for _, group in _limited_groups(config):
        for resource in group.rate_limiter.resources:
            kinds.setdefault(resource.name, set()).add(getattr(resource, "global"))
    return kinds


def resource_fields(ctx: LintContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for index, group in _limited_groups(ctx.config):
        limiter = group.rate_limiter
        where = f"instance_group[{index}].rate_limiter"
        label = f"instance group '{group.name}'" if group.name else f"instance_group[{index}]"
        seen: set[str] = set()
        for position, resource in enumerate(limiter.resources):
            path = f"{where}.resources[{position}]"
            if not resource.name:
                out.append(
                    ctx.advice(
                        "lint-rate-limiter-empty-name",
                        Severity.WARNING,
                        f"a resource of {label} has no name; Triton "
                        "loads it as a resource called '' that no --rate-limit-resource can "
                        "name",
                        path + ".name",
                    )
                )
            elif resource.name in seen:
                out.append(
                    ctx.advice(
                        "lint-rate-limiter-duplicate-resource",
                        Severity.WARNING,
                        f"resource '{resource.name}' is listed twice in {label}; Triton loads it "
                        "and counts only the last entry",
                        path + ".name",
                    )
                )
            seen.add(resource.name)
            if resource.count == 0:
                out.append(
                    ctx.advice(
                        "lint-rate-limiter-zero-count",
                        Severity.WARNING,
                        f"resource '{resource.name}' of {label} has count 0; an execution "
                        "takes none of it, so it limits nothing",
                        path + ".count",
                    )
                )
        if not limiter.resources and limiter.priority:
            out.append(
                ctx.advice(
                    "lint-rate-limiter-priority-only",
                    Severity.WARNING,
                    f"{label} sets a rate_limiter priority but no "
                    "resources; instances without resources are never limited, so the "
                    "priority has no effect",
                    where + ".priority",
                )
            )
    return out


def global_conflict(ctx: LintContext) -> list[Diagnostic]:
    mine = _kinds(ctx.config)
    out: list[Diagnostic] = []
    for name, kinds in sorted(mine.items()):
        if len(kinds) > 1:
            others = "this model"
        else:
            clashing = sorted(
                model.name
                for model in ctx.report.models.values()
                if model.name != ctx.model.name
                and model.config is not None
                and _kinds(model.config).get(name, kinds) - kinds
            )
            if not clashing:
                continue
            others = "model " + ", ".join(f"'{n}'" for n in clashing)
        out.append(
            ctx.advice(
                "lint-rate-limiter-global-conflict",
                Severity.WARNING,
                f"resource '{name}' is global in one instance group and per device in another "
                f"({others}); with --rate-limit execution_count Triton fails the load of the "
                f'second model with \'Resource "{name}" is present as both global and '
                "device-specific resource in the model configuration.'",
                "instance_group",
            )
        )
    return out


def needs_server_flag(ctx: LintContext) -> list[Diagnostic]:
    if not any(g.rate_limiter.resources for _, g in _limited_groups(ctx.config)):
        return []
    return [
        ctx.advice(
            "lint-rate-limiter-server-flag",
            Severity.INFO,
            "instance groups declare rate_limiter resources; they take effect only on a "
            "server started with --rate-limit execution_count (the default, off, ignores them)",
            "instance_group",
        )
    ]
