"""What ``repokit validate`` and ``repokit lint`` know of the server a repository is for: the
options both take, declared once (``--target``, ``--gpus``, ``--backend-directory``,
``--python-auto-complete``)."""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from repokit.config.report import ValidateOptions


class Target(str, Enum):
    cpu = "cpu"
    gpu = "gpu"


TargetOption = Annotated[
    Target, typer.Option("--target", help="Validate for a CPU-only or a GPU server.")
]
GpusOption = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        min=0,
        metavar="N",
        help="With --target gpu: the server's GPU count; instance groups naming other GPU ids "
        "are refused, as Triton refuses them.",
    ),
]
BackendDirectoryOption = Annotated[
    Path | None,
    typer.Option(
        "--backend-directory",
        help="The server's backend directory (tritonserver's flag): a model whose backend "
        "library is neither there nor in the model's folders is refused.",
    ),
]
PythonAutoCompleteOption = Annotated[
    bool,
    typer.Option(
        "--python-auto-complete",
        help="Run python models' auto_complete_config (their code runs, in a process of its "
        "own) as the python backend does at load unless --strict, and check the config it "
        "completes.",
    ),
]


def for_server(
    options: ValidateOptions,
    target: Target,
    gpus: int | None,
    backend_directory: Path | None,
    python_auto_complete: bool,
) -> ValidateOptions:
    """``options`` with what these options say of the server."""
    return dataclasses.replace(
        options,
        target=target.value,
        gpus=-1 if gpus is None else gpus,
        backend_directory="" if backend_directory is None else str(backend_directory),
        python_auto_complete=python_auto_complete,
    )
