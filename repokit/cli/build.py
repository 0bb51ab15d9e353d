"""``repokit build SRC -o OUT``: compile a repository (completed configs, TensorRT profiles,
warmup samples, engines where TensorRT is usable, ``repokit.lock.json``).

Exit codes: 0 built (or up to date), 1 a model failed (or ``--check`` found the output out of
date, or ``--engine require`` without TensorRT), 2 usage errors (bad paths or options).
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn

from repokit.cli.output import examples, make_console, print_data

_STATUS_STYLE = {
    "built": "green",
    "up-to-date": "dim",
    "copied": "cyan",
    "failed": "bold red",
    "out-of-date": "yellow",
}


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"


class EngineMode(str, enum.Enum):
    auto = "auto"
    require = "require"


class Target(str, enum.Enum):
    tensorrt = "tensorrt"


class WarmupData(str, enum.Enum):
    zero = "zero"
    random = "random"


def render_text(report: Any, console: Console) -> None:
    """One line per model, then its reason, diagnostics and notes."""
    for model in report.models:
        style = _STATUS_STYLE.get(model.status, "")
        target = f" -> {model.target}" if model.target else ""
        extras = []
        if model.profiles:
            extras.append(f"{len(model.profiles)} profile(s)")
        if model.warmup:
            samples = len({w["sample"] for w in model.warmup})
            extras.append(f"{samples} warmup sample(s)")
        if model.engine.built:
            extras.append("engine built")
        tail = f" ({', '.join(extras)})" if extras else ""
        console.print(
            f"[{style}]{model.status:>11}[/] [bold]{escape(model.name)}[/]{escape(target)}"
            + escape(tail)
        )
        restated = any(d.message == model.reason for d in model.diagnostics)
        if model.reason and model.status != "up-to-date" and not restated:
            console.print(f"             {escape(model.reason)}", soft_wrap=True)
        for d in model.diagnostics:
            where = f"{d.path}: " if d.path else ""
            console.print(
                f"             [red]{d.severity.value}[/] [dim]{escape(d.rule)}[/] "
                f"{escape(where + d.message)}",
                soft_wrap=True,
            )
        for note in model.notes:
            console.print(f"             [yellow]note[/] {escape(note)}", soft_wrap=True)
    for d in report.diagnostics:
        console.print(
            f"[red]{d.severity.value}[/] [dim]{escape(d.rule)}[/] {escape(d.model)}: "
            f"{escape(d.message)}",
            soft_wrap=True,
        )
    for name in report.removed:
        console.print(f"    removed {escape(name)} (no longer in the source)")
    if report.check:
        if report.out_of_date:
            console.print(f"out of date: {escape(', '.join(report.out_of_date))}")
        else:
            console.print("the compiled repository is up to date")
    else:
        counts: dict[str, int] = {}
        for model in report.models:
            counts[model.status] = counts.get(model.status, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no models"
        console.print(f"{escape(str(report.output))}: {summary}")


def build(
    source: Annotated[Path, typer.Argument(help="Source model repository.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Compiled repository to write.")
    ] = None,
    profile: Annotated[
        bool, typer.Option("--profile", help="Derive optimization profiles and warmup samples.")
    ] = False,
    profiles: Annotated[
        int,
        typer.Option(
            "--profiles", min=1, metavar="N", help="Split the batch range into N profiles."
        ),
    ] = 1,
    split_at_preferred: Annotated[
        bool,
        typer.Option("--split-at-preferred", help="End batch ranges at the preferred sizes."),
    ] = False,
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            metavar="NAME:MIN,OPT,MAX",
            help="NAME:MIN,OPT,MAX non-batch range of a dynamic input (each an integer or AxB).",
        ),
    ] = None,
    sample_data: Annotated[
        Path | None,
        typer.Option("--sample-data", help="perf_analyzer input-data JSON with sample inputs."),
    ] = None,
    to: Annotated[
        Target | None, typer.Option("--to", help="Convert ONNX models to TensorRT plans.")
    ] = None,
    engine: Annotated[
        EngineMode,
        typer.Option(
            "--engine",
            help="auto: skip engines without TensorRT; require: fail without it "
            "(implies --to tensorrt).",
        ),
    ] = EngineMode.auto,
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare TensorRT with ONNX Runtime after building.")
    ] = False,
    in_place: Annotated[
        bool, typer.Option("--in-place", help="Rewrite the source repository.")
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when the compiled repository is out of date.")
    ] = False,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", help="Report format.")
    ] = OutputFormat.text,
    workspace: Annotated[
        int,
        typer.Option("--workspace", min=1, metavar="MB", help="TensorRT workspace limit in MB."),
    ] = 1024,
    model: Annotated[
        list[str] | None,
        typer.Option("--model", metavar="NAME", help="Only build this model (repeatable)."),
    ] = None,
    fp16: Annotated[
        bool, typer.Option("--fp16", help="FP16 builder flag (TensorRT < 11 only).")
    ] = False,
    warmup_data: Annotated[
        WarmupData, typer.Option("--warmup-data", help="Warmup file contents.")
    ] = WarmupData.zero,
) -> None:
    """Compile a model repository: completed configs, profiles, warmup, engines, lock file."""
    from repokit.build.builder import BuildUsageError, build_repository
    from repokit.build.profiles import ProfileError, parse_shape_option
    from repokit.build.report import BuildOptions

    errors = make_console(stderr=True)
    if engine is EngineMode.require and to is None:
        # require is about the conversion: asking for it means asking for the conversion
        errors.print("note: --engine require implies --to tensorrt")
        to = Target.tensorrt
    if output is None and not in_place:
        errors.print("[red]error:[/] give the output repository with -o OUT (or use --in-place)")
        raise typer.Exit(2)
    if split_at_preferred and profiles != 1:
        errors.print("[red]error:[/] --profiles and --split-at-preferred exclude each other")
        raise typer.Exit(2)
    try:
        shapes = tuple(parse_shape_option(s) for s in shape or [])
    except ProfileError as exc:
        errors.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    options = BuildOptions(
        profile=profile,
        profiles=profiles,
        split_at_preferred=split_at_preferred,
        shapes=shapes,
        sample_data=sample_data,
        to="tensorrt" if to is Target.tensorrt else "",
        engine=engine.value,
        verify=verify,
        in_place=in_place,
        check=check,
        workspace_mb=workspace,
        models=tuple(model or ()),
        fp16=fp16,
        warmup_data=warmup_data.value,
    )
    console = make_console()
    show_progress = output_format is OutputFormat.text and errors.is_terminal
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        console=errors,
        transient=True,
        disable=not show_progress,
    ) as bar:
        task = bar.add_task("build", total=None)
        finished = {"up-to-date", "built", "copied", "failed", "out-of-date"}

        def on_progress(name: str, stage: str) -> None:
            bar.update(task, description=f"{stage} {name}")
            if stage in finished:
                bar.advance(task)

        try:
            report = build_repository(source, output or source, options, progress=on_progress)
        except BuildUsageError as exc:
            bar.stop()
            errors.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(2) from None
        except OSError as exc:  # unwritable output, full disk, ...
            bar.stop()
            where = f" ({exc.filename})" if exc.filename else ""
            errors.print(f"[red]error:[/] {escape(exc.strerror or str(exc))}{escape(where)}")
            raise typer.Exit(1) from None
    if output_format is OutputFormat.json:
        print_data(console, json.dumps(report.to_dict(), indent=2))
    else:
        render_text(report, console)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command(
        "build",
        epilog=examples(
            "repokit build ./models -o ./compiled --profile",
            "repokit build ./models -o ./compiled --check",
            "repokit build ./models -o ./compiled --profile --sample-data inputs.json",
            "repokit build ./models -o ./compiled --to tensorrt --engine require",
        ),
    )(build)
