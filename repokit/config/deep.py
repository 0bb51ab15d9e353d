"""The model files against their config: what Triton's backend checks when it loads the file.

``repokit validate`` and ``repokit lint`` run this by default (``--no-deep`` skips it) for every
model whose load-time rules pass: each loaded version's model file is read and compared with
the config, as the backend compares them at load time:

* onnxruntime: ``model.onnx`` (names, datatypes, ranks, dims, batching, every model input fed),
  after Triton's auto-completion unless ``--strict`` (:mod:`repokit.config.onnx_io`);
* tensorflow graphdef: ``model.graphdef`` placeholders and nodes
  (:mod:`repokit.config.graphdef_io`);
* tensorflow SavedModel: the ``serving_default`` signature of ``model.savedmodel``, after the
  backend's auto-completion unless ``--strict`` (:mod:`repokit.config.savedmodel_io`).

Python models' ``model.py`` is read by the load-time rules (:mod:`repokit.config.rules.
python_backend`: it must compile and define TritonPythonModel), which ``--no-deep`` turns off
too (``ValidateOptions.read_sources``). Other formats are not read.

A finding about a config field names the config file (so it gets the field's line) and says
which model file contradicts it.
"""

from __future__ import annotations

from pathlib import Path

from repokit.config.diagnostics import Diagnostic
from repokit.config.rules.context import RuleContext
from repokit.repository.backends import ONNXRUNTIME, TENSORFLOW, expected_artifact
from repokit.repository.versions import version_folder_name

GRAPHDEF_PLATFORM = "tensorflow_graphdef"
SAVEDMODEL_PLATFORM = "tensorflow_savedmodel"


def _check_file(ctx: RuleContext, path: Path, relative: str) -> list[Diagnostic]:
    config = ctx.config
    if config.backend == ONNXRUNTIME:
        from repokit.config.onnx_io import check_onnx_config  # imports onnx: only when needed

        return check_onnx_config(
            config, path, model=ctx.model.name, file=relative, autocomplete=not ctx.options.strict
        )
    if config.backend == TENSORFLOW and config.platform == GRAPHDEF_PLATFORM:
        from repokit.config.graphdef_io import check_graphdef_config

        return check_graphdef_config(config, path, model=ctx.model.name, file=relative)
    if config.backend == TENSORFLOW and config.platform == SAVEDMODEL_PLATFORM:
        from repokit.config.savedmodel_io import check_savedmodel_config

        return check_savedmodel_config(
            config, path, model=ctx.model.name, file=relative, strict=ctx.options.strict
        )
    return []


def deep_check_model(ctx: RuleContext) -> None:
    """Append to ``ctx.diagnostics`` what each loaded version's model file contradicts."""
    if ctx.config.backend not in (ONNXRUNTIME, TENSORFLOW):
        return
    artifact = expected_artifact(ctx.config)
    if artifact is None:
        return
    seen: set[tuple[str, str, str]] = set()
    for version in ctx.versions:
        path = ctx.model.path / version_folder_name(version) / artifact.filename
        if not path.exists():
            continue  # the load-time rules report missing files
        relative = ctx.relative(path)
        for found in _check_file(ctx, path, relative):
            key = (found.rule, found.path, found.message)
            if key in seen:  # the same contradiction in another version
                continue
            seen.add(key)
            if found.path and ctx.config_file:
                found = Diagnostic(
                    found.rule,
                    found.severity,
                    found.model,
                    f"{found.message} (model file {relative})",
                    ctx.config_file,
                    found.path,
                )
            ctx.diagnostics.append(found)
