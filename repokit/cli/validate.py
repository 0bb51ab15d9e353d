"""``repokit validate``: Triton's load-time verdict for a repository or one model directory."""

from __future__ import annotations

import importlib
import importlib.util
import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from repokit.cli.render import render_text, to_sarif
from repokit.config.report import RepositoryReport, ValidateOptions
from repokit.config.rules.catalog import RULES
from repokit.config.validate import validate_repository
from repokit.errors import RepokitError
from repokit.repository.layout import looks_like_model_dir


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"


class Target(str, Enum):
    cpu = "cpu"
    gpu = "gpu"


def rule_summaries() -> dict[str, str]:
    """Short descriptions of every rule validate can report (for SARIF)."""
    summaries = {rule_id: info.summary for rule_id, info in RULES.items()}
    if importlib.util.find_spec("repokit.config.ensemble_rules") is not None:
        module = importlib.import_module("repokit.config.ensemble_rules")
        summaries.update(getattr(module, "ENSEMBLE_RULES", {}))
    return summaries


def resolve_target(path: Path, models: list[str]) -> tuple[Path, tuple[str, ...]]:
    """A model directory becomes (its parent repository, that model)."""
    resolved = path.resolve()
    if resolved.is_dir() and looks_like_model_dir(resolved) and not models:
        return resolved.parent, (resolved.name,)
    return path, tuple(models)


def run_validate(
    path: Path,
    options: ValidateOptions,
    output: OutputFormat,
    console: Console,
    err_console: Console | None = None,
) -> int:
    """Validate and render; returns the exit code (0 clean, 1 errors, 2 usage error)."""
    try:
        report: RepositoryReport = validate_repository(path, options)
    except RepokitError as exc:
        (err_console or console).print(f"[bold red]error:[/] {exc.message}", highlight=False)
        return 2
    if output is OutputFormat.json:
        console.out(json.dumps(report.to_dict(), indent=2), highlight=False)
    elif output is OutputFormat.sarif:
        sarif = to_sarif(report.all_diagnostics(), rule_summaries())
        console.out(json.dumps(sarif, indent=2), highlight=False)
    else:
        render_text(report, console)
    return 1 if report.error_count else 0


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate(
        path: Annotated[Path, typer.Argument(help="A model repository or one model directory.")],
        model: Annotated[
            list[str] | None, typer.Option("--model", help="Only this model (repeatable).")
        ] = None,
        output: Annotated[
            OutputFormat, typer.Option("--format", help="Output format.")
        ] = OutputFormat.text,
        strict: Annotated[
            bool, typer.Option("--strict", help="Triton's --disable-auto-complete-config.")
        ] = False,
        target: Annotated[
            Target, typer.Option("--target", help="Validate for a CPU-only or a GPU server.")
        ] = Target.cpu,
        model_config_name: Annotated[
            str, typer.Option("--model-config-name", help="Use configs/<NAME>.pbtxt if present.")
        ] = "",
    ) -> None:
        """Report every reason Triton would refuse to load each model, without a server."""
        console = Console(soft_wrap=True)
        err_console = Console(stderr=True)
        if not path.exists():
            err_console.print(f"[bold red]error:[/] path '{path}' does not exist", highlight=False)
            raise typer.Exit(2)
        if not path.is_dir():
            err_console.print(f"[bold red]error:[/] path '{path}' is not a directory",
                              highlight=False)
            raise typer.Exit(2)
        root, models = resolve_target(path, list(model or []))
        options = ValidateOptions(
            strict=strict, target=target.value, models=models,
            model_config_name=model_config_name,
        )
        raise typer.Exit(run_validate(root, options, output, console, err_console))
