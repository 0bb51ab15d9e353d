"""``repokit validate CONFIG.json``: a config given as JSON (the load API's ``config`` override).

The JSON is checked against the schema and parsed with protobuf's ``json_format``; then every
load-time rule runs with it as the model's config, as for a model folder:

* in a model directory (a folder with config.pbtxt or version folders), against that folder:
  its versions, model files and model.py, as the load API would use them;
* anywhere else, on its own: every rule about the config itself runs (IO, batching, sequence
  batching, instance groups, ensembles' own fields, warmup, ...), and only the rules about a
  model folder's contents (version folders, model files, model.py, label and data files next to
  the config, the name matching the folder) are left out, since there is no folder.

Findings about fields carry the JSON file's ``line:column``.
"""

from __future__ import annotations

from pathlib import Path

from repokit.config.diagnostics import Diagnostic
from repokit.config.json_schema import load_config_json
from repokit.config.positions import field_positions, locate
from repokit.config.report import ModelReport, RepositoryReport, ValidateOptions
from repokit.errors import Code, RepokitError
from repokit.repository.layout import ModelDir, looks_like_model_dir, scan_model_dir

# rules about what a model folder holds: not applicable to a config validated on its own
FOLDER_RULES = frozenset(
    {
        "model-name-mismatch",
        "model-dir-stray",
        "model-dir-hidden",
        "version-dir-leading-zeros",
        "version-dir-not-numeric",
        "version-dir-prefix-parsed",
        "version-dir-out-of-range",
        "version-not-present",
        "no-version-available",
        "model-file-missing",
        "model-file-wrong-kind",
        "python-model-syntax-error",
        "python-model-class-missing",
        "label-file-missing",
        "initial-state-file-missing",
        "initial-state-file-too-small",
        "warmup-file-missing",
        "warmup-file-too-small",
        "warmup-string-data-invalid",
    }
)


def validate_json_file(path: Path, options: ValidateOptions) -> RepositoryReport:
    """Validate the JSON config at ``path`` (see the module docstring)."""
    from repokit.config.validate import validate_model

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RepokitError(Code.INVALID_ARG, f"cannot read '{path}': {exc}") from exc
    model_dir = path.resolve().parent
    in_model_dir = looks_like_model_dir(model_dir)
    root = model_dir.parent if in_model_dir else model_dir
    file = path.resolve().relative_to(root).as_posix()
    report = RepositoryReport(root=root)
    name = model_dir.name if in_model_dir else path.stem
    config, findings = load_config_json(text, name, file)
    if config is None:  # the model would not load: its config does not parse
        _locate(findings, file, text)
        report.models[name] = ModelReport(name, model_dir, None, None, diagnostics=findings)
        return report
    if in_model_dir:
        model = validate_model(scan_model_dir(model_dir), options, root, config_override=config)
    else:
        name = config.name or path.stem
        folder = ModelDir(name=name, path=model_dir / f".{name}.standalone")
        model = validate_model(folder, options, root, config_override=config)
        model.diagnostics[:] = [d for d in model.diagnostics if d.rule not in FOLDER_RULES]
        model.directory = model_dir
    model.diagnostics[:0] = findings
    model.diagnostics[:] = [_in_file(d, file) for d in model.diagnostics]
    _locate(model.diagnostics, file, text)
    report.models[model.name] = model
    return report


def _in_file(diagnostic: Diagnostic, file: str) -> Diagnostic:
    """Findings about the config (no file of their own) belong to the JSON file."""
    if diagnostic.file:
        return diagnostic
    return Diagnostic(
        diagnostic.rule,
        diagnostic.severity,
        diagnostic.model,
        diagnostic.message,
        file,
        diagnostic.path,
        diagnostic.line,
        diagnostic.column,
    )


def _locate(diagnostics: list[Diagnostic], file: str, text: str) -> None:
    locate(diagnostics, file, field_positions(text, json_form=True))
