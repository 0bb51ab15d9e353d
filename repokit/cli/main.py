"""The ``repokit`` command line: one module per command under ``repokit.cli``.

Each command module exposes ``register(app)``; heavy imports happen inside the commands. Every
command (and sub-command) gets the help and output behaviour of :mod:`repokit.cli.output`.
"""

from __future__ import annotations

import typer
from typer.core import TyperCommand

from repokit.cli import build, deploy, explain, lint, perf, serve, validate
from repokit.cli.output import RepokitCommand, RepokitGroup, examples
from repokit.cli.version_option import VersionOption

# the order the commands are listed in ``repokit --help``
COMMAND_MODULES = (validate, lint, explain, serve, build, perf, deploy)
HELP_OPTION_NAMES = ["-h", "--help"]


def _apply_output_discipline(app: typer.Typer) -> None:
    """Every command of ``app`` (and of its sub-apps) renders help as repokit.cli.output says."""
    for command in app.registered_commands:
        if command.cls in (None, TyperCommand):  # typer's default class
            command.cls = RepokitCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            _apply_output_discipline(group.typer_instance)


def make_app() -> typer.Typer:
    app = typer.Typer(
        name="repokit",
        cls=RepokitGroup,
        help="Validate, compile, serve and load-test Triton-style model repositories.",
        epilog=examples(
            "repokit validate ./models",
            "repokit lint ./models --fail-on warning",
            "repokit build ./models -o ./compiled --profile",
            "repokit serve ./models",
            "repokit perf -m simple -u localhost:8000 --concurrency-range 1:8",
            "repokit explain input-dims-invalid",
            "repokit validate --help   (each command's options and examples)",
        ),
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": HELP_OPTION_NAMES},
    )

    @app.callback()
    def root(
        version: VersionOption = False,
    ) -> None:
        """Validate, compile, serve and load-test Triton-style model repositories."""

    for command in COMMAND_MODULES:
        command.register(app)
    _apply_output_discipline(app)
    return app


def run() -> None:
    make_app()()


if __name__ == "__main__":
    run()
