"""Where Triton finds a model's backend library (core ``GetBackendLibraryProperties``): the
config's ``runtime`` (by default ``libtriton_<backend>.so``, or a python-based backend's
``model.py``) is looked for in the version folder that loads, then the model folder, then the
backend directory's ``<backend>/`` folder.

The first two are in the repository: a ``runtime`` found there that resolves outside its
folder (``../x/libtriton_y.so``) is refused as Triton refuses it. What the server's backend
directory holds is known only with ``--backend-directory`` (tritonserver's flag); without it a
library that is not in the repository is assumed to be there."""

from __future__ import annotations

import os
from pathlib import Path

from repokit.config.rules.context import RuleContext

PYTHON_RUNTIME = "model.py"  # a python-based backend's runtime
PYTHON_BACKEND = "python"


def check_backend_library(ctx: RuleContext) -> None:
    config = ctx.config
    backend = config.backend
    if not backend or config.platform == "ensemble":
        return
    folders = [ctx.model.path / str(v) for v in ctx.versions[:1]] + [ctx.model.path]
    directory = ctx.options.backend_directory
    if directory:
        folders.append(Path(directory) / backend)
    runtime = config.runtime
    if runtime == PYTHON_RUNTIME:
        _python_based(ctx, Path(directory) / backend if directory else None)
        return
    library = runtime or f"libtriton_{backend}.so"
    for folder in folders:
        candidate = folder / library
        if candidate.is_file():
            if _escapes(candidate, folder):
                ctx.report(
                    "runtime-escapes-backend-dir",
                    f"backend library name '{library}' escapes backend directory "
                    f"'{_shown(folder)}', for model '{ctx.name}', check model config runtime "
                    "field",
                    path="runtime",
                )
            return  # Triton takes the first folder that has it
    if not directory:
        return  # the server's backend directory may have it
    if runtime:
        searched = " ".join(f"'{_shown(folder)}'" for folder in folders)
        ctx.report(
            "backend-library-missing",
            f"unable to find backend library '{runtime}' for model '{ctx.name}', searched: "
            f"{searched}",
            path="runtime",
        )
    elif not (Path(directory) / backend / PYTHON_RUNTIME).is_file():  # not python-based
        ctx.report(
            "backend-library-missing",
            f"unable to find backend library for backend '{backend}', try specifying runtime "
            "on the model configuration.",
            path="backend",
        )


def _python_based(ctx: RuleContext, folder: Path | None) -> None:
    """``runtime: "model.py"``: the backend is python-based; its model.py is in the backend
    directory's folder of that backend."""
    if folder is None:
        return
    path = folder / PYTHON_RUNTIME
    if not path.is_file():
        ctx.report(
            "backend-library-missing",
            f"unable to find Python backend based backend library '{PYTHON_RUNTIME}' for "
            f"model '{ctx.name}', searched: '{_shown(path)}'",
            path="runtime",
        )


def _escapes(child: Path, parent: Path) -> bool:
    resolved = os.path.realpath(child)
    base = os.path.realpath(parent)
    return os.path.commonpath([resolved, base]) != base


def _shown(folder: Path) -> str:
    return os.path.normpath(folder.absolute())
