"""``repokit validate``: Triton's load-time verdict for a repository or one model directory."""

from __future__ import annotations

import json
from enum import Enum
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

if TYPE_CHECKING:  # the rules (protobuf, jsonschema, ...) are imported when validate runs
    from repokit.config.report import ValidateOptions


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"


def resolve_target(path: Path, models: list[str]) -> tuple[Path, tuple[str, ...]]:
    """A model directory becomes (its parent repository, that model)."""
    from repokit.repository.layout import looks_like_model_dir

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
    from repokit.cli.render import render_text, to_sarif
    from repokit.config.validate import validate_repository
    from repokit.errors import RepokitError

    try:
        if path.is_file():
            from repokit.config.validate_json import validate_json_file  # jsonschema

            report = validate_json_file(path, options)
        else:
            report = validate_repository(path, options)
    except RepokitError as exc:
        print_error(err_console or console, exc.message)
        return 2
    if output is OutputFormat.json:
        print_data(console, json.dumps(report.to_dict(), indent=2))
    elif output is OutputFormat.sarif:
        sarif = to_sarif(report.all_diagnostics())
        print_data(console, json.dumps(sarif, indent=2))
    else:
        render_text(report, console)
    return 1 if report.error_count else 0


def register(app: typer.Typer) -> None:
    @app.command(
        "validate",
        epilog=examples(
            "repokit validate ./models",
            "repokit validate ./models/simple --format json",
            "repokit validate ./models --format sarif > validate.sarif",
            "repokit validate ./models --strict --target gpu",
            "repokit validate override.json   (a load API config override, as JSON)",
        ),
    )
    def validate(
        path: Annotated[
            Path,
            typer.Argument(
                help="A model repository, one model directory, or a config given as JSON "
                "(the load API's override form; the rules run with it as the model's config)."
            ),
        ],
        model: Annotated[
            list[str] | None,
            typer.Option("--model", metavar="NAME", help="Only this model (repeatable)."),
        ] = None,
        output: Annotated[
            OutputFormat, typer.Option("--format", help="Output format.")
        ] = OutputFormat.text,
        strict: Annotated[
            bool, typer.Option("--strict", help="Triton's --disable-auto-complete-config.")
        ] = False,
        target: TargetOption = Target.cpu,
        model_config_name: Annotated[
            str, typer.Option("--model-config-name", help="Use configs/<NAME>.pbtxt if present.")
        ] = "",
        gpus: GpusOption = None,
        backend_directory: BackendDirectoryOption = None,
        python_auto_complete: PythonAutoCompleteOption = False,
        deep: Annotated[
            bool,
            typer.Option(
                "--deep/--no-deep",
                help="Read the model files and check the config against them, as the backend "
                "does at load time (ONNX, TensorFlow GraphDef and SavedModel: names, "
                "datatypes, shapes). "
                "Python models: model.py must compile and define TritonPythonModel. "
                "--no-deep checks the configs and the layout only.",
            ),
        ] = True,
    ) -> None:
        """Report every reason Triton would refuse to load each model, without a server."""
        from repokit.config.report import ValidateOptions

        console = make_console()
        err_console = make_console(stderr=True)
        if not path.exists():
            print_error(err_console, f"path '{path}' does not exist")
            raise typer.Exit(2)
        is_json = path.is_file() and path.suffix == ".json"
        if not path.is_dir() and not is_json:
            print_error(err_console, f"path '{path}' is not a directory (or a JSON config)")
            raise typer.Exit(2)
        root, models = (path, ()) if is_json else resolve_target(path, list(model or []))
        options = for_server(
            ValidateOptions(
                strict=strict,
                models=models,
                model_config_name=model_config_name,
                deep=deep,
                read_sources=deep,
            ),
            target,
            gpus,
            backend_directory,
            python_auto_complete,
        )
        raise typer.Exit(run_validate(root, options, output, console, err_console))
