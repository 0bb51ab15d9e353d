"""``repokit lint [PATH]``: validate, then advice beyond validity.

Exit codes: 0 when nothing reaches the ``--fail-on`` level, 1 when something does, 2 for usage
errors (missing path, not a directory). Advice (warnings, info) fails only with
``--fail-on warning``; ``--fail-on never`` always exits 0 for a readable repository.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from repokit.cli.output import examples, make_console, print_data, print_error
from repokit.cli.server_options import (
    BackendDirectoryOption,
    GpusOption,
    PythonAutoCompleteOption,
    Target,
    TargetOption,
    for_server,
)
from repokit.config.diagnostics import Severity

if TYPE_CHECKING:  # the rules are imported when lint runs
    from repokit.config.report import RepositoryReport


class FailOn(str, enum.Enum):
    error = "error"
    warning = "warning"
    never = "never"


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"
    sarif = "sarif"


def exit_code(report: RepositoryReport, fail_on: FailOn) -> int:
    if fail_on is FailOn.never:
        return 0
    failing = {Severity.ERROR} if fail_on is FailOn.error else {Severity.ERROR, Severity.WARNING}
    return 1 if any(d.severity in failing for d in report.all_diagnostics()) else 0


def render(report: RepositoryReport, output: OutputFormat, console: Console) -> None:
    from repokit.cli.render import render_text, to_sarif

    if output is OutputFormat.text:
        render_text(report, console)
    elif output is OutputFormat.json:
        print_data(console, json.dumps(report.to_dict(), indent=2))
    else:
        print_data(console, json.dumps(to_sarif(report.all_diagnostics()), indent=2))


def lint(
    path: Annotated[
        Path | None,
        typer.Argument(help="Model repository (default: the bundled sample repository)."),
    ] = None,
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="Lowest severity that makes the exit code 1.")
    ] = FailOn.error,
    output: Annotated[OutputFormat, typer.Option("--format", help="Output format.")] = (
        OutputFormat.text
    ),
    cores: Annotated[
        int,
        typer.Option(
            min=0, metavar="N", help="Cores to compare CPU instance counts with (0 = this host)."
        ),
    ] = 0,
    strict: Annotated[
        bool, typer.Option(help="Triton's --disable-auto-complete-config semantics.")
    ] = False,
    target: TargetOption = Target.cpu,
    gpus: GpusOption = None,
    backend_directory: BackendDirectoryOption = None,
    python_auto_complete: PythonAutoCompleteOption = False,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep/--no-deep",
            help="Read the model files (ONNX, GraphDef, SavedModel, model.py) and check the config "
            "against them, as validate does.",
        ),
    ] = True,
) -> None:
    """Validate a repository, then give advice beyond what Triton checks."""
    from repokit.config.lint import LintOptions, lint_repository
    from repokit.config.report import ValidateOptions
    from repokit.paths import default_sample_repository

    console = make_console()
    errors = make_console(stderr=True)
    root = path if path is not None else default_sample_repository()
    if not root.exists():
        print_error(errors, f"repository '{root}' does not exist")
        raise typer.Exit(2)
    if not root.is_dir():
        print_error(errors, f"repository '{root}' is not a directory")
        raise typer.Exit(2)
    options = for_server(
        ValidateOptions(strict=strict, deep=deep, read_sources=deep),
        target,
        gpus,
        backend_directory,
        python_auto_complete,
    )
    report = lint_repository(root, options, LintOptions(cores=cores))
    render(report, output, console)
    raise typer.Exit(exit_code(report, fail_on))


def register(app: typer.Typer) -> None:
    app.command(
        "lint",
        epilog=examples(
            "repokit lint ./models",
            "repokit lint ./models --fail-on warning --format sarif > lint.sarif",
            "repokit lint ./models --cores 8 --fail-on never",
        ),
    )(lint)
