"""Prometheus text exposition with Triton's per-model ``nv_*`` families (§9.1).

Rendered on demand from the same :class:`ModelStats` counters the statistics extension uses;
family order, HELP texts and label order (sorted, as prometheus-cpp writes them) follow
Triton 2.51's ``/metrics`` output. ``nv_model_load_duration_secs`` comes from later Triton
releases. The CPU gauges (:mod:`repokit.core.cpu_metrics`) and the latency summaries
(:mod:`repokit.core.latency_summary`) follow the per-model families, as in Triton's output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from repokit.core.settings import MetricsSettings
from repokit.core.statistics import FAILURE_REASONS, ModelStats


@dataclass(frozen=True)
class MetricSource:
    """One READY model version: its counters, pending requests and metric_tags labels."""

    stats: ModelStats
    pending: int
    tags: tuple[tuple[str, str], ...] = ()


_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], int]], ...] = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success.count,
    ),
    (
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        lambda s: s.fail.count,
    ),
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        lambda s: s.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: (s.success.ns + s.fail.ns) // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        lambda s: s.queue.ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda s: s.compute_input.ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda s: s.compute_infer.ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached "
        "requests)",
        lambda s: s.compute_output.ns // 1000,
    ),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(source: MetricSource, extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = [
        ("model", source.stats.name),
        ("version", str(source.stats.version)),
        *((f"_{key}", value) for key, value in source.tags),
        *extra,
    ]
    pairs.sort()
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs) + "}"


def _header(lines: list[str], name: str, help_text: str, kind: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


_SUMMARIES = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
        "request",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
)


def _quantile_text(value: float) -> str:
    if math.isnan(value):
        return "Nan"  # as prometheus-cpp writes it
    return str(int(value)) if value == int(value) else repr(value)


def _render_summaries(
    lines: list[str], sources: list[MetricSource], quantiles: tuple[float, ...]
) -> None:
    for name, help_text, which in _SUMMARIES:
        _header(lines, name, help_text, "summary")
        for source in sources:
            summaries = source.stats.summaries
            if summaries is None:
                continue
            summary = summaries.request if which == "request" else summaries.queue
            lines.append(f"{name}_count{_labels(source)} {summary.count}")
            lines.append(f"{name}_sum{_labels(source)} {summary.total_us}")
            labels = _labels(source)[:-1]  # prometheus-cpp puts quantile after the others
            for q, value in zip(quantiles, summary.quantiles(quantiles), strict=True):
                lines.append(f'{name}{labels},quantile="{q!r}"}} {_quantile_text(value)}')


def render_metrics(
    sources: list[MetricSource],
    cpu_lines: Sequence[str] = (),
    settings: MetricsSettings | None = None,
) -> str:
    """The text exposition (always ends with a newline): the per-model counters (unless
    ``counter_latencies`` is off, which drops the duration counters as Triton does), the
    pending gauge, the load duration, the CPU gauges given and the latency summaries."""
    settings = settings or MetricsSettings()
    lines: list[str] = []
    for name, help_text, read in _COUNTERS:
        if not settings.counter_latencies and name.endswith("_duration_us"):
            continue
        _header(lines, name, help_text, "counter")
        for source in sources:
            if name == "nv_inference_request_failure":
                for reason in FAILURE_REASONS:
                    count = source.stats.failures.get(reason, 0)
                    lines.append(f"{name}{_labels(source, [('reason', reason)])} {count}")
            else:
                lines.append(f"{name}{_labels(source)} {read(source.stats)}")
    _header(
        lines,
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        "gauge",
    )
    for source in sources:
        lines.append(f"nv_inference_pending_request_count{_labels(source)} {source.pending}")
    _header(lines, "nv_model_load_duration_secs", "Model load time in seconds", "gauge")
    for source in sources:
        value = repr(round(source.stats.load_duration_secs, 6))
        lines.append(f"nv_model_load_duration_secs{_labels(source)} {value}")
    lines.extend(cpu_lines)
    if settings.summary_latencies:
        _render_summaries(lines, sources, settings.summary_quantiles)
    return "\n".join(lines) + "\n"
