"""The plain-data result of a perf run, and its JSON form (used by ``repokit perf compare``).

:class:`PerfReport` holds one :class:`LevelResult` per concurrency / request-rate level: the
merged summary of its stable windows (or its last windows when it did not stabilize), every
window's summary, the server-side breakdown and scraped metrics; with several endpoints
(``-u a,b``) those are the merge over all of them and :class:`EndpointResult` holds each
one's. The CLI renders it; the writers in :mod:`repokit.perf.export` write perf_analyzer's
CSV and profile-export JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from repokit.perf.server_stats import ServerBreakdown
from repokit.perf.statistics import RecordBatch, WindowSummary


@dataclass
class EndpointResult:
    """One endpoint's share of a level when ``-u`` names several: its merged windows and the
    breakdown from its own statistics."""

    url: str
    summary: WindowSummary
    server: ServerBreakdown | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "summary": summary_to_dict(self.summary),
            "server": self.server.to_dict() if self.server is not None else None,
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> EndpointResult:
        server = data.get("server")
        return EndpointResult(
            url=str(data["url"]),
            summary=summary_from_dict(data["summary"]),
            server=ServerBreakdown.from_dict(server) if server else None,
        )


@dataclass
class LevelResult:
    mode: str  # "concurrency" | "request_rate" | "request_intervals" | "periodic_concurrency"
    value: float
    stable: bool
    summary: WindowSummary
    windows: list[WindowSummary] = field(default_factory=list)
    server: ServerBreakdown | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    records: RecordBatch | None = None  # the merged windows' requests (profile export)
    window_boundaries: list[int] = field(default_factory=list)
    # per endpoint when -u names several (summary and server above are then the merge of all)
    endpoints: list[EndpointResult] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.mode == "concurrency":
            return f"concurrency {int(self.value)}"
        if self.mode == "periodic_concurrency":
            return f"periodic concurrency {int(self.value)}"
        return f"request rate {self.value:g}"

    def to_dict(self) -> dict[str, Any]:
        out = {
            "mode": self.mode,
            "value": self.value,
            "stable": self.stable,
            "summary": summary_to_dict(self.summary),
            "windows": [summary_to_dict(w) for w in self.windows],
            "server": self.server.to_dict() if self.server is not None else None,
            "metrics": self.metrics,
            "warnings": self.warnings,
        }
        if self.endpoints:  # only with several -u endpoints
            out["endpoints"] = [e.to_dict() for e in self.endpoints]
        return out

    @staticmethod
    def from_dict(data: dict[str, Any]) -> LevelResult:
        server = data.get("server")
        return LevelResult(
            mode=str(data["mode"]),
            value=float(data["value"]),
            stable=bool(data.get("stable", True)),
            summary=summary_from_dict(data["summary"]),
            windows=[summary_from_dict(w) for w in data.get("windows", [])],
            server=ServerBreakdown.from_dict(server) if server else None,
            metrics=dict(data.get("metrics", {})),
            warnings=list(data.get("warnings", [])),
            endpoints=[EndpointResult.from_dict(e) for e in data.get("endpoints", [])],
        )


def summary_to_dict(summary: WindowSummary) -> dict[str, Any]:
    out = asdict(summary)
    out["percentiles_ns"] = {str(k): v for k, v in summary.percentiles_ns.items()}
    return out


def summary_from_dict(data: dict[str, Any]) -> WindowSummary:
    values = dict(data)
    values["percentiles_ns"] = {int(k): int(v) for k, v in data["percentiles_ns"].items()}
    return WindowSummary(**values)


@dataclass
class PerfReport:
    model: str
    version: str
    protocol: str
    url: str
    mode: str
    batch_size: int = 1
    percentile: int = -1
    results: list[LevelResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exit_code: int = 0
    message: str = ""
    include_server_stats: bool = True
    decoupled: bool = False
    response_cache: bool = False
    composing_models: list[str] = field(default_factory=list)
    collect_metrics: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "protocol": self.protocol,
            "url": self.url,
            "mode": self.mode,
            "batch_size": self.batch_size,
            "percentile": self.percentile,
            "exit_code": self.exit_code,
            "message": self.message,
            "warnings": self.warnings,
            "include_server_stats": self.include_server_stats,
            "composing_models": self.composing_models,
            "results": [r.to_dict() for r in self.results],
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> PerfReport:
        return PerfReport(
            model=str(data["model"]),
            version=str(data.get("version", "")),
            protocol=str(data.get("protocol", "")),
            url=str(data.get("url", "")),
            mode=str(data.get("mode", "concurrency")),
            batch_size=int(data.get("batch_size", 1)),
            percentile=int(data.get("percentile", -1)),
            results=[LevelResult.from_dict(r) for r in data.get("results", [])],
            warnings=list(data.get("warnings", [])),
            exit_code=int(data.get("exit_code", 0)),
            message=str(data.get("message", "")),
            include_server_stats=bool(data.get("include_server_stats", True)),
            composing_models=list(data.get("composing_models", [])),
        )
