"""``repokit lint``: advice beyond validity, one small function per rule.

Every rule returns Diagnostics with a ``lint-`` rule id, severity WARNING or INFO, and a message
of the form "<what is the case>; <why it matters>". Lint never adds errors: a repository Triton
loads stays loadable, and ``--fail-on warning`` is how a user makes advice fail a build.

Rules that are about what the user wrote (preferred batch sizes, queue delay) read the config as
written, because normalisation fills defaults (e.g. preferred sizes = [max_batch_size]) that the
user never chose; the others read the normalised config that validate produced.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.lint_rate_limiter import (
    RATE_LIMITER_LINT_RULES,
    global_conflict,
    needs_server_flag,
    resource_fields,
)
from repokit.config.parse import ConfigParseError, parse_file
from repokit.config.report import ModelReport, RepositoryReport, ValidateOptions
from repokit.protocol.generated import model_config_pb2 as mc

ENSEMBLE = "ensemble"
TENSORRT_PLATFORM = "tensorrt_plan"
MODEL_DIR_ENTRIES = {"config.pbtxt", "configs", "warmup", "initial_state"}
DOC_SUFFIXES = (".md", ".rst")


@dataclass(frozen=True)
class LintOptions:
    cores: int = 0  # CPU cores instance counts are compared with; 0 = os.cpu_count()

    def core_count(self) -> int:
        return self.cores or os.cpu_count() or 1


@dataclass(frozen=True)
class LintContext:
    report: RepositoryReport
    model: ModelReport
    config: mc.ModelConfig  # normalised (from validate)
    written: mc.ModelConfig  # as written in the config file (== config when there is no file)
    options: LintOptions

    def advice(self, rule: str, severity: Severity, message: str, path: str = "") -> Diagnostic:
        return Diagnostic(rule, severity, self.model.name, message, self.file, path)

    @property
    def file(self) -> str:
        path = self.model.config_file or self.model.directory
        try:
            return str(Path(path).relative_to(self.report.root))
        except ValueError:
            return str(path)


Rule = Callable[[LintContext], list[Diagnostic]]


def _batching(config: mc.ModelConfig) -> str:
    return config.WhichOneof("scheduling_choice") or ""


def no_dynamic_batching(ctx: LintContext) -> list[Diagnostic]:
    config = ctx.config
    if config.max_batch_size <= 0 or config.platform == ENSEMBLE or _batching(config):
        return []
    return [
        ctx.advice(
            "lint-no-dynamic-batching",
            Severity.WARNING,
            f"max_batch_size is {config.max_batch_size} but there is no dynamic_batching; "
            "without a batcher Triton runs every request on its own, so the model never sees "
            "a batch larger than one client sends (add `dynamic_batching { }`)",
            "dynamic_batching",
        )
    ]


def _preferred_sizes(config: mc.ModelConfig) -> Iterator[tuple[str, list[int]]]:
    if config.HasField("dynamic_batching"):
        yield "dynamic_batching", list(config.dynamic_batching.preferred_batch_size)
    if config.sequence_batching.HasField("oldest"):
        yield "sequence_batching.oldest", list(config.sequence_batching.oldest.preferred_batch_size)


def preferred_batch_sizes(ctx: LintContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    max_batch = ctx.config.max_batch_size
    for where, sizes in _preferred_sizes(ctx.written):
        path = f"{where}.preferred_batch_size"
        if sizes != sorted(sizes):
            out.append(
                ctx.advice(
                    "lint-preferred-batch-size-unsorted",
                    Severity.INFO,
                    f"preferred_batch_size {sizes} is not in increasing order; the batcher "
                    "treats them as a set, so sorting them makes the intent readable",
                    path,
                )
            )
        duplicates = sorted({s for s in sizes if sizes.count(s) > 1})
        if duplicates:
            out.append(
                ctx.advice(
                    "lint-preferred-batch-size-duplicate",
                    Severity.WARNING,
                    f"preferred_batch_size lists {duplicates} more than once; duplicates have "
                    "no effect and usually hide a typo",
                    path,
                )
            )
        above = [s for s in sizes if s > max_batch]
        if above and ctx.model.ok:
            out.append(
                ctx.advice(
                    "lint-preferred-batch-size-above-max",
                    Severity.WARNING,
                    f"preferred_batch_size {above} exceeds max_batch_size {max_batch}; a batch "
                    "can never reach that size",
                    path,
                )
            )
    return out


def preferred_sizes_without_delay(ctx: LintContext) -> list[Diagnostic]:
    batching = ctx.written.dynamic_batching
    if not ctx.written.HasField("dynamic_batching") or not batching.preferred_batch_size:
        return []
    if batching.max_queue_delay_microseconds != 0:
        return []
    return [
        ctx.advice(
            "lint-preferred-batch-size-zero-delay",
            Severity.WARNING,
            "preferred_batch_size is set but max_queue_delay_microseconds is 0; the batcher "
            "never waits for more requests, so preferred sizes are only reached under heavy "
            "load (set a small max_queue_delay_microseconds, e.g. 100)",
            "dynamic_batching.max_queue_delay_microseconds",
        )
    ]


def cpu_instances_above_cores(ctx: LintContext) -> list[Diagnostic]:
    if ctx.config.platform == ENSEMBLE:
        return []
    kinds = (mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_AUTO)
    total = sum(max(g.count, 1) for g in ctx.config.instance_group if g.kind in kinds)
    cores = ctx.options.core_count()
    if total <= cores:
        return []
    return [
        ctx.advice(
            "lint-cpu-instances-above-cores",
            Severity.WARNING,
            f"{total} CPU instances on {cores} cores; instances beyond the core count compete "
            "for the same cores and usually add latency without adding throughput",
            "instance_group",
        )
    ]


def _is_tensorrt(config: mc.ModelConfig) -> bool:
    return config.platform == TENSORRT_PLATFORM or config.backend == "tensorrt"


def tensorrt_advice(ctx: LintContext) -> list[Diagnostic]:
    config = ctx.config
    if not _is_tensorrt(config):
        return []
    out: list[Diagnostic] = []
    if len(config.model_warmup) == 0:
        out.append(
            ctx.advice(
                "lint-tensorrt-no-warmup",
                Severity.INFO,
                "TensorRT model without model_warmup; the first requests pay for lazy "
                "initialisation (kernel selection, memory allocation) unless it is warmed up",
                "model_warmup",
            )
        )
    dynamic = [t.name for t in config.input if any(d == -1 for d in t.dims)]
    has_profiles = any(len(g.profile) for g in config.instance_group)
    if dynamic and not has_profiles:
        out.append(
            ctx.advice(
                "lint-tensorrt-dynamic-dims-no-profiles",
                Severity.WARNING,
                f"inputs {dynamic} have variable dims but no instance_group selects an "
                "optimization profile; an engine built without profiles covering the shapes "
                "you send rejects them at inference time (`repokit build` can create profiles)",
                "instance_group",
            )
        )
    return out


def _label_count(path: Path) -> int | None:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except OSError:
        return None


def labels_vs_output_size(ctx: LintContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for index, output in enumerate(ctx.config.output):
        if not output.label_filename or any(d < 0 for d in output.dims):
            continue
        count = _label_count(ctx.model.directory / output.label_filename)
        size = 1
        for d in output.dims:
            size *= d
        if count is None or count == size:
            continue
        out.append(
            ctx.advice(
                "lint-labels-count-mismatch",
                Severity.WARNING,
                f"label file '{output.label_filename}' has {count} lines but output "
                f"'{output.name}' has {size} elements; classification results beyond the file "
                "get no label, and extra lines are never used",
                f"output[{index}].label_filename",
            )
        )
    return out


def pinned_ensemble_versions(ctx: LintContext) -> list[Diagnostic]:
    if ctx.config.platform != ENSEMBLE:
        return []
    out: list[Diagnostic] = []
    for index, step in enumerate(ctx.config.ensemble_scheduling.step):
        upstream = ctx.report.models.get(step.model_name)
        if step.model_version == -1 or upstream is None or upstream.config is None:
            continue
        if step.model_version not in upstream.versions:
            continue  # validate reports this as an error
        policy = upstream.config.version_policy.WhichOneof("policy_choice") or "latest"
        if policy != "latest":
            continue
        out.append(
            ctx.advice(
                "lint-ensemble-step-pinned-version",
                Severity.WARNING,
                f"step {index} pins '{step.model_name}' to version {step.model_version}, which "
                "its `latest` version policy loads only while it is among the newest; adding a "
                "version makes the ensemble fail to load (use model_version: -1, or a "
                "`specific` policy on the step model)",
                f"ensemble_scheduling.step[{index}].model_version",
            )
        )
    return out


def _sequence_step(
    report: RepositoryReport, config: mc.ModelConfig, seen: tuple[str, ...]
) -> str | None:
    """The first step model (nested ensembles followed) that uses the sequence batcher."""
    for step in config.ensemble_scheduling.step:
        upstream = report.models.get(step.model_name)
        step_config = upstream.config if upstream is not None else None
        if step_config is None or step.model_name in seen:
            continue
        if step_config.HasField("sequence_batching"):
            return step.model_name
        if step_config.platform == ENSEMBLE:
            nested = _sequence_step(report, step_config, (*seen, step.model_name))
            if nested is not None:
                return nested
    return None


def response_cache_over_sequence(ctx: LintContext) -> list[Diagnostic]:
    if ctx.config.platform != ENSEMBLE or not ctx.config.response_cache.enable:
        return []
    step_model = _sequence_step(ctx.report, ctx.config, (ctx.model.name,))
    if step_model is None:
        return []
    return [
        ctx.advice(
            "lint-response-cache-sequence-step",
            Severity.WARNING,
            f"the ensemble caches its responses but its step model '{step_model}' uses the "
            "sequence batcher; Triton 2.51 (and repokit) still answer repeated requests from "
            "the cache, so a hit skips that model and its sequence state is not updated",
            "response_cache.enable",
        )
    ]


def response_cache_needs_server_flag(ctx: LintContext) -> list[Diagnostic]:
    if not ctx.config.response_cache.enable:
        return []
    return [
        ctx.advice(
            "lint-response-cache-server-flag",
            Severity.INFO,
            "response_cache is enabled; it takes effect only on a server started with "
            "--cache-config local,size=<bytes> (without it every request runs the model)",
            "response_cache.enable",
        )
    ]


def _label_files(config: mc.ModelConfig) -> set[str]:
    return {o.label_filename for o in config.output if o.label_filename}


def unused_model_files(ctx: LintContext) -> list[Diagnostic]:
    directory = ctx.model.directory
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    loaded = {str(v) for v in ctx.model.versions}
    labels = _label_files(ctx.config)
    out: list[Diagnostic] = []
    for entry in entries:
        name = entry.name
        if name in MODEL_DIR_ENTRIES or name in labels or name.startswith("."):
            continue
        if entry.is_dir():
            numbered = name.isdigit() and not (len(name) > 1 and name.startswith("0"))
            if loaded and numbered and name not in loaded:
                out.append(
                    ctx.advice(
                        "lint-unused-model-files",
                        Severity.INFO,
                        f"version directory '{name}' is not loaded by the version policy; its "
                        "files ship with the repository but are never served",
                        "version_policy",
                    )
                )
        elif not name.upper().startswith(("README", "LICENSE")) and not name.endswith(DOC_SUFFIXES):
            out.append(
                ctx.advice(
                    "lint-unused-model-files",
                    Severity.INFO,
                    f"file '{name}' in the model directory is not used by Triton (only "
                    "config.pbtxt, label files and version directories are); model files belong "
                    "in a version directory",
                )
            )
    return out


# every lint rule id with a one-line summary (for SARIF and `repokit explain`)
LINT_RULES: dict[str, str] = {
    "lint-no-dynamic-batching": "a batching-capable model without dynamic batching",
    "lint-preferred-batch-size-unsorted": "preferred batch sizes not in increasing order",
    "lint-preferred-batch-size-duplicate": "a preferred batch size listed twice",
    "lint-preferred-batch-size-above-max": "a preferred batch size above max_batch_size",
    "lint-preferred-batch-size-zero-delay": "preferred batch sizes with a zero queue delay",
    "lint-cpu-instances-above-cores": "more CPU instances than cores",
    "lint-tensorrt-no-warmup": "a TensorRT model without warmup",
    "lint-tensorrt-dynamic-dims-no-profiles": "TensorRT dynamic dims without profiles",
    "lint-labels-count-mismatch": "label file lines differ from the output size",
    "lint-ensemble-step-pinned-version": "an ensemble step pinned under a latest policy",
    "lint-unused-model-files": "files or versions no loaded version uses",
    "lint-response-cache-sequence-step": "a cached ensemble over a sequence-batched model",
    "lint-response-cache-server-flag": "response_cache needs the server's --cache-config",
    **RATE_LIMITER_LINT_RULES,
}


RULES: tuple[Rule, ...] = (
    no_dynamic_batching,
    preferred_batch_sizes,
    preferred_sizes_without_delay,
    cpu_instances_above_cores,
    tensorrt_advice,
    labels_vs_output_size,
    pinned_ensemble_versions,
    unused_model_files,
    response_cache_over_sequence,
    response_cache_needs_server_flag,
    resource_fields,
    global_conflict,
    needs_server_flag,
)


def _written_config(model: ModelReport, config: mc.ModelConfig) -> mc.ModelConfig:
    if model.config_file is None or model.config_file.suffix != ".pbtxt":
        return config
    try:
        return parse_file(model.config_file)
    except (ConfigParseError, OSError):
        return config


def lint_report(report: RepositoryReport, options: LintOptions | None = None) -> None:
    """Append advice to every model of a validated report."""
    options = options or LintOptions()
    for model in report.models.values():
        if model.config is None:
            continue
        ctx = LintContext(
            report, model, model.config, _written_config(model, model.config), options
        )
        for rule in RULES:
            model.diagnostics.extend(rule(ctx))


def lint_repository(
    root: Path, options: ValidateOptions | None = None, lint_options: LintOptions | None = None
) -> RepositoryReport:
    """validate, then advice: the plain-data result of ``repokit lint``."""
    from repokit.config.positions import locate_findings
    from repokit.config.validate import validate_repository

    report = validate_repository(root, options or ValidateOptions())
    lint_report(report, lint_options)
    locate_findings(report)
    return report
