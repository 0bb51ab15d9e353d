"""Read one model directory the way the server loads it: config, normalisation, versions.

The seam between the serving core and the validator: the ModelManager asks ``read_model`` for a
model's normalised config and the versions its policy selects. ``read_model`` runs exactly the
rules of ``repokit validate`` (repokit.config.validate.validate_model), so a model that validate
rejects is never loaded, and the repository index shows the first error as its reason. A
load-API config override replaces the config file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from repokit.config.diagnostics import Severity
from repokit.config.ensemble_graph import ENSEMBLE_PLATFORM, check_scheduling
from repokit.config.report import ValidateOptions
from repokit.config.rules.context import RuleContext
from repokit.config.rules.io import check_io
from repokit.config.validate import validate_model
from repokit.core.load_stage import version_stage_status
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.repository.layout import scan_model_dir

# findings that mean "the config is fine, but the version policy selects nothing"
_POLICY_RULES = frozenset({"no-version-available"})
# What a python model's auto_complete_config may still fill in: Triton checks a model's inputs
# and outputs only after the backend completed its config, so these wait until then
# (``io_problem`` on the completed config).
WARMUP_EXECUTE_RULE = "warmup-execute-return"
DEFERRED_IO_RULES = frozenset(
    {
        "input-data-type-missing",
        "input-dims-missing",
        "output-data-type-missing",
        "output-dims-missing",
    }
)


class ModelLoadError(Exception):
    """The model cannot load; ``reason`` is the text the repository index shows."""

    def __init__(
        self,
        reason: str,
        *,
        config_ok: bool = False,
        rule: str = "",
        config: mc.ModelConfig | None = None,
        versions: tuple[int, ...] = (),
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.config_ok = config_ok  # the config was fine; only the version policy found nothing
        self.rule = rule  # the validation rule that refused it ("" when none)
        self.config = config  # the config as read (normalised), when it could be
        self.versions = versions


@dataclass(frozen=True)
class ModelDefinition:
    name: str
    directory: Path  # where the backend loads from (the model dir or a private copy)
    config: mc.ModelConfig  # normalised
    versions: tuple[int, ...]  # the versions the policy selects, ascending


def model_directories(repositories: list[Path]) -> dict[str, list[Path]]:
    """Every subdirectory of every repository (hidden ones too, as Triton), by name."""
    found: dict[str, list[Path]] = {}
    for repository in repositories:
        try:
            entries = sorted(os.scandir(repository), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir():
                found.setdefault(entry.name, []).append(Path(entry.path))
    return found


def fingerprint(directory: Path) -> str:
    """A digest of every file's path, size and mtime under ``directory`` (poll mode)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")  # written by python models
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def version_stamps(directory: Path, config_entry: str) -> dict[int, str]:
    """Per version folder, a digest of its files and of the model folder's other files (not
    the config's entry ``config_entry``, not other versions): what Triton 2.51 compares to
    keep a serving version through a reload (``IsModelVersionModified``). ``__pycache__``
    folders do not count, as in :func:`fingerprint`."""
    shared: list[str] = []
    versions: dict[int, str] = {}
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return {}
    for entry in entries:
        if entry == config_entry or entry == "__pycache__":
            continue
        stamp = (
            fingerprint(directory / entry)
            if (directory / entry).is_dir()
            else _file_stamp(directory / entry)
        )
        if entry.isdigit():
            versions[int(entry)] = stamp
        else:
            shared.append(f"{entry}\0{stamp}")
    common = "\n".join(shared)
    return {number: f"{stamp}\n{common}" for number, stamp in versions.items()}


def _file_stamp(path: Path) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return ""
    return f"{info.st_size}\0{info.st_mtime_ns}"


def read_model(
    name: str,
    directory: Path,
    *,
    override: mc.ModelConfig | None = None,
    config_name: str = "",
    strict: bool = False,
) -> ModelDefinition:
    """Validate ``directory`` with every rule of ``repokit validate``; ModelLoadError with the
    first error (Triton's wording) when Triton would refuse it, else the normalised config."""
    options = ValidateOptions(strict=strict, target="cpu", model_config_name=config_name)
    model = scan_model_dir(directory, name)
    report = validate_model(model, options, directory.parent, config_override=override)
    completes_io = not strict and report.config is not None and report.config.backend == "python"
    runs_warmup = report.config is not None and not (
        report.config.model_transaction_policy.decoupled
    )
    errors = [
        d
        for d in report.diagnostics
        if d.severity is Severity.ERROR
        and not (completes_io and d.rule in DEFERRED_IO_RULES)
        # what execute() does with the warmup requests is the model's to say (the warmup
        # fails with its words); Triton 2.51 itself dies on a decoupled one's return value
        and not (runs_warmup and d.rule == WARMUP_EXECUTE_RULE)
    ]
    if report.config is not None and report.config.platform == ENSEMBLE_PLATFORM:
        # ValidateEnsembleSchedulingConfig, part of Triton's poll: the steps and the data
        # flow between them (validate runs it with the rules across the repository)
        errors += [
            finding.bind(name, "config.pbtxt")
            for finding in check_scheduling(report.config)
            if finding.severity is Severity.ERROR
        ]
    if errors or report.config is None:
        # Triton reports what it checks when it polls before what it checks per version
        errors.sort(key=lambda d: version_stage_status(d.rule) is not None)
        first = errors[0] if errors else None
        reason = first.load_error if first is not None else f"model '{name}' could not be read"
        raise ModelLoadError(
            reason,
            config_ok=first is not None and first.rule in _POLICY_RULES,
            rule=first.rule if first is not None else "",
            config=report.config,
            versions=tuple(report.versions),
        )
    return ModelDefinition(name, directory, report.config, tuple(report.versions))


def io_problem(name: str, directory: Path, config: mc.ModelConfig) -> str:
    """The first reason Triton would refuse the inputs and outputs of a config a backend
    completed ("" when they are complete and valid)."""
    context = RuleContext(
        scan_model_dir(directory, name), config, ValidateOptions(target="cpu"), directory.parent
    )
    check_io(context)
    errors = [d for d in context.diagnostics if d.severity is Severity.ERROR]
    return errors[0].message if errors else ""
