"""Server-side breakdown from the statistics extension: deltas of cumulative counters.

:func:`parse_statistics` reads ``/v2/models/{m}/stats`` (or ``/v2/models/stats``, or gRPC
``ModelStatistics`` converted to the same JSON) into :class:`ServerCounters` per model name
(versions summed). The profiler takes a snapshot at each window boundary; the window's
breakdown is ``end - start``. For an ensemble the queue and compute times are those of its
composing models added up per ensemble request (perf_analyzer does the same), and each
composing model keeps its own breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

_DURATIONS = (
    "success",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


@dataclass
class ServerCounters:
    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_ns: int = 0

    def __add__(self, other: ServerCounters) -> ServerCounters:
        return ServerCounters(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )

    def __sub__(self, other: ServerCounters) -> ServerCounters:
        return ServerCounters(
            *(getattr(self, f.name) - getattr(other, f.name) for f in fields(self))
        )


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def parse_statistics(document: dict[str, Any]) -> dict[str, ServerCounters]:
    out: dict[str, ServerCounters] = {}
    for entry in document.get("model_stats", []) or []:
        stats = entry.get("inference_stats") or {}
        counters = ServerCounters(
            inference_count=_int(entry.get("inference_count")),
            execution_count=_int(entry.get("execution_count")),
        )
        for key in _DURATIONS:
            part = stats.get(key) or {}
            setattr(counters, f"{key}_count", _int(part.get("count")))
            setattr(counters, f"{key}_ns", _int(part.get("ns")))
        name = str(entry.get("name", ""))
        out[name] = out[name] + counters if name in out else counters
    return out


@dataclass
class ServerBreakdown:
    """Averages per request in ns over one window (or merged windows)."""

    inference_count: int
    execution_count: int
    success_count: int
    avg_request_ns: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    cache_hit_ns: int = 0
    cache_miss_ns: int = 0
    composing: dict[str, ServerBreakdown] = field(default_factory=dict)

    @property
    def compute_ns(self) -> int:
        return self.compute_input_ns + self.compute_infer_ns + self.compute_output_ns

    @property
    def avg_batch_size(self) -> float:
        """Inferences per model execution: how well the server batched (0 without executions)."""
        return self.inference_count / self.execution_count if self.execution_count else 0.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "composing"
        }
        out["avg_batch_size"] = round(self.avg_batch_size, 3)
        out["composing"] = {k: v.to_dict() for k, v in self.composing.items()}
        return out

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ServerBreakdown:
        composing = {k: ServerBreakdown.from_dict(v) for k, v in data.get("composing", {}).items()}
        derived = ("composing", "avg_batch_size")
        values = {k: int(v) for k, v in data.items() if k not in derived}
        return ServerBreakdown(**values, composing=composing)


def _avg(total: int, count: int) -> int:
    return total // count if count > 0 else 0


def breakdown(counters: ServerCounters) -> ServerBreakdown:
    c = counters
    return ServerBreakdown(
        inference_count=c.inference_count,
        execution_count=c.execution_count,
        success_count=c.success_count,
        avg_request_ns=_avg(c.success_ns, c.success_count),
        queue_ns=_avg(c.queue_ns, c.queue_count),
        compute_input_ns=_avg(c.compute_input_ns, c.compute_input_count),
        compute_infer_ns=_avg(c.compute_infer_ns, c.compute_infer_count),
        compute_output_ns=_avg(c.compute_output_ns, c.compute_output_count),
        cache_hit_ns=_avg(c.cache_hit_ns, c.cache_hit_count),
        cache_miss_ns=_avg(c.cache_miss_ns, c.cache_miss_count),
    )


def window_breakdown(
    start: dict[str, ServerCounters],
    end: dict[str, ServerCounters],
    model: str,
    composing: list[str],
    own_work: frozenset[str] = frozenset(),
) -> ServerBreakdown:
    """The level's server figures; an ensemble's queue and compute are its steps' sums.
    ``own_work`` (--bls-composing-models) are listed under the model without replacing its
    own figures: a BLS model computes itself, its calls included."""

    def delta(name: str) -> ServerCounters:
        return end.get(name, ServerCounters()) - start.get(name, ServerCounters())

    top = delta(model)
    result = breakdown(top)
    if composing:
        parts = {name: delta(name) for name in composing}
        result.composing = {name: breakdown(c) for name, c in parts.items()}
        parts = {name: c for name, c in parts.items() if name not in own_work}
        if not parts:
            return result
        per_request = max(top.success_count, 1)
        result.queue_ns = sum(c.queue_ns for c in parts.values()) // per_request
        result.compute_input_ns = sum(c.compute_input_ns for c in parts.values()) // per_request
        result.compute_infer_ns = sum(c.compute_infer_ns for c in parts.values()) // per_request
        result.compute_output_ns = sum(c.compute_output_ns for c in parts.values()) // per_request
    return result
