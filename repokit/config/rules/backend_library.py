"""Where Triton finds a model's backend library (core ``GetBackendLibraryProperties``): the
config's ``runtime`` is looked for in each version folder that loads, then the model folder,
then the backend directory's ``<backend>/`` folder. Those first two are in the repository, so a
``runtime`` found there that resolves outside its folder (``../x/libtriton_y.so``) is refused
here as Triton refuses it. Whether a library is in the server's backend directory is not known
without the server; that is left to it."""

from __future__ import annotations

import os
from pathlib import Path

from repokit.config.rules.context import RuleContext

PYTHON_RUNTIME = "model.py"  # a python-based backend's runtime


def check_backend_library(ctx: RuleContext) -> None:
    config = ctx.config
    runtime = config.runtime
    if not runtime or runtime == PYTHON_RUNTIME or config.platform == "ensemble":
        return
    folders = [ctx.model.path / str(v) for v in ctx.versions[:1]] + [ctx.model.path]
    for folder in folders:
        candidate = folder / runtime
        if not candidate.is_file():
            continue
        if _escapes(candidate, folder):
            ctx.report(
                "runtime-escapes-backend-dir",
                f"backend library name '{runtime}' escapes backend directory "
                f"'{_shown(folder)}', for model '{ctx.name}', check model config runtime field",
                path="runtime",
            )
        return  # Triton takes the first folder that has it


def _escapes(child: Path, parent: Path) -> bool:
    resolved = os.path.realpath(child)
    base = os.path.realpath(parent)
    return os.path.commonpath([resolved, base]) != base


def _shown(folder: Path) -> str:
    return os.path.normpath(folder.absolute())
