"""Triton's load-time verdict for every model of a repository, without a server.

``validate_repository(root, options)`` scans the repository once, validates each model
(``validate_model``) and then lets the ensemble rules (``repokit.config.ensemble_rules``) look
across models. Each config is parsed once; no user code is imported.
"""

from __future__ import annotations

from pathlib import Path

from repokit.config.deep import deep_check_model
from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.ensemble_rules import check_ensembles
from repokit.config.normalize import normalize_instance_groups, normalize_model_config
from repokit.config.parse import ConfigParseError, parse_text
from repokit.config.positions import locate_findings
from repokit.config.python_auto_complete import model_file_to_complete, run_auto_complete
from repokit.config.report import ModelReport, RepositoryReport, ValidateOptions
from repokit.config.rules.backend_library import check_backend_library
from repokit.config.rules.context import RuleContext
from repokit.config.rules.files import (
    check_batch_strategy,
    check_label_files,
    check_model_files,
    check_repository_agents,
)
from repokit.config.rules.instance_groups import check_instance_groups
from repokit.config.rules.io import check_io
from repokit.config.rules.layout import check_model_dir, check_model_name, check_versions
from repokit.config.rules.model_config import check_model_config
from repokit.config.rules.python_backend import check_execution_env, check_python_sources
from repokit.config.rules.state import check_sequence_state
from repokit.config.rules.warmup import check_warmup
from repokit.errors import Code, ConfigError, RepokitError
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.repository.backends import AUTOCOMPLETE_BACKENDS, autocomplete_backend_fields
from repokit.repository.layout import ModelDir, list_model_names, scan_model_dir

_CPU_TARGET_GPUS: tuple[int, ...] = ()
_GPU_TARGET_GPUS: tuple[int, ...] = (0,)


def _load_config(ctx: RuleContext, path: Path) -> mc.ModelConfig | None:
    """Parse the config file, reporting parse errors; None when it cannot be used."""
    ctx.config_file = ctx.relative(path)
    raw = b""
    try:
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            # Triton's C++ parser accepts bytes that are not UTF-8 (in comments and strings)
            ctx.report(
                "config-not-utf8",
                f"{ctx.config_file} is not valid UTF-8 (byte {exc.start}); Triton accepts "
                "it, but its strings will not round-trip through the JSON config API",
            )
            text = raw.decode("utf-8", errors="replace")
        config = parse_text(text)
    except ConfigParseError as exc:
        hint = ""
        if raw.startswith(b"\xef\xbb\xbf"):
            hint = " (the file starts with a UTF-8 byte-order mark, which Triton rejects too)"
        ctx.report(
            "config-parse-error",
            f"failed to read text proto from {ctx.config_file}: {exc.message}{hint}",
            line=exc.line,
            column=exc.column,
        )
        return None
    except OSError as exc:
        ctx.report(
            "config-unreadable",
            f"failed to open text file for read {ctx.config_file}: {exc.strerror}",
        )
        return None
    _check_fields_unknown_to_triton_251(ctx, config)
    return config


def _check_fields_unknown_to_triton_251(ctx: RuleContext, config: mc.ModelConfig) -> None:
    """Triton 2.51 (24.10) predates model_metrics and ensemble max_inflight_requests: its
    text_format parser rejects them ("failed to read text proto")."""
    if config.HasField("model_metrics"):
        ctx.report(
            "config-field-unsupported",
            "field 'model_metrics' is not part of Triton 2.51's model configuration "
            '(added in 24.12); Triton 2.51 fails with "failed to read text proto"',
            path="model_metrics",
        )
    if config.ensemble_scheduling.max_inflight_requests:
        ctx.report(
            "config-field-unsupported",
            "field 'ensemble_scheduling.max_inflight_requests' is not part of Triton "
            "2.51's model configuration; Triton 2.51 fails with \"failed to read text "
            'proto"',
            path="ensemble_scheduling.max_inflight_requests",
        )


def _python_auto_complete(ctx: RuleContext, config: mc.ModelConfig) -> mc.ModelConfig | None:
    """The config the model's ``auto_complete_config`` completes (normalised), ``config``
    itself when it has none or no model file to run, None when it failed (reported)."""
    found = model_file_to_complete(ctx.model.path, config)
    if found is None:
        return config  # model-file-missing says why
    model_file, version = found
    completed = run_auto_complete(model_file, config, version)
    if completed.error:
        ctx.report(
            "python-auto-complete-failed",
            f"failed to load '{config.name}' version {version}: {completed.error}",
            file=ctx.relative(model_file),
        )
        return None
    if completed.config is None:
        return config
    changed = completed.config
    if changed.name != config.name or changed.backend != config.backend:
        ctx.report(
            "python-auto-complete-failed",
            f"auto-complete-config of model '{config.name}' may not change its name or backend",
            file=ctx.relative(model_file),
        )
        return None
    normalize_model_config(changed)
    return changed


def _has_errors(ctx: RuleContext) -> bool:
    return any(d.severity is Severity.ERROR for d in ctx.diagnostics)


def validate_model(
    model: ModelDir,
    options: ValidateOptions,
    root: Path,
    config_override: mc.ModelConfig | None = None,
) -> ModelReport:
    """Everything Triton checks when loading ``model``, as diagnostics in a ModelReport.

    ``config_override`` replaces the config file, as the load API's ``config`` parameter does.
    """
    ctx = RuleContext(model=model, config=mc.ModelConfig(), options=options, root=root)
    report = ModelReport(name=model.name, directory=model.path, config_file=None, config=None)
    report.diagnostics = ctx.diagnostics
    if not model.readable:
        ctx.report(
            "model-dir-unreadable",
            f"cannot list model directory '{ctx.relative(model.path)}'",
            file=ctx.relative(model.path),
        )
        return report
    check_model_dir(ctx)
    config_path = model.config_path(options.model_config_name)
    has_config = config_path.exists()
    if config_override is not None:
        config = mc.ModelConfig()
        config.CopyFrom(config_override)
        has_config = True
    elif has_config and not config_path.is_file():
        ctx.report(
            "config-unreadable",
            f"{ctx.relative(config_path)} is not a regular file; Triton 2.51 crashes "
            "reading it (std::length_error)",
            file=ctx.relative(config_path),
        )
        return report
    elif has_config:
        report.config_file = config_path
        loaded = _load_config(ctx, config_path)
        if loaded is None:
            return report
        config = loaded
    elif options.strict:
        ctx.report(
            "config-missing",
            f"failed to open text file for read {ctx.relative(config_path)}: No such "
            "file or directory (with --strict, Triton's --disable-auto-complete-config, "
            "every model needs a config.pbtxt)",
            file=ctx.relative(config_path),
        )
        return report
    else:
        config = mc.ModelConfig()
    try:
        autocomplete_backend_fields(config, model.name, model.path, model.subdirs)
    except ConfigError as exc:
        ctx.report(
            "backend-undeterminable",
            f"{exc.message} Set 'backend' in config.pbtxt or add a recognised model "
            "file (model.py, model.onnx, model.plan, ...) to the first version folder",
            path="backend",
        )
        return report
    normalize_model_config(config)
    if options.python_auto_complete and not options.strict and config.backend == "python":
        completed = _python_auto_complete(ctx, config)
        if completed is None:
            return report
        config = completed
    ctx.config = config
    report.config = config

    check_model_config(ctx)
    check_io(ctx)
    check_model_name(ctx)
    check_repository_agents(ctx)
    check_versions(ctx)
    report.versions = ctx.versions
    if not has_config and ctx.versions and config.backend not in AUTOCOMPLETE_BACKENDS:
        ctx.report(
            "config-not-autocompleted",
            f"model '{model.name}' has no config.pbtxt and backend '{config.backend}' "
            'cannot auto-complete one; Triton: "model configuration is not provided for '
            f"model '{model.name}'\". Add a config.pbtxt with input, output and "
            "max_batch_size",
            file=ctx.relative(config_path),
        )
    check_execution_env(ctx)
    check_backend_library(ctx)
    check_instance_groups(ctx)
    check_model_files(ctx)
    check_python_sources(ctx)
    check_label_files(ctx)
    check_batch_strategy(ctx)
    check_sequence_state(ctx)
    check_warmup(ctx)
    if options.deep and not _has_errors(ctx):
        deep_check_model(ctx)
    gpus = _GPU_TARGET_GPUS if options.target == "gpu" else _CPU_TARGET_GPUS
    normalize_instance_groups(config, gpus)
    return report


def _select(names: list[str], options: ValidateOptions) -> tuple[list[str], list[str]]:
    if not options.models:
        return names, []
    present = set(names)
    wanted = list(dict.fromkeys(options.models))
    return [n for n in wanted if n in present], [n for n in wanted if n not in present]


def _ensemble_step_models(report: ModelReport) -> list[str]:
    config = report.config
    if config is None or not config.HasField("ensemble_scheduling"):
        return []
    return [step.model_name for step in config.ensemble_scheduling.step if step.model_name]


def validate_repository(root: Path, options: ValidateOptions | None = None) -> RepositoryReport:
    """Validate every model directory of ``root`` (or ``options.models`` and the models their
    ensembles use). Raises RepokitError when ``root`` is not a readable directory."""
    options = options or ValidateOptions()
    if not root.exists():
        raise RepokitError(Code.NOT_FOUND, f"repository '{root}' does not exist")
    if not root.is_dir():
        raise RepokitError(Code.INVALID_ARG, f"repository '{root}' is not a directory")
    try:
        names = list_model_names(root)
    except OSError as exc:
        raise RepokitError(
            Code.INVALID_ARG, f"cannot read repository '{root}': {exc.strerror}"
        ) from exc
    repository = RepositoryReport(root=root)
    selected, missing = _select(names, options)
    for name in missing:
        repository.diagnostics.append(
            Diagnostic(
                rule="model-not-found",
                severity=Severity.ERROR,
                model=name,
                message=f"model '{name}' is not found in repository '{root}'",
            )
        )
    present = set(names)
    queue = list(selected)
    while queue:
        name = queue.pop(0)
        if name in repository.models:
            continue
        model_report = validate_model(scan_model_dir(root / name, name), options, root)
        repository.models[name] = model_report
        if options.models:
            queue.extend(n for n in _ensemble_step_models(model_report) if n in present)
    check_ensembles(repository, options)
    locate_findings(repository)
    return repository
