"""``--plot FILE``: latency percentiles against throughput over the sweep, drawn with matplotlib
(the optional ``repokit[plot]`` extra).

One line per percentile (p50, p90, p99, and ``--percentile`` when another one is asked for),
each point a load level, joined in level order (concurrency 1, 2, 4, ...; never sorted by
throughput, which would zigzag when throughput falls at high load), every point labelled with its
level. The file suffix picks the format: ``.png``, ``.svg`` or ``.pdf``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repokit.perf.errors import GENERIC_ERROR, OPTION_ERROR, PerfError
from repokit.perf.report import PerfReport

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
PERCENTILES = (50, 90, 99)
_MARKERS = ("o", "s", "^", "D")


def plot_format(path: Path) -> str:
    """The format the suffix asks for; PerfError (option error) for any other suffix."""
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise PerfError(
            f"--plot '{path}': the file name must end in {', '.join(FORMATS)} (the format)",
            OPTION_ERROR,
        )
    return found


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PerfError(
            "--plot needs matplotlib, which is not installed: pip install 'repokit[plot]'",
            OPTION_ERROR,
        ) from None
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def check_plot_available(path: Path) -> None:
    """Fail before measuring, not after: the suffix is known and matplotlib is importable."""
    plot_format(path)
    _pyplot()


def percentiles_for(report: PerfReport) -> list[int]:
    extra = [report.percentile] if report.percentile > 0 else []
    return sorted({*PERCENTILES, *extra})


def _level_text(report: PerfReport, value: float) -> str:
    return str(int(value)) if report.mode == "concurrency" else f"{value:g}"


def _title(report: PerfReport) -> str:
    version = f" v{report.version}" if report.version else ""
    kind = {"concurrency": "concurrency", "request_rate": "request rate"}.get(
        report.mode, "request intervals"
    )
    return (
        f"{report.model}{version} over {report.protocol}: latency against throughput "
        f"(batch {report.batch_size}, points labelled with the {kind})"
    )


@dataclass(frozen=True)
class PlotSeries:
    """What the picture shows, in level order: x = throughput, y = latency (ms) per percentile."""

    levels: list[str]
    throughput: list[float]
    latency_ms: dict[int, list[float]]


def plot_series(report: PerfReport) -> PlotSeries:
    results = sorted(report.results, key=lambda r: r.value)
    return PlotSeries(
        levels=[_level_text(report, r.value) for r in results],
        throughput=[r.summary.throughput for r in results],
        latency_ms={
            p: [r.summary.percentiles_ns.get(p, 0) / 1e6 for r in results]
            for p in percentiles_for(report)
        },
    )


def write_plot(report: PerfReport, path: Path) -> None:
    """Draw the sweep into ``path`` in the format its suffix names."""
    fmt = plot_format(path)
    plt = _pyplot()
    series = plot_series(report)
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG text stays text
        figure, axes = plt.subplots(figsize=(9, 5.6), dpi=110)
        try:
            _draw(axes, report, series)
            figure.tight_layout()
            figure.savefig(path, format=fmt)
        except (ValueError, RuntimeError) as exc:  # matplotlib's own failures
            raise PerfError(
                f"--plot: matplotlib could not draw the sweep: {exc}", GENERIC_ERROR
            ) from None
        finally:
            plt.close(figure)


def _draw(axes: Any, report: PerfReport, series: PlotSeries) -> None:
    top = max(series.latency_ms)
    for index, (p, latency_ms) in enumerate(series.latency_ms.items()):
        axes.plot(
            series.throughput,
            latency_ms,
            marker=_MARKERS[index % len(_MARKERS)],
            markersize=6,
            linewidth=1.6,
            label=f"p{p}",
        )
        if p == top:
            for level, x, y in zip(series.levels, series.throughput, latency_ms, strict=True):
                axes.annotate(level, (x, y), textcoords="offset points", xytext=(5, 6), fontsize=9)
    axes.set_title(_title(report), fontsize=11)
    axes.set_xlabel("throughput (infer/s)")
    axes.set_ylabel("latency (ms)")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(True, color="#dddddd", linewidth=0.8)
    axes.legend(title="percentile", loc="upper left")
