"""Output discipline of every command: plain, never wrapped or cut short when the output is not a
terminal; rich on a terminal; JSON always plain; help with whole option names at any width."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import traceback
from importlib import metadata
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.cli.output import (
    Column,
    TableData,
    make_console,
    plain_console,
    print_table,
    table_text,
)
from repokit.cli.perf import render_compare, render_report
from repokit.cli.serve_tables import models_table
from repokit.perf.report import LevelResult, PerfReport
from repokit.perf.server_stats import ServerBreakdown
from repokit.perf.statistics import WindowSummary
from tests.config.validate_helpers import make_model, python_config

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PIPED = {"COLUMNS": "80", "TTY_COMPATIBLE": "", "FORCE_COLOR": None, "TERM": "xterm-256color"}
TERMINAL = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "FORCE_COLOR": None, "TERM": "xterm-256color"}
COMMANDS = [
    ["validate"],
    ["lint"],
    ["explain"],
    ["serve"],
    ["build"],
    ["perf"],
    ["perf", "compare"],
]
LONG_REASON = (
    "'max_batch_size' must be non-negative value for add_sub (got -1); use 0 for a model that "
    "does not batch"
)


def _invoke(args: list[str], env: dict[str, str | None], color: bool = False) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(), args, env=env, color=color)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # an exception the command did not turn into a message: show it in the assertion
        trace = "".join(traceback.format_exception(result.exception))
        return result.exit_code, result.output + "\n" + trace
    return result.exit_code, result.output


# --- errors and findings -------------------------------------------------------------------


def test_usage_error_is_one_line_when_piped(tmp_path: Path) -> None:
    deep = tmp_path / ("a-long-directory-name-" * 4) / "file.txt"
    deep.parent.mkdir(parents=True)
    deep.write_text("x")
    for command in (["validate"], ["lint"]):
        code, output = _invoke([*command, str(deep)], PIPED)
        assert code == 2
        [line] = output.splitlines()
        assert line.startswith("error: ") and str(deep) in line and "is not a directory" in line
        assert "\x1b" not in output


def test_findings_are_plain_and_whole_when_piped(tmp_path: Path) -> None:
    make_model(tmp_path, "bad", config=python_config("max_batch_size: -1"))
    code, output = _invoke(["validate", str(tmp_path)], {**PIPED, "COLUMNS": "40"})
    assert code == 1 and "\x1b" not in output
    message = next(line for line in output.splitlines() if "must be non-negative" in line)
    assert len(message) > 40 and message.strip().endswith("does not batch")


def test_findings_are_rich_on_a_terminal(tmp_path: Path) -> None:
    make_model(tmp_path, "bad", config=python_config("max_batch_size: -1"))
    code, output = _invoke(["validate", str(tmp_path)], TERMINAL)
    assert code == 1 and ANSI.search(output)
    assert "must be non-negative" in ANSI.sub("", output)


@pytest.mark.parametrize("env", [PIPED, TERMINAL], ids=["piped", "terminal"])
@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_machine_formats_are_plain_json_everywhere(
    tmp_path: Path, env: dict[str, str | None], fmt: str
) -> None:
    make_model(tmp_path, "bad", config=python_config("max_batch_size: -1"))
    for command in ("validate", "lint"):
        code, output = _invoke([command, str(tmp_path), "--format", fmt], env)
        assert code == 1 and "\x1b" not in output
        assert json.loads(output)


# --- tables ---------------------------------------------------------------------------------


def _table() -> TableData:
    table = TableData([Column("Model"), Column("infer/s", justify="right")], title="Models")
    table.add_row("a_model_with_a_long_name_" * 3, "6,123.4")
    table.add_row("b", "12.0", style="red")
    return table


def test_plain_table_is_aligned_text_never_cut() -> None:
    lines = table_text(_table())
    assert lines[0] == "Models"
    assert lines[1].split() == ["Model", "infer/s"]
    assert lines[2].endswith("6,123.4") and lines[2].startswith("a_model_with_a_long_name_" * 3)
    assert len(lines[3]) == len(lines[2]) and lines[3].endswith("   12.0")
    out = io.StringIO()
    print_table(plain_console(file=out), _table())
    assert out.getvalue().splitlines() == lines
    assert "…" not in out.getvalue() and "│" not in out.getvalue()


def test_terminal_table_is_rich_and_folds_instead_of_cutting() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=40, color_system="standard")
    print_table(console, _table())
    text = ANSI.sub("", out.getvalue())
    assert "│" in text or "┃" in text
    assert "…" not in text and "6,123.4" in text
    assert ANSI.search(out.getvalue())  # the red row


def test_make_console_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    assert make_console().is_terminal and make_console(stderr=True).is_terminal
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    console = make_console()
    assert not console.is_terminal and console.width > 10_000 and console.no_color


def _summary(throughput: float) -> WindowSummary:
    return WindowSummary(
        start_ns=0,
        end_ns=10**9,
        request_count=int(throughput),
        throughput=throughput,
        avg_latency_ns=1_234_000,
        std_latency_ns=0,
        percentiles_ns={50: 1_000_000, 90: 2_000_000, 95: 3_000_000, 99: 4_000_000},
        stabilizing_latency_ns=1_234_000,
        avg_send_ns=12_000,
        avg_recv_ns=34_000,
    )


def _perf_report() -> PerfReport:
    server = ServerBreakdown(
        inference_count=10,
        execution_count=5,
        success_count=10,
        avg_request_ns=900_000,
        queue_ns=100_000,
        compute_input_ns=200_000,
        compute_infer_ns=300_000,
        compute_output_ns=400_000,
    )
    report = PerfReport(
        model="simple", version="1", protocol="http", url="localhost:8000", mode="concurrency"
    )
    for level, throughput in ((1, 6_123.4), (64, 123_456.7)):
        report.results.append(
            LevelResult(
                mode="concurrency",
                value=level,
                stable=True,
                summary=_summary(throughput),
                server=server,
            )
        )
    return report


def test_perf_table_piped_shows_every_figure_whole() -> None:
    out = io.StringIO()
    render_report(_perf_report(), plain_console(file=out))
    lines = out.getvalue().splitlines()
    assert lines[0] == "simple v1 over http (localhost:8000)"
    header = lines[1].split()
    assert header[:3] == ["Concurrency", "infer/s", "avg"] and "compute" in header
    assert lines[2].split()[:3] == ["1", "6,123.4", "1,234"]
    assert lines[3].split()[:2] == ["64", "123,456.7"]
    assert "…" not in out.getvalue() and "\x1b" not in out.getvalue()
    out = io.StringIO()
    render_compare(_perf_report(), _perf_report(), ("a.json", "b.json"), plain_console(file=out))
    assert out.getvalue().splitlines()[2].split() == [
        "1", "6,123.4", "6,123.4", "1.00", "4,000", "4,000", "1.00",
    ]  # fmt: skip


def test_perf_table_on_a_terminal_is_rich() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system="standard")
    render_report(_perf_report(), console)
    text = ANSI.sub("", out.getvalue())
    assert "┃" in text or "│" in text
    assert "…" not in text  # folded, not cut, at 80 columns


def test_serve_model_table_piped_keeps_the_whole_reason() -> None:
    index = [
        {"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": LONG_REASON},
        {"name": "simple", "version": "1", "state": "READY"},
    ]
    # tritonserver's table, logged as plain text whatever the output (repokit.core.server_log)
    lines = models_table(index).splitlines()
    rows = [[cell.strip() for cell in line.split("|")[1:4]] for line in lines[1::2][:3]]
    assert rows[0] == ["Model", "Version", "Status"]
    assert [cell.strip() for cell in lines[3].split("|")[1:4]] == [
        "add_sub",
        "1",
        f"UNAVAILABLE: {LONG_REASON}",
    ]
    assert [cell.strip() for cell in lines[4].split("|")[1:4]] == ["simple", "1", "READY"]


# --- help, version, completion ---------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_piped_is_whole_with_examples_and_h_alias(command: list[str]) -> None:
    code, long_help = _invoke([*command, "--help"], PIPED)
    assert code == 0 and "\x1b" not in long_help
    code, short_help = _invoke([*command, "-h"], PIPED)
    assert code == 0 and short_help == long_help
    assert "Examples:" in long_help
    assert f"repokit {' '.join(command)}" in long_help.split("Examples:")[1]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_names_option_values_not_python_types(command: list[str]) -> None:
    """A repeatable option reads ``--model NAME``, a bounded number ``--gpus N``: never the
    ``<list[str]>`` or ``<int range>`` newer typer releases derive from the annotation."""
    code, output = _invoke([*command, "--help"], PIPED)
    assert code == 0
    options = [line for line in output.splitlines() if line.lstrip().startswith("-")]
    assert options
    for line in options:
        assert "list[" not in line and " range>" not in line, line


def test_serve_help_piped_keeps_every_option_name_and_line_whole() -> None:
    code, output = _invoke(["serve", "--help"], PIPED)
    assert code == 0
    for option in (
        "--model-repository",
        "--grpc-http2-min-recv-ping-interval-without-data",
        "--grpc-infer-response-compression-level",
    ):
        assert re.search(rf"(^|[ ,]){option}([ ,]|$)", output, re.M), option
    # never wrapped: an option's help stays on its line however long it is
    assert re.search(
        r"--load-model NAME +Repeatable; '\*' loads every model \(explicit mode\)\.", output
    )
    assert max(len(line) for line in output.splitlines()) > 80


def test_help_on_a_terminal_is_styled_and_fits_the_width() -> None:
    code, output = _invoke(["serve", "--help"], TERMINAL, color=True)
    assert code == 0 and ANSI.search(output)
    text = ANSI.sub("", output)
    assert "--model-repository" in text
    assert "--grpc-http2-min-recv-ping-interval-without-data" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text


def test_version() -> None:
    for env in (PIPED, TERMINAL):
        code, output = _invoke(["--version"], env)
        assert code == 0 and output == f"repokit {metadata.version('repokit')}\n"


def _in_bash(command: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``repokit COMMAND`` typed in bash: typer finds the shell among the parent processes
    (``--show-completion bash`` does not name it: the option is a flag), so the test must not
    depend on what started pytest; ``; exit $?`` keeps bash from exec'ing repokit in its place."""
    repokit = Path(sys.executable).with_name("repokit")
    return subprocess.run(
        ["bash", "-c", f"'{repokit}' {command}; exit $?"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        timeout=60,
    )


def test_completion_show_and_install(tmp_path: Path) -> None:
    shown = _in_bash("--show-completion", tmp_path)
    assert shown.returncode == 0 and "_REPOKIT_COMPLETE" in shown.stdout, shown.stderr
    installed = _in_bash("--install-completion", tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "_REPOKIT_COMPLETE" in (tmp_path / ".bash_completions" / "repokit.sh").read_text()
    assert ".bash_completions/repokit.sh" in (tmp_path / ".bashrc").read_text()


def test_real_pipe_at_80_columns(tmp_path: Path) -> None:
    """Through real pipes (no test runner in between): help and errors are never wrapped."""
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("TTY_COMPATIBLE", None)
    env.pop("FORCE_COLOR", None)
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0 and "\x1b" not in result.stdout
    assert "  --model-repository, --model-store PATH" in result.stdout
    deep = tmp_path / ("a-long-directory-name-" * 4) / "file.txt"
    deep.parent.mkdir(parents=True)
    deep.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "validate", str(deep)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"error: path '{deep}' is not a directory (or a JSON config)\n"


@pytest.mark.parametrize("env", [PIPED, TERMINAL], ids=["piped", "terminal"])
def test_build_report(tmp_path: Path, env: dict[str, str | None]) -> None:
    source = tmp_path / "src"
    make_model(source, "m")
    out = tmp_path / ("a-long-output-directory-name-" * 3) / "out"
    code, output = _invoke(["build", str(source), "-o", str(out)], env)
    assert code == 0, output
    text = ANSI.sub("", output)
    summary = [line for line in text.splitlines() if line.startswith(f"{out}: ")]
    if env is PIPED:
        assert "\x1b" not in output
        assert summary and summary[0].split(": ", 1)[1].startswith("1 ")  # one line, whole
    else:
        assert ANSI.search(output)
        assert str(out).replace("\n", "")[:40] in text.replace("\n", "")
