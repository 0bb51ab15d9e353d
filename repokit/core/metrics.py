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

from repokit.core.response_cache import ResponseCache
from repokit.core.settings import MetricsSettings
from repokit.core.statistics import FAILURE_REASONS, ModelStats


@dataclass(frozen=True)
class MetricSource:
    """One READY model version: its counters, pending requests and metric_tags labels."""

    stats: ModelStats
    pending: int
    tags: tuple[tuple[str, str], ...] = ()
    namespace: str = ""  # --model-namespacing: the model's repository (Triton's label)


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


# per model, for the versions that use the response cache (after the counters, as Triton)
_CACHE_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], int]], ...] = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda s: s.cache_hit.ns // 1000,
    ),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        lambda s: s.cache_miss.count,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        lambda s: s.cache_miss.ns // 1000,
    ),
)

# the server's cache (gauges, after the CPU gauges, as Triton)
_CACHE_GAUGES: tuple[tuple[str, str, Callable[[ResponseCache], float]], ...] = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]", lambda c: c.utilization),
    (
        "nv_cache_num_entries",
        "Number of responses stored in response cache",
        lambda c: c.num_entries,
    ),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda c: c.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda c: c.misses),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda c: c.lookups),
    (
        "nv_cache_num_evictions",
        "Number of cache evictions in response cache",
        lambda c: c.evictions,
    ),
    (
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
        lambda c: c.lookup_ns // 1000,
    ),
    (
        "nv_cache_insertion_duration",
        "Total cache insertion duration, in microseconds",
        lambda c: c.insertion_ns // 1000,
    ),
)

_CACHE_SUMMARIES = (
    (
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds.",
        "cache_hit",
    ),
    (
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds.",
        "cache_miss",
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
    if source.namespace:
        pairs.append(("namespace", source.namespace))
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
    (  # Triton 2.51's help texts of the three compute summaries say "Cumulative"
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        "compute_input",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached"
        " requests)",
        "compute_output",
    ),
)


def _quantile_text(value: float) -> str:
    if math.isnan(value):
        return "Nan"  # as prometheus-cpp writes it
    return str(int(value)) if value == int(value) else repr(value)


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(float(value))


def _render_summaries(
    lines: list[str], sources: list[MetricSource], quantiles: tuple[float, ...]
) -> None:
    cached = [source for source in sources if source.stats.cache_enabled]
    families = _SUMMARIES + (_CACHE_SUMMARIES if cached else ())
    for name, help_text, which in families:
        header = False  # a family without samples is left out, as prometheus-cpp does
        for source in cached if which.startswith("cache") else sources:
            summaries = source.stats.summaries
            if summaries is None or (which == "request" and source.stats.cache_enabled):
                continue  # Triton leaves the request summary out for models with the cache
            if not header:
                _header(lines, name, help_text, "summary")
                header = True
            summary = getattr(summaries, which)
            lines.append(f"{name}_count{_labels(source)} {summary.count}")
            lines.append(f"{name}_sum{_labels(source)} {summary.total_us}")
            labels = _labels(source)[:-1]  # prometheus-cpp puts quantile after the others
            for q, value in zip(quantiles, summary.quantiles(quantiles), strict=True):
                lines.append(f'{name}{labels},quantile="{q!r}"}} {_quantile_text(value)}')


def render_metrics(
    sources: list[MetricSource],
    cpu_lines: Sequence[str] = (),
    settings: MetricsSettings | None = None,
    cache: ResponseCache | None = None,
) -> str:
    """The text exposition (always ends with a newline): the per-model counters (unless
    ``counter_latencies`` is off, which drops the duration counters as Triton does), the
    pending gauge, the load duration, the CPU gauges given, the response ``cache``'s gauges
    and the latency summaries; the ``nv_cache_*_per_model`` families for the versions that
    use the cache."""
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
    cached = [source for source in sources if source.stats.cache_enabled]
    if cached:
        for name, help_text, read in _CACHE_COUNTERS:
            _header(lines, name, help_text, "counter")
            for source in cached:
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
    if cache is not None:
        for name, help_text, gauge in _CACHE_GAUGES:
            _header(lines, name, help_text, "gauge")
            lines.append(f"{name} {_number_text(gauge(cache))}")
    if settings.summary_latencies:
        _render_summaries(lines, sources, settings.summary_quantiles)
    return "\n".join(lines) + "\n"
