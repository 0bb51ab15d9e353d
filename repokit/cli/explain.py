"""``repokit explain [RULE]``: what a rule of validate or lint means, with a worked example.

Without a rule: every rule id with its severity and summary. Exit codes: 0, or 2 for an
unknown rule (with the closest rule ids as suggestions).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from repokit.cli.output import Column, TableData, examples, make_console, print_error, print_table


def render_rule(rule_id: str, console: Console) -> bool:
    """Print the rule's explanation; False when there is no such rule."""
    from repokit.config.rule_docs import example, rule_docs
    from repokit.paths import sample_repos_dir

    doc = rule_docs().get(rule_id)
    if doc is None:
        return False
    console.print(f"[bold]{escape(doc.id)}[/] ({escape(doc.level)})", highlight=False)
    console.print(escape(doc.description), highlight=False, soft_wrap=True)
    console.print(f"Documentation: {escape(doc.help_uri)}", highlight=False, soft_wrap=True)
    worked = example(rule_id, sample_repos_dir())
    if worked is None:
        return True
    console.print("")
    if worked.config_file is not None and worked.config_text:
        name = worked.config_file.relative_to(worked.repository).as_posix()
        console.print(f"Example ({escape(name)}):", highlight=False)
        for line in worked.config_text.rstrip("\n").splitlines():
            console.out(f"  {line}", highlight=False)
    if worked.findings:
        console.print("repokit validate says:", highlight=False)
        for finding in worked.findings:
            console.print(f"  {escape(finding)}", highlight=False, soft_wrap=True)
    return True


def rules_table() -> TableData:
    from repokit.config.rule_docs import rule_docs

    table = TableData([Column("rule"), Column("severity"), Column("summary")])
    for doc in sorted(rule_docs().values(), key=lambda d: d.id):
        table.add_row(doc.id, doc.level, doc.summary)
    return table


def explain(
    rule: Annotated[
        str | None,
        typer.Argument(help="A rule id as validate and lint print it (none: list every rule)."),
    ] = None,
) -> None:
    """Explain a rule of validate and lint: what it checks, when Triton checks it, an example."""
    from repokit.config.rule_docs import rule_docs
    from repokit.config.suggest import did_you_mean

    console = make_console()
    if rule is None:
        print_table(console, rules_table())
        return
    if not render_rule(rule, console):
        hint = did_you_mean(rule, rule_docs())
        print_error(
            make_console(stderr=True),
            f"no rule '{rule}'{hint}; `repokit explain` lists every rule",
        )
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command(
        "explain",
        epilog=examples(
            "repokit explain input-dims-invalid",
            "repokit explain onnx-input-dims-mismatch",
            "repokit explain            (every rule)",
        ),
    )(explain)
