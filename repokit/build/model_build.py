"""Compile one model directory (already copied into a staging directory) in place.

ONNX models get their config completed from the model (Triton's onnxruntime autocomplete) and
checked against every loaded version; with ``--profile`` (or ``--to tensorrt``) they get
profiles and warmup samples; with ``--to tensorrt`` and a usable TensorRT, each version's
model.onnx becomes model.plan and the config turns into a tensorrt_plan config listing the
profiles in ``instance_group.profile``. tensorrt_plan models get profiles from their config (and
warmup). Ensembles and other backends are copied unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repokit.build.engine import (
    EngineLoaders,
    EngineRecipe,
    TensorRTStatus,
    build_engine,
    profiles_for_plan,
    read_engine_profiles,
    skipped_message,
    verify_engine,
)
from repokit.build.profiles import (
    PROFILES_FILE,
    EngineInput,
    OptimizationProfile,
    ProfileError,
    ProfileRequest,
    ShapeSpec,
    check_profiles,
    derive_profiles,
    engine_inputs,
    profiles_document,
)
from repokit.build.report import BuildOptions, ModelBuildReport
from repokit.build.sample_data import SampleDataError, first_request_values, sample_shapes
from repokit.build.warmup import plan_warmup, write_warmup
from repokit.build.warmup_check import WarmupRunner, WarmupUnchecked, check_warmup
from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.onnx_io import (
    OnnxModelError,
    OnnxSignature,
    autocomplete_onnx_config,
    check_config_against_signature,
    read_onnx_signature,
)
from repokit.config.parse import ConfigParseError, parse_file, to_text
from repokit.config.report import ModelReport
from repokit.protocol.generated import model_config_pb2 as mc

COMPILED_HEADER = "# Compiled by `repokit build`; edit the source repository and rebuild instead.\n"


@dataclass
class BuildEnvironment:
    """What every model build shares: options, TensorRT status, the sample data document."""

    options: BuildOptions
    tensorrt: TensorRTStatus
    trt_module: Any  # the imported tensorrt module when available
    sample_document: dict[str, Any] | None
    sample_source: str
    timing_cache: Path
    engine_runner: Callable[[EngineLoaders], None]
    trt_runner_factory: Callable[[Path, int], Any] | None = None
    warmup_runner: WarmupRunner = check_warmup


class ModelBuildFailed(Exception):
    def __init__(self, rule: str, message: str, path: str = "") -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message
        self.path = path


def _written_config(model: ModelReport, directory: Path) -> mc.ModelConfig:
    config = mc.ModelConfig()
    if model.config_file is not None:
        try:
            config = parse_file(directory / model.config_file.name)
        except (ConfigParseError, OSError) as exc:  # validate reported it already
            raise ModelBuildFailed("config-parse-error", str(exc)) from None
    # name/platform/backend/filename as the validator resolved them
    resolved = model.config
    if resolved is not None:
        config.name = resolved.name or model.name
        config.platform = resolved.platform
        config.backend = resolved.backend
        if resolved.default_model_filename:
            config.default_model_filename = resolved.default_model_filename
    if not config.name:
        config.name = model.name
    return config


def _model_file(config: mc.ModelConfig, directory: Path, version: int, default: str) -> Path:
    return directory / str(version) / (config.default_model_filename or default)


def _request_for(inputs: Sequence[EngineInput], env: BuildEnvironment) -> ProfileRequest:
    names = {t.name for t in inputs}
    shapes: dict[str, ShapeSpec] = {s.name: s for s in env.options.shapes if s.name in names}
    seen: dict[str, list[tuple[int, ...]]] = {}
    document = env.sample_document
    if document is not None:
        steps = [s for i in document["data"] for s in (i if isinstance(i, list) else [i])]
        used = {name for step in steps for name in step}
        if used and used <= names:
            try:
                seen = sample_shapes(document, inputs, env.sample_source).shapes
            except SampleDataError as exc:
                raise ModelBuildFailed("sample-data-invalid", str(exc)) from None
    return ProfileRequest(
        count=env.options.profiles,
        split_at_preferred=env.options.split_at_preferred,
        shapes=shapes,
        sample_shapes=seen,
    )


def _preferred(written: mc.ModelConfig) -> list[int]:
    if written.HasField("dynamic_batching"):
        return list(written.dynamic_batching.preferred_batch_size)
    return []


def _derive(
    config: mc.ModelConfig,
    signature: OnnxSignature | None,
    env: BuildEnvironment,
    preferred: list[int],
) -> tuple[list[EngineInput], list[OptimizationProfile]]:
    inputs = engine_inputs(config, signature)
    try:
        profiles = derive_profiles(config, inputs, _request_for(inputs, env), preferred)
    except ProfileError as exc:
        raise ModelBuildFailed("profile-underspecified", str(exc)) from None
    problems = check_profiles(profiles, inputs, config.max_batch_size)
    if problems:
        raise ModelBuildFailed("profile-coverage", "; ".join(problems))
    return inputs, profiles


def _complete_onnx(
    config: mc.ModelConfig, model: ModelReport, directory: Path, env: BuildEnvironment,
    report: ModelBuildReport,
) -> OnnxSignature:  # fmt: skip
    versions = sorted(model.versions)
    if not versions:
        raise ModelBuildFailed("no-version-available", "no version to build")
    try:
        signatures = {
            v: read_onnx_signature(_model_file(config, directory, v, "model.onnx"))
            for v in versions
        }
    except OnnxModelError as exc:
        raise ModelBuildFailed("onnx-model-unreadable", str(exc)) from None
    latest = signatures[versions[-1]]
    filled, failure = autocomplete_onnx_config(config, latest, env.options.default_max_batch_size)
    if failure:
        raise ModelBuildFailed("onnx-autofill-failed", failure, "max_batch_size")
    report.completed = filled
    for version, signature in signatures.items():
        for found in check_config_against_signature(config, signature, model.name, "config.pbtxt"):
            report.diagnostics.append(
                Diagnostic(found.rule, found.severity, found.model,
                           f"version {version}: {found.message}", found.file, found.path)
            )  # fmt: skip
    if any(d.is_error for d in report.diagnostics):
        raise ModelBuildFailed("onnx-config-contradiction", "the config contradicts the model")
    return latest


def _add_warmup(
    config: mc.ModelConfig,
    directory: Path,
    profiles: list[OptimizationProfile],
    inputs: list[EngineInput],
    env: BuildEnvironment,
    report: ModelBuildReport,
) -> None:
    if config.model_warmup:
        report.notes.append("the config already has model_warmup; kept as written")
        return
    if config.HasField("sequence_batching"):
        report.notes.append("no warmup generated for a sequence model (needs control inputs)")
        return
    given = first_request_values(env.sample_document) if env.sample_document else None
    try:
        plans = plan_warmup(profiles, inputs, config.max_batch_size)
        files = write_warmup(
            config, directory, plans, inputs, env.options.warmup_data, env.options.seed, given
        )
    except ValueError as exc:
        report.notes.append(f"no warmup generated: {exc}")
        return
    report.warmup = [f.to_dict() for f in files]


def _run_warmup(
    config: mc.ModelConfig,
    model: ModelReport,
    directory: Path,
    env: BuildEnvironment,
    report: ModelBuildReport,
) -> None:
    """Every sample written must run through the model, or the model fails here (the server
    would refuse to load it)."""
    if not report.warmup:
        return
    if (config.backend or "") == "tensorrt" and not env.tensorrt.available:
        report.notes.append(
            "the warmup samples were not run: TensorRT is not available "
            f"({env.tensorrt.reason or 'not installed'})"
        )
        return
    try:
        failure = env.warmup_runner(config, directory, model.versions)
    except WarmupUnchecked as exc:
        report.notes.append(f"the warmup samples were not run at build time: {exc}")
        return
    if failure is None:
        return
    hint = (
        "give inputs the model accepts with --sample-data FILE (perf_analyzer input-data JSON)"
        if env.sample_document is None
        else f"the values from {env.sample_source} do not run either"
    )
    raise ModelBuildFailed("warmup-failed", f"a warmup sample does not run: {failure}; {hint}")


def _to_tensorrt(
    config: mc.ModelConfig,
    model: ModelReport,
    directory: Path,
    profiles: list[OptimizationProfile],
    env: BuildEnvironment,
    report: ModelBuildReport,
) -> bool:
    """Build model.plan for every loaded version; False when the model stays ONNX."""
    engine = report.engine
    engine.requested = True
    engine.workspace_mb = env.options.workspace_mb
    engine.precision = "fp16" if env.options.fp16 else "fp32"
    engine.tensorrt_version = env.tensorrt.version
    if not env.tensorrt.available:
        engine.skipped_reason = skipped_message(env.tensorrt)
        if env.options.engine == "require":
            raise ModelBuildFailed(
                "engine-unavailable", f"--engine require: {engine.skipped_reason}"
            )
        report.notes.append(engine.skipped_reason)
        return False
    data_types = {i.name: int(i.data_type) for i in config.input}
    for version in sorted(model.versions):
        onnx_path = _model_file(config, directory, version, "model.onnx")
        recipe = EngineRecipe(
            onnx_path=onnx_path,
            plan_path=directory / str(version) / "model.plan",
            timing_cache=env.timing_cache,
            profiles=tuple(profiles),
            workspace_bytes=env.options.workspace_mb << 20,
            fp16=env.options.fp16,
        )
        try:
            result = build_engine(recipe, env.trt_module, env.tensorrt.version, env.engine_runner)
        except RuntimeError as exc:
            raise ModelBuildFailed("engine-build-failed", f"version {version}: {exc}") from None
        report.notes.extend(result.notes)
        engine.plan_files.append(f"{version}/model.plan")
        engine.plan_sha256.append("sha256:" + result.plan_sha256)
        engine.plan_bytes += result.plan_bytes
        if env.options.verify:
            factory = env.trt_runner_factory
            outcome = (
                verify_engine(recipe, data_types)
                if factory is None
                else verify_engine(recipe, data_types, factory)
            )
            engine.verified = outcome.passed if engine.verified in (None, True) else False
            engine.verify_detail = outcome.detail
            if not outcome.passed:
                raise ModelBuildFailed(
                    "engine-verify-failed", f"version {version}: {outcome.detail}"
                )
        onnx_path.unlink()
    engine.built = True
    engine.timing_cache = env.timing_cache.name
    config.platform = "tensorrt_plan"
    config.backend = "tensorrt"
    config.default_model_filename = "model.plan"
    for parameter in ("intra_op_thread_count", "inter_op_thread_count"):
        if parameter in config.parameters:
            del config.parameters[parameter]
    return True


def _engine_profiles(
    config: mc.ModelConfig,
    model: ModelReport,
    directory: Path,
    env: BuildEnvironment,
    report: ModelBuildReport,
    derived: list[OptimizationProfile],
) -> list[OptimizationProfile]:
    """A plan's own profiles when TensorRT can read them, else the ones derived from the
    config (and a note saying so)."""
    if not env.tensorrt.available or not model.versions:
        report.notes.append(
            "profiles derived from the config; the engine's own profiles were not read"
            f" ({env.tensorrt.reason or 'TensorRT is not available'})"
        )
        return derived
    plan = _model_file(config, directory, max(model.versions), "model.plan")
    try:
        profiles = read_engine_profiles(plan, env.trt_module)
    except Exception as exc:
        report.notes.append(f"the engine's profiles could not be read ({exc}); derived instead")
        return derived
    report.notes.append(f"{len(profiles)} profile(s) read from {plan.name}")
    report.profiles = [p.to_dict() for p in profiles]
    return profiles


def _list_profiles(config: mc.ModelConfig, profiles: list[OptimizationProfile]) -> None:
    if not config.instance_group:
        config.instance_group.add()
    for group in config.instance_group:
        if not group.profile:
            group.profile.extend(profiles_for_plan(profiles))


def compile_model(model: ModelReport, directory: Path, env: BuildEnvironment) -> ModelBuildReport:
    """Compile the staged copy at ``directory``; never raises for model problems."""
    report = ModelBuildReport(model.name, "built")
    try:
        _compile(model, directory, env, report)
    except ModelBuildFailed as exc:
        report.status = "failed"
        report.reason = exc.message
        if not any(d.is_error for d in report.diagnostics):
            report.diagnostics.append(
                Diagnostic(
                    exc.rule, Severity.ERROR, model.name, exc.message, "config.pbtxt", exc.path
                )
            )
    return report


def _compile(
    model: ModelReport, directory: Path, env: BuildEnvironment, report: ModelBuildReport
) -> None:
    config = _written_config(model, directory)
    report.backend = config.backend or config.platform
    report.target = report.backend
    if config.backend == "python" and env.options.profile:
        _compile_python(config, model, directory, env, report)
        return
    if config.platform == "ensemble" or config.backend not in ("onnxruntime", "tensorrt"):
        report.status = "copied"
        report.reason = (
            "ensembles are copied unchanged (no warmup)"
            if config.platform == "ensemble"
            else f"nothing to compile for backend '{config.backend}'; copied unchanged"
        )
        return
    preferred = _preferred(config)
    options = env.options
    wants_profiles = options.profile or options.to == "tensorrt"
    signature: OnnxSignature | None = None
    if config.backend == "onnxruntime":
        signature = _complete_onnx(config, model, directory, env, report)
    if not wants_profiles:
        _write_config(config, directory)
        return
    trt_target = config.backend == "tensorrt" or options.to == "tensorrt"
    try:
        inputs, profiles = _derive(config, signature, env, preferred)
    except ModelBuildFailed as exc:
        if trt_target:
            raise
        # ONNX Runtime needs no profiles; they only shape the warmup samples
        report.notes.append(f"no profiles or warmup samples: {exc.message}")
        _write_config(config, directory)
        return
    report.profiles = [p.to_dict() for p in profiles]
    to_trt = trt_target
    if config.backend == "onnxruntime" and options.to == "tensorrt":
        to_trt = _to_tensorrt(config, model, directory, profiles, env, report)
    elif config.backend == "tensorrt":
        profiles = _engine_profiles(config, model, directory, env, report, profiles)
    report.target = "tensorrt" if to_trt else "onnxruntime"
    if options.to == "tensorrt" or to_trt:
        document = profiles_document(model.name, config.max_batch_size, profiles, report.target)
        (directory / PROFILES_FILE).write_text(json.dumps(document, indent=2) + "\n")
    if to_trt:
        _list_profiles(config, profiles)
    _add_warmup(config, directory, profiles, inputs, env, report)
    _write_config(config, directory)
    _run_warmup(config, model, directory, env, report)


def _compile_python(
    config: mc.ModelConfig,
    model: ModelReport,
    directory: Path,
    env: BuildEnvironment,
    report: ModelBuildReport,
) -> None:
    """A python model gets warmup samples shaped by its config (no profiles: there is no
    engine), run in its instance process."""
    try:
        inputs, profiles = _derive(config, None, env, _preferred(config))
    except ModelBuildFailed as exc:
        report.status = "copied"
        report.reason = f"copied unchanged; no warmup samples: {exc.message}"
        return
    _add_warmup(config, directory, profiles, inputs, env, report)
    if not report.warmup:
        report.status = "copied"
        report.reason = "copied unchanged"
        return
    _write_config(config, directory)
    _run_warmup(config, model, directory, env, report)


def _write_config(config: mc.ModelConfig, directory: Path) -> None:
    (directory / "config.pbtxt").write_text(COMPILED_HEADER + to_text(config), encoding="utf-8")
