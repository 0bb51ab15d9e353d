"""Where every command writes: the one place that decides between rich and plain output.

On a terminal (as rich detects it: a tty, or ``TTY_COMPATIBLE=1`` / ``FORCE_COLOR`` in the
environment) commands get an ordinary rich console: colours, wrapping at the terminal's width,
live progress, boxed tables. Anywhere else (a pipe, a file, CI) they get a plain console: no
colours or control codes, no wrapping, no live views, and tables printed as space-aligned
text, so that nothing a command prints is ever wrapped or cut short. ``--format json`` output is
written with :func:`print_data`, plain on either.

Help and usage errors follow the same choice (:class:`RepokitGroup`, :class:`RepokitCommand`):
click's help layout (every option name whole at any width), rendered with colours on a terminal
and never wrapped elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.markup import escape
from rich.table import Table
from rich.theme import Theme
from typer.core import TyperCommand, TyperGroup

# wide enough that no line of any report or help page is ever wrapped
PLAIN_WIDTH = 1_000_000
# help on a terminal wraps at the terminal's width, but no wider than this
HELP_MAX_WIDTH = 100
_HELP_THEME = Theme(
    {"help.option": "bold cyan", "help.switch": "bold green", "help.heading": "bold"}
)


def is_terminal(stderr: bool = False) -> bool:
    """Whether stdout (or stderr) is a terminal, as rich decides it (environment included)."""
    return Console(stderr=stderr).is_terminal


def make_console(stderr: bool = False) -> Console:
    """A console for stdout (or stderr): rich on a terminal, plain text anywhere else."""
    console = Console(stderr=stderr, highlight=False, emoji=False)
    if console.is_terminal:
        return console
    return plain_console(stderr=stderr)


def plain_console(stderr: bool = False, file: Any = None) -> Console:
    """No colours, no control codes, no wrapping (what :func:`make_console` gives a pipe)."""
    return Console(
        file=file,
        stderr=stderr,
        force_terminal=False,
        force_interactive=False,
        color_system=None,
        no_color=True,
        width=PLAIN_WIDTH,
        soft_wrap=True,
        highlight=False,
        emoji=False,
    )


def print_error(console: Console, message: str) -> None:
    """``error: <message>`` (the message is text, never markup)."""
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def print_data(console: Console, text: str) -> None:
    """Machine-readable output (JSON, SARIF): written as is, on a terminal too."""
    console.out(text, highlight=False)


@dataclass
class Column:
    header: str
    justify: Literal["left", "right"] = "left"


@dataclass
class TableData:
    """A table as plain data; :func:`print_table` renders it for the console it gets."""

    columns: list[Column]
    rows: list[list[str]] = field(default_factory=list)
    title: str = ""
    # per-row rich style on a terminal (e.g. "red"); ignored in plain text
    row_styles: list[str] = field(default_factory=list)

    def add_row(self, *cells: str, style: str = "") -> None:
        self.rows.append(list(cells))
        self.row_styles.append(style)


def table_text(table: TableData) -> list[str]:
    """The table as space-aligned lines: the title, a header line, one line per row."""
    count = len(table.columns)
    rows = [[*row, *[""] * (count - len(row))][:count] for row in table.rows]
    widths = [len(column.header) for column in table.columns]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(width) if column.justify == "right" else cell.ljust(width)
            for cell, width, column in zip(cells, widths, table.columns, strict=True)
        ]
        return "  ".join(parts).rstrip()

    lines = [table.title] if table.title else []
    lines.append(line([column.header for column in table.columns]))
    lines.extend(line(row) for row in rows)
    return lines


def print_table(console: Console, table: TableData) -> None:
    """A boxed rich table on a terminal; space-aligned text (never cut short) elsewhere."""
    if not console.is_terminal:
        for text in table_text(table):
            console.out(text, highlight=False)
        return
    rich_table = Table(title=table.title or None)
    for column in table.columns:
        rich_table.add_column(column.header, justify=column.justify, overflow="fold")
    for index, row in enumerate(table.rows):
        style = table.row_styles[index] if index < len(table.row_styles) else ""
        rich_table.add_row(*row, style=style or None)
    console.print(rich_table)


class _HelpHighlighter(RegexHighlighter):
    highlights = [  # noqa: RUF012 - rich's documented way to declare a highlighter
        r"(^|[\s,\[(])(?P<switch>-[a-zA-Z])(?![\w-])",
        r"(^|[\s,\[(])(?P<option>--[\w-]+)",
        r"(?m)^\s*(?P<heading>(Usage|Arguments|Options|Commands|Examples):)",
    ]
    base_style = "help."


def _help_width() -> int:
    if is_terminal():
        return min(Console().width, HELP_MAX_WIDTH)
    return PLAIN_WIDTH


def _styled_help(text: str) -> str:
    """Help text with colours for a terminal (ANSI codes); unchanged elsewhere."""
    if not is_terminal():
        return text
    console = Console(
        theme=_HELP_THEME, highlighter=_HelpHighlighter(), force_terminal=True, soft_wrap=True
    )
    with console.capture() as capture:
        console.print(text, markup=False, highlight=True, soft_wrap=True, end="")
    return capture.get()


class RepokitCommand(TyperCommand):
    """A command whose help follows the output discipline (see the module docstring)."""

    def get_help(self, ctx: Any) -> str:
        return _styled_help(super().get_help(ctx))


class RepokitGroup(TyperGroup):
    """The root group: sets the help width for every context below it, styles its help."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        if parent is None:
            width = _help_width()
            extra.setdefault("terminal_width", width)
            extra.setdefault("max_content_width", width)
        return super().make_context(info_name, args, parent=parent, **extra)

    def get_help(self, ctx: Any) -> str:
        return _styled_help(super().get_help(ctx))


def examples(*commands: str) -> str:
    """A help epilog listing example command lines (kept verbatim, never rewrapped)."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {command}" for command in commands)
