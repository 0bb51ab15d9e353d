"""``build_repository``: validate the source, compile every model that needs it into the
output repository, write ``repokit.lock.json`` and validate the result.

Each model is compiled in a staging directory next to the output (never inside a repository,
where Triton would take it for a model) and then swapped in, so an interrupted build never
leaves a half-written model. Models whose source, options and compiled directory match the lock
are skipped. With ``check`` nothing is written: the report lists what a build would redo.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repokit.build.engine import EngineLoaders, TensorRTStatus, probe_tensorrt, run_loaders
from repokit.build.manifest import (
    LOCK_FILE,
    TIMING_CACHE_FILE,
    LockError,
    file_hashes,
    hash_json,
    hash_tree,
    new_lock,
    read_lock,
    tool_versions,
    write_lock,
)
from repokit.build.model_build import BuildEnvironment, compile_model
from repokit.build.report import BuildOptions, BuildReport, ModelBuildReport
from repokit.build.sample_data import SampleDataError, load_sample_document
from repokit.build.staleness import option_changes, out_of_date_reason, tool_changes
from repokit.build.warmup_check import WarmupRunner, check_warmup
from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.report import ModelReport, RepositoryReport, ValidateOptions

Progress = Callable[[str, str], None]  # (model, stage)


class BuildUsageError(Exception):
    """Bad paths or options: nothing was built (exit code 2)."""


def _check_paths(source: Path, output: Path, options: BuildOptions) -> tuple[Path, Path]:
    if not source.exists():
        raise BuildUsageError(f"source repository '{source}' does not exist")
    if not source.is_dir():
        raise BuildUsageError(f"source repository '{source}' is not a directory")
    source = source.resolve()
    if options.in_place:
        return source, source
    output = output.resolve()
    if output == source:
        raise BuildUsageError("the output is the source repository; use --in-place to rewrite it")
    if output.is_relative_to(source):
        raise BuildUsageError(
            f"the output '{output}' is inside the source repository, where it would be loaded "
            "as a model; choose a directory outside it"
        )
    if source.is_relative_to(output):
        raise BuildUsageError(f"the output '{output}' contains the source repository")
    if output.exists() and not output.is_dir():
        raise BuildUsageError(f"the output '{output}' exists and is not a directory")
    return source, output


def _tensorrt(options: BuildOptions, status: TensorRTStatus | None) -> tuple[TensorRTStatus, Any]:
    needed = options.to == "tensorrt" or options.profile  # tensorrt_plan models read engines
    found = (
        status if status is not None else (probe_tensorrt() if needed else TensorRTStatus(False))
    )
    module = importlib.import_module("tensorrt") if found.available else None
    return found, module


def _validate(root: Path, models: tuple[str, ...]) -> RepositoryReport:
    from repokit.config.validate import validate_repository

    return validate_repository(root, ValidateOptions(models=models))


def _selected(report: RepositoryReport, options: BuildOptions) -> list[ModelReport]:
    wanted = set(options.models)
    return [report.models[n] for n in sorted(report.models) if not wanted or n in wanted]


def _entry(model: ModelBuildReport, options_hash: str, sources: dict[str, str]) -> dict[str, Any]:
    return {
        "source_hash": model.source_hash,
        "source_files": sources,
        "options_hash": options_hash,
        "output_hash": model.output_hash,
        "backend": model.backend,
        "target": model.target,
        "completed": model.completed,
        "profiles": model.profiles,
        "engine": model.engine.to_dict(),
        "warmup": model.warmup,
    }


def _from_lock(name: str, entry: dict[str, Any]) -> ModelBuildReport:
    report = ModelBuildReport(name, "up-to-date", entry["backend"], entry["target"])
    report.completed = list(entry.get("completed", []))
    report.profiles = list(entry["profiles"])
    report.warmup = list(entry["warmup"])
    report.source_hash = entry["source_hash"]
    report.output_hash = entry["output_hash"]
    engine = entry["engine"]
    for key, value in engine.items():
        if hasattr(report.engine, key):
            setattr(report.engine, key, value)
    return report


def _swap_in(staged: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(staged), str(target))


def build_repository(
    source: Path,
    output: Path,
    options: BuildOptions,
    *,
    tensorrt: TensorRTStatus | None = None,
    engine_runner: Callable[[EngineLoaders], None] = run_loaders,
    trt_runner_factory: Callable[[Path, int], Any] | None = None,
    progress: Progress | None = None,
    warmup_runner: WarmupRunner = check_warmup,
) -> BuildReport:
    """Compile ``source`` into ``output`` (or check it); BuildUsageError for bad input.
    ``warmup_runner`` runs a model's written warmup samples (the server's way, by default)."""
    source, output = _check_paths(source, output, options)
    notify = progress or (lambda _model, _stage: None)
    sample_document = None
    if options.sample_data is not None:
        try:
            sample_document = load_sample_document(options.sample_data)
        except SampleDataError as exc:
            raise BuildUsageError(str(exc)) from None
    try:
        old_lock = read_lock(output) if output.is_dir() else None
    except LockError as exc:
        if options.check:
            raise BuildUsageError(str(exc)) from None
        old_lock = None  # a broken lock is rebuilt from scratch
    status, trt_module = _tensorrt(options, tensorrt)
    report = BuildReport(source, output, check=options.check)
    validation = _validate(source, options.models)
    report.diagnostics.extend(validation.diagnostics)
    unknown = sorted(set(options.models) - set(validation.models))
    for name in unknown:
        report.diagnostics.append(
            Diagnostic("model-not-found", Severity.ERROR, name, f"no model '{name}' in {source}")
        )
    fingerprint = options.fingerprint()
    fingerprint["tensorrt"] = status.version
    if options.sample_data is not None:
        fingerprint["sample_data"] = hash_json(sample_document)
    options_hash = hash_json(fingerprint)
    old_models: dict[str, Any] = dict(old_lock["models"]) if old_lock else {}
    env = BuildEnvironment(
        options=options,
        tensorrt=status,
        trt_module=trt_module,
        sample_document=sample_document,
        sample_source=str(options.sample_data or ""),
        timing_cache=output / TIMING_CACHE_FILE,
        engine_runner=engine_runner,
        trt_runner_factory=trt_runner_factory,
        warmup_runner=warmup_runner,
    )
    entries: dict[str, Any] = dict(old_models) if options.models else {}
    old_options = old_lock["options"] if old_lock else {}
    option_diff = option_changes(old_options, fingerprint) if old_lock else []
    tool_diff = tool_changes(old_lock["tools"], tool_versions(status.version)) if old_lock else []
    if not options.check:
        output.mkdir(parents=True, exist_ok=True)
    for model in _selected(validation, options):
        notify(model.name, "checking")
        source_hash = hash_tree(model.directory)
        sources = file_hashes(model.directory)
        compiled = output / model.name
        previous = old_models.get(model.name)
        own_options = option_diff
        if previous is not None and previous.get("options_hash") != options_hash:
            own_options = option_diff or ["the options of an earlier build"]
        why_stale = out_of_date_reason(
            previous, source_hash, sources, compiled, own_options, tool_diff
        )
        if not model.ok:
            errors = [d for d in model.diagnostics if d.is_error]
            failed = ModelBuildReport(model.name, "failed", diagnostics=errors)
            failed.reason = f"does not pass validation ({len(errors)} error(s))"
            report.models.append(failed)
            entries.pop(model.name, None)
            if options.check:
                report.out_of_date.append(model.name)
            elif not options.in_place and compiled.is_dir():
                shutil.rmtree(compiled)  # never leave an outdated compiled copy to be served
                failed.notes.append("its previous compiled copy was removed from the output")
            notify(model.name, "failed")
            continue
        if why_stale is None:
            assert previous is not None
            report.models.append(_from_lock(model.name, previous))
            entries[model.name] = previous
            notify(model.name, "up-to-date")
            continue
        if options.check:
            report.out_of_date.append(model.name)
            report.models.append(ModelBuildReport(model.name, "out-of-date", reason=why_stale))
            notify(model.name, "out-of-date")
            continue
        notify(model.name, "building")
        built = _build_one(model, compiled, env, output)
        built.source_hash = source_hash
        if previous is not None and built.ok and not built.reason:
            built.reason = f"rebuilt: {why_stale}"
        report.models.append(built)
        if built.ok:
            entries[model.name] = _entry(built, options_hash, sources)
        else:
            entries.pop(model.name, None)
        notify(model.name, built.status)
    selected = {m.name for m in report.models}
    stale = sorted(set(old_models) - set(validation.models)) if not options.models else []
    if options.check:
        report.out_of_date.extend(stale)
        return report
    if not options.in_place:
        for name in stale:
            if (output / name).is_dir():
                shutil.rmtree(output / name)
            report.removed.append(name)
    lock = new_lock(source, output, options.in_place, fingerprint, status.version)
    lock["models"] = {k: v for k, v in entries.items() if k in selected or k in old_models}
    for name in report.removed:
        lock["models"].pop(name, None)
    report.lock_file = write_lock(output, lock)
    _validate_output(report, output)
    return report


def _build_one(
    model: ModelReport, compiled: Path, env: BuildEnvironment, output: Path
) -> ModelBuildReport:
    staging_root = Path(tempfile.mkdtemp(prefix=f".repokit-build-{model.name}-", dir=output.parent))
    try:
        staged = staging_root / model.name
        shutil.copytree(model.directory, staged, symlinks=False)
        built = compile_model(model, staged, env)
        if built.ok:
            built.output_hash = hash_tree(staged)
            _swap_in(staged, compiled)
        elif not env.options.in_place and compiled.is_dir():
            shutil.rmtree(compiled)  # never leave an outdated compiled copy to be served
            built.notes.append("its previous compiled copy was removed from the output")
        return built
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)


def _validate_output(report: BuildReport, output: Path) -> None:
    """The compiled repository must pass ``repokit validate`` for every model built."""
    names = tuple(m.name for m in report.models if m.ok)
    if not names:
        return
    checked = _validate(output, names)
    for model in report.models:
        found = checked.models.get(model.name)
        if found is None or not model.ok:
            continue
        errors = [d for d in found.diagnostics if d.is_error]
        for error in errors:
            model.diagnostics.append(
                Diagnostic(
                    "output-invalid",
                    Severity.ERROR,
                    model.name,
                    f"the compiled config fails validation: [{error.rule}] {error.message}",
                    error.file,
                    error.path,
                )
            )
        if errors:
            model.status = "failed"
            model.reason = "the compiled model does not pass `repokit validate`"


__all__ = ["LOCK_FILE", "BuildUsageError", "build_repository"]
