"""Rendering diagnostics: rich text grouped by model, JSON, and SARIF 2.1.0 (reused by lint)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

from rich.console import Console
from rich.markup import escape

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.report import RepositoryReport
from repokit.config.rule_docs import RuleDoc, rule_docs

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
TOOL_URI = "https://github.com/triton-inference-server"
_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary_line(report: RepositoryReport) -> str:
    diagnostics = report.all_diagnostics()
    errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
    warnings = sum(1 for d in diagnostics if d.severity is Severity.WARNING)
    failing = sum(1 for r in report.models.values() if not r.ok)
    return (
        f"{_plural(len(report.models), 'model')} checked, {failing} would fail to load: "
        f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"
    )


def _location(diagnostic: Diagnostic) -> str:
    where = diagnostic.file
    if where and diagnostic.line:
        where += f":{diagnostic.line}"
        if diagnostic.column:
            where += f":{diagnostic.column}"
    if diagnostic.path:
        where = f"{where} {diagnostic.path}" if where else diagnostic.path
    return where


def render_diagnostic(diagnostic: Diagnostic, console: Console) -> None:
    style = _STYLE[diagnostic.severity]
    location = _location(diagnostic)
    console.print(
        f"  [{style}]{diagnostic.severity.value}[/] [bold]{escape(diagnostic.rule)}[/]"
        + (f" [dim]{escape(location)}[/]" if location else ""),
        highlight=False,
        soft_wrap=True,
    )
    # a message of several lines (a model's traceback) stays under its finding: each line is
    # indented and blank lines are dropped
    lines = [line for line in diagnostic.message.splitlines() if line.strip()] or [""]
    for line in lines:
        console.print(f"    {escape(line)}", highlight=False, soft_wrap=True)


def render_text(report: RepositoryReport, console: Console) -> None:
    """Findings grouped by model, then one summary line (only the line when all is well)."""
    groups: dict[str, list[Diagnostic]] = {}
    for diagnostic in report.diagnostics:
        groups.setdefault(diagnostic.model or "(repository)", []).append(diagnostic)
    for name, model_report in sorted(report.models.items()):
        if model_report.diagnostics:
            groups.setdefault(name, []).extend(model_report.diagnostics)
    for name, diagnostics in groups.items():
        failing = any(d.is_error for d in diagnostics)
        mark = "[bold red]✗[/]" if failing else "[yellow]![/]"
        console.print(f"{mark} [bold]{escape(name)}[/]", highlight=False)
        for diagnostic in diagnostics:
            render_diagnostic(diagnostic, console)
    style = "bold red" if report.error_count else "bold green"
    console.print(f"[{style}]{escape(summary_line(report))}[/]", highlight=False)


def _sarif_result(diagnostic: Diagnostic) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": diagnostic.rule,
        "level": _SARIF_LEVEL[diagnostic.severity],
        "message": {"text": diagnostic.message},
    }
    if diagnostic.file:
        physical: dict[str, Any] = {"artifactLocation": {"uri": diagnostic.file}}
        if diagnostic.line:
            region: dict[str, Any] = {"startLine": diagnostic.line}
            if diagnostic.column:
                region["startColumn"] = diagnostic.column
            physical["region"] = region
        location: dict[str, Any] = {"physicalLocation": physical}
        if diagnostic.path:
            location["logicalLocations"] = [
                {"fullyQualifiedName": f"{diagnostic.model}/{diagnostic.path}"}
            ]
        result["locations"] = [location]
    properties: dict[str, Any] = {"model": diagnostic.model}
    if diagnostic.path:
        properties["fieldPath"] = diagnostic.path
    result["properties"] = properties
    return result


def _sarif_rule(rule_id: str, doc: RuleDoc | None) -> dict[str, Any]:
    if doc is None:
        return {"id": rule_id, "shortDescription": {"text": rule_id}}
    level = {"error": "error", "warning": "warning"}.get(doc.level, "note")
    return {
        "id": rule_id,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": doc.description},
        "helpUri": doc.help_uri,
        "help": {"text": doc.help_text},
        "defaultConfiguration": {"level": level},
    }


def _tool_version() -> str:
    try:
        return metadata.version("repokit")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0.0.0"


def to_sarif(
    diagnostics: Iterable[Diagnostic], rules: Mapping[str, RuleDoc] | None = None
) -> dict[str, Any]:
    """A SARIF 2.1.0 log with every rule of ``rules`` (default: all) described."""
    docs = rule_docs() if rules is None else rules
    items = list(diagnostics)
    used = sorted({d.rule for d in items} | set(docs))
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "repokit",
                        "version": _tool_version(),
                        "informationUri": TOOL_URI,
                        "rules": [_sarif_rule(rule_id, docs.get(rule_id)) for rule_id in used],
                    }
                },
                "results": [_sarif_result(d) for d in items],
            }
        ],
    }
