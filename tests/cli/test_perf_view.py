"""repokit perf's live view and report on a terminal (rich) and piped (plain lines): the
progress bar on its own line, -v window and server lines, batch size and execution columns."""

from __future__ import annotations

import io
import re

from rich.console import Console

from repokit.cli.output import plain_console
from repokit.cli.perf import LiveView, render_report
from repokit.perf.profiler import WindowProgress
from tests.cli.test_output_discipline import _perf_report, _summary

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _progress() -> WindowProgress:
    windows = [_summary(1000.0), _summary(1010.0)]
    return WindowProgress("concurrency 4", 3, 10, 2.5, "5 s", 2500, 1000.0, windows)


def test_terminal_live_view_puts_bar_and_table_header_on_separate_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system="standard")
    console.print(LiveView(console, 10.0)._render(_progress()))
    lines = [line.rstrip() for line in ANSI.sub("", out.getvalue()).splitlines()]
    assert lines[0].startswith("concurrency 4  window 3/10  2.5 s of 5 s")
    bar = lines[1]
    assert "━" in bar and bar.endswith("50%") and "window" not in bar
    assert lines[2].split() == ["window", "infer/s", "avg", "us", "p99", "us"]
    assert lines[3].split()[:2] == ["1", "1,000.0"]
    assert lines[-1].startswith("stability over last 3")


def test_piped_view_prints_plain_lines_and_verbose_adds_windows_and_server() -> None:
    report = _perf_report()
    out = io.StringIO()
    view = LiveView(plain_console(file=out), 10.0)
    view.level_started("concurrency 1")
    view.window_done(_progress(), _summary(1000.0))
    view.level_done(report.results[0])
    assert out.getvalue().splitlines() == [
        "concurrency 1: 6,123.4 infer/s, latency avg 1,234 us, p99 4,000 us (stable, 0 windows)"
    ]
    out = io.StringIO()
    view = LiveView(plain_console(file=out), 10.0, verbose=1)
    view.level_started("concurrency 1")
    view.window_done(_progress(), _summary(1000.0))
    view.level_done(report.results[0])
    lines = out.getvalue().splitlines()
    assert lines.pop(0) == "Request concurrency: 1"  # perf_analyzer's heading, with -v
    assert lines[0].startswith("  concurrency 4 window 3: 1,000.0 infer/s, ")
    assert lines[2] == (
        "  server: 10 inferences in 5 executions (avg batch 2.00), request 900 us, queue 100 us,"
        " compute input 200 us, infer 300 us, output 400 us"
    )
    assert "\x1b" not in out.getvalue()


def test_verbose_view_heads_each_level_as_perf_analyzer_does() -> None:
    out = io.StringIO()
    view = LiveView(plain_console(file=out), 10.0, verbose=1)
    view.level_started("request rate 40")
    view.level_started("concurrency 8")
    assert out.getvalue().splitlines() == [
        "Request Rate: 40 inference requests per seconds",
        "Request concurrency: 8",
    ]


def test_report_shows_average_batch_size_and_executions_piped_and_on_a_terminal() -> None:
    out = io.StringIO()
    render_report(_perf_report(), plain_console(file=out))
    lines = out.getvalue().splitlines()
    assert lines[1].split()[-2:] == ["batch", "execs"]
    assert lines[2].split()[-2:] == ["2.00", "5"]
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system="standard")
    render_report(_perf_report(), console)
    text = ANSI.sub("", out.getvalue())
    assert "batch" in text and "execs" in text and "2.00" in text
