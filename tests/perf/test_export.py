"""CSV and profile-export JSON against golden files; compare; the PNG plot."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from repokit.perf.errors import PerfError
from repokit.perf.export import (
    compare_rows,
    csv_text,
    load_report,
    profile_export,
    write_csv,
    write_profile_export,
)
from repokit.perf.plot import check_plot_available, plot_series, write_plot
from repokit.perf.report import LevelResult, PerfReport
from repokit.perf.server_stats import ServerBreakdown
from repokit.perf.statistics import RecordBatch, WindowSummary

TESTDATA = Path(__file__).parent / "testdata"
US = 1000


def _summary(throughput: float, avg_us: int, p: tuple[int, int, int, int]) -> WindowSummary:
    return WindowSummary(
        start_ns=1_000_000,
        end_ns=16_000_000_000,
        request_count=int(throughput * 15),
        throughput=throughput,
        avg_latency_ns=avg_us * US + 456,
        std_latency_ns=80 * US,
        percentiles_ns={50: p[0] * US, 90: p[1] * US, 95: p[2] * US, 99: p[3] * US + 999},
        stabilizing_latency_ns=avg_us * US,
        avg_send_ns=12 * US + 999,
        avg_recv_ns=7 * US,
        duration_ns=15_000_000_000,
    )


def make_report() -> PerfReport:
    composing = {
        "add_sub_onnx": ServerBreakdown(
            3000, 2900, 3000, 200 * US, 20 * US, 5 * US, 90 * US, 3 * US
        ),
        "add_sub": ServerBreakdown(3000, 3000, 3000, 400 * US, 30 * US, 6 * US, 250 * US, 4 * US),
    }
    low = LevelResult(
        "concurrency",
        1,
        True,
        _summary(1407.84, 708, (690, 760, 800, 1031)),
        server=ServerBreakdown(
            21118, 21118, 21118, 382 * US, 50 * US, 11 * US, 345 * US, 7 * US, composing=composing
        ),
    )
    high = LevelResult(
        "concurrency",
        4,
        True,
        _summary(3002.5, 1330, (1300, 1500, 1600, 2200)),
        server=ServerBreakdown(
            45037, 30000, 45037, 900 * US, 500 * US, 11 * US, 345 * US, 7 * US, composing={}
        ),
    )
    high.server.composing = {k: v for k, v in composing.items()}  # type: ignore[union-attr]
    n = 3
    low.records = RecordBatch(
        np.array([10, 20, 30]),
        np.array([15, 26, 37]),
        np.zeros(n, int),
        np.zeros(n, int),
        np.zeros(n, bool),
        np.zeros(n, bool),
    )
    low.window_boundaries = [5, 40]
    report = PerfReport(
        "add_sub_ensemble",
        "1",
        "http",
        "localhost:8000",
        "concurrency",
        results=[high, low],
        composing_models=["add_sub_onnx", "add_sub"],
    )
    return report


def test_csv_matches_golden() -> None:
    assert csv_text(make_report()) == (TESTDATA / "report.csv").read_text()


def test_verbose_csv_with_percentile_matches_golden() -> None:
    report = make_report()
    report.percentile = 95
    assert csv_text(report, verbose=True) == (TESTDATA / "report_verbose_p95.csv").read_text()


def test_csv_rows_sorted_by_throughput_and_network_time_clamped() -> None:
    lines = csv_text(make_report()).splitlines()
    assert [line.split(",")[0] for line in lines[1:]] == ["1", "4"]
    # concurrency 4: wait 1330-13-7 = 1310 us minus queue+compute 500+363: 447 us
    assert lines[2].split(",")[3] == "447"


def test_request_rate_csv_and_no_server_stats() -> None:
    report = make_report()
    report.mode = "request_rate"
    report.include_server_stats = False
    for r in report.results:
        r.mode, r.value = "request_rate", r.value * 250.5
    text = csv_text(report)
    assert text.splitlines()[0] == (
        "Request Rate,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,"
        "p95 latency,p99 latency"
    )
    assert text.splitlines()[1].startswith("250.5,1407.84,12,7,690,")


def test_composing_model_csv_files(tmp_path: Path) -> None:
    written = write_csv(make_report(), tmp_path / "out.csv")
    assert [p.name for p in written] == ["out.csv", "add_sub_onnx_v1.out.csv", "add_sub_v1.out.csv"]
    assert (tmp_path / "add_sub_v1.out.csv").read_text() == (
        TESTDATA / "add_sub_v1.report.csv"
    ).read_text()


def test_profile_export_matches_golden_and_round_trips(tmp_path: Path) -> None:
    exported = profile_export(make_report())
    golden = json.loads((TESTDATA / "profile_export.json").read_text())
    assert exported == golden
    path = tmp_path / "run.json"
    write_profile_export(make_report(), path)
    again = load_report(path)
    assert [r.summary.throughput for r in again.results] == [3002.5, 1407.84]
    assert again.results[1].server is not None
    assert again.results[1].server.composing["add_sub"].compute_infer_ns == 250 * US
    high = golden["repokit_report"]["results"][0]["server"]
    assert (high["avg_batch_size"], high["execution_count"]) == (1.501, 30000)
    assert again.results[0].server is not None
    assert again.results[0].server.avg_batch_size == pytest.approx(45037 / 30000)


def test_compare_rows_pair_levels() -> None:
    a = make_report()
    b = make_report()
    b.results[0].summary.throughput *= 1.5
    b.results.pop()  # B has no concurrency 1
    rows = compare_rows(a, b)
    assert [r["value"] for r in rows] == [1, 4]
    assert rows[0]["b_throughput"] is None and "throughput_ratio" not in rows[0]
    assert rows[1]["throughput_ratio"] == pytest.approx(1.5)


def test_compare_rejects_files_that_are_not_repokit_exports(tmp_path: Path) -> None:
    other = tmp_path / "pa.json"
    other.write_text(json.dumps({"experiments": []}))
    with pytest.raises(PerfError) as info:
        load_report(other)
    assert info.value.exit_code == 3 and "repokit_report" in info.value.message
    with pytest.raises(PerfError):
        load_report(tmp_path / "missing.json")


def _sweep(mode: str = "concurrency") -> PerfReport:
    """Throughput falls at the highest level, so throughput order is not level order."""
    report = PerfReport("add_sub", "1", "http", "localhost:8000", mode)
    figures = [
        (1, 500.0, (1900, 2100, 2200, 2500)),
        (2, 900.0, (2100, 2500, 2700, 3100)),
        (4, 1200.0, (3200, 3900, 4100, 4800)),
        (8, 1000.0, (7000, 8900, 9300, 12000)),
    ]
    for level, throughput, p in reversed(figures):  # stored out of order on purpose
        report.results.append(LevelResult(mode, float(level), True, _summary(throughput, p[0], p)))
    return report


def test_plot_series_in_level_order_with_every_percentile() -> None:
    series = plot_series(_sweep())
    assert series.levels == ["1", "2", "4", "8"]
    assert series.throughput == [500.0, 900.0, 1200.0, 1000.0]
    assert list(series.latency_ms) == [50, 90, 99]
    assert series.latency_ms[50] == [1.9, 2.1, 3.2, 7.0]
    report = _sweep("request_rate")
    report.percentile = 95
    assert list(plot_series(report).latency_ms) == [50, 90, 95, 99]


def test_plot_svg_has_title_axes_legend_and_level_labels(tmp_path: Path) -> None:
    path = tmp_path / "sweep.svg"
    write_plot(_sweep(), path)
    text = path.read_text()
    assert text.startswith("<?xml") and "<svg" in text
    assert "add_sub v1 over http: latency against throughput" in text
    assert "throughput (infer/s)" in text and "latency (ms)" in text
    for label in ("p50", "p90", "p99"):
        assert f">{label}<" in text
    labels = re.findall(r">(\d+)</text>", text)
    assert [v for v in labels if v in {"1", "2", "4", "8"}][-4:] == ["1", "2", "4", "8"]


def test_plot_png_is_a_picture(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "sweep.png"
    write_plot(_sweep(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.size == (990, 616)
        pixels = np.asarray(image.convert("RGB"))
    # matplotlib's first line colour (p50) is drawn
    assert np.any(np.all(pixels == (31, 119, 180), axis=-1))


def test_plot_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PerfError) as info:
        check_plot_available(tmp_path / "sweep.jpg")
    assert info.value.exit_code == 3 and ".png, .svg, .pdf" in info.value.message
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(PerfError) as info:
        check_plot_available(tmp_path / "sweep.png")
    assert "pip install 'repokit[plot]'" in info.value.message
