"""``repokit lint [PATH]``: validate, then advice beyond validity.

Exit codes: 0 when nothing reaches the ``--fail-on`` level, 1 when something does, 2 for usage
errors (missing path, not a directory). Advice (warnings, info) fails only with
``--fail-on warning``; ``--fail-on never`` always exits 0 for a readable repository.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.report import RepositoryReport

_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


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


def _location(d: Diagnostic) -> str:
    where = d.file
    if where and d.line:
        where += f":{d.line}" + (f":{d.column}" if d.column else "")
    if d.path:
        where = f"{where} {d.path}" if where else d.path
    return where


def render_text(report: RepositoryReport, console: Console) -> None:
    """Grouped by model; one summary line. Quiet about models with nothing to say."""
    groups: list[tuple[str, list[Diagnostic]]] = [("(repository)", report.diagnostics)]
    groups += [(name, report.models[name].diagnostics) for name in sorted(report.models)]
    for title, diagnostics in groups:
        if not diagnostics:
            continue
        console.print(f"[bold]{escape(title)}[/]")
        for d in diagnostics:
            style = _STYLE[d.severity]
            where = _location(d)
            console.print(
                f"  [{style}]{d.severity.value}[/] [dim]{escape(d.rule)}[/] "
                + (f"{escape(where)}: " if where else "")
                + escape(d.message),
                soft_wrap=True,
            )
    counts = {s: 0 for s in Severity}
    for d in report.all_diagnostics():
        counts[d.severity] += 1
    console.print(
        f"{len(report.models)} models: {counts[Severity.ERROR]} errors, "
        f"{counts[Severity.WARNING]} warnings, {counts[Severity.INFO]} notes"
    )


def _sarif(report: RepositoryReport) -> dict[str, object]:
    level: dict[Severity, Literal["error", "warning", "note"]] = {
        Severity.ERROR: "error",
        Severity.WARNING: "warning",
        Severity.INFO: "note",
    }
    diagnostics = report.all_diagnostics()
    results = []
    for d in diagnostics:
        location: dict[str, object] = {"artifactLocation": {"uri": d.file or "."}}
        if d.line:
            location["region"] = {"startLine": d.line, "startColumn": max(d.column, 1)}
        result: dict[str, object] = {
            "ruleId": d.rule,
            "level": level[d.severity],
            "message": {"text": d.message},
            "locations": [{"physicalLocation": location}],
        }
        if d.path:
            result["properties"] = {"model": d.model, "fieldPath": d.path}
        results.append(result)
    rules = sorted({d.rule for d in diagnostics})
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "repokit", "rules": [{"id": r} for r in rules]}},
                "originalUriBaseIds": {"%SRCROOT%": {"uri": report.root.as_uri() + "/"}},
                "results": results,
            }
        ],
    }


def render(report: RepositoryReport, output: OutputFormat, console: Console) -> None:
    if output is OutputFormat.text:
        render_text(report, console)
    elif output is OutputFormat.json:
        console.print_json(json.dumps(report.to_dict()))
    else:
        console.print_json(json.dumps(_sarif(report)))


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
        int, typer.Option(min=0, help="Cores to compare CPU instance counts with (0 = this host).")
    ] = 0,
    strict: Annotated[
        bool, typer.Option(help="Triton's --disable-auto-complete-config semantics.")
    ] = False,
) -> None:
    """Validate a repository, then give advice beyond what Triton checks."""
    from repokit.config.lint import LintOptions, lint_repository
    from repokit.config.report import ValidateOptions
    from repokit.paths import default_sample_repository

    console = Console(soft_wrap=True)
    errors = Console(stderr=True, soft_wrap=True)
    root = path if path is not None else default_sample_repository()
    if not root.exists():
        errors.print(f"[red]error:[/] repository '{escape(str(root))}' does not exist")
        raise typer.Exit(2)
    if not root.is_dir():
        errors.print(f"[red]error:[/] repository '{escape(str(root))}' is not a directory")
        raise typer.Exit(2)
    report = lint_repository(root, ValidateOptions(strict=strict), LintOptions(cores=cores))
    render(report, output, console)
    raise typer.Exit(exit_code(report, fail_on))


def register(app: typer.Typer) -> None:
    app.command("lint")(lint)
