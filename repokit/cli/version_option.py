"""``--version``: repokit's version, for ``repokit --version`` and ``repokit perf --version``
(perf_analyzer prints its own version with it)."""

from __future__ import annotations

from typing import Annotated

import typer

from repokit.cli.output import make_console


def version_text() -> str:
    from importlib import metadata  # not at import: every command would pay for it

    try:
        return f"repokit {metadata.version('repokit')}"
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "repokit (not installed)"


def _show_version(value: bool) -> None:
    if value:
        make_console().out(version_text(), highlight=False)
        raise typer.Exit(0)


# a command's ``show_version: VersionOption = False`` parameter
VersionOption = Annotated[
    bool,
    typer.Option(
        "--version",
        help="Print repokit's version and exit.",
        callback=_show_version,
        is_eager=True,
    ),
]
