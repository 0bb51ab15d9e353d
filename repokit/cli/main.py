"""The ``repokit`` command line: one module per command under ``repokit.cli``.

Each command module exposes ``register(app)``; heavy imports happen inside the commands.
"""

from __future__ import annotations

import importlib
import importlib.util

import typer

COMMAND_MODULES = ("validate", "lint", "serve", "build", "perf")


def make_app() -> typer.Typer:
    app = typer.Typer(
        name="repokit",
        help="Validate, compile, serve and load-test Triton-style model repositories.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name in COMMAND_MODULES:
        module_name = f"repokit.cli.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        importlib.import_module(module_name).register(app)
    return app


def run() -> None:
    make_app()()


if __name__ == "__main__":
    run()
