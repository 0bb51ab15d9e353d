"""Custom metric families that models register (python models' ``pb_utils.MetricFamily``).

One registry per server (owned by the InferenceService, rendered after Triton's ``nv_*``
families on the metrics endpoint). Families and their series are addressed by integer handles,
which is how instance processes refer to them. Rules follow Triton's metrics API and the
prometheus-cpp registry under it:

- a family name must be a valid Prometheus name; registering a name again with the same kind
  returns the same family, its first description kept (the registry merges families of one
  name and type); with another kind it is refused;
- histogram bucket boundaries must be strictly increasing (duplicates are refused); an empty
  list gives a histogram with only the ``+Inf`` bucket;
- a series is identified by its label set; creating the same labels again shares the series;
- counters only increase (``increment`` with a negative value is refused), gauges take
  ``increment`` and ``set``, histograms only ``observe`` (with the buckets given at creation);
- values are written as prometheus-cpp writes them (``%.16g``; ``+Inf``, ``-Inf``, ``Nan``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from dataclasses import dataclass, field

from repokit.errors import invalid_arg, unsupported

KINDS = ("COUNTER", "GAUGE", "HISTOGRAM")
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_OPS = {"COUNTER": ("increment",), "GAUGE": ("increment", "set"), "HISTOGRAM": ("observe",)}


def format_value(value: float) -> str:
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(value, ".16g")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(labels: tuple[tuple[str, str], ...], extra: str = "") -> str:
    parts = [f'{key}="{_escape(value)}"' for key, value in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


@dataclass
class _Series:
    family: _Family
    labels: tuple[tuple[str, str], ...]
    buckets: tuple[float, ...] = ()
    value: float = 0.0
    counts: list[int] = field(default_factory=list)  # histogram: per bucket (not cumulative)
    total: float = 0.0
    users: int = 1


@dataclass
class _Family:
    name: str
    description: str
    kind: str
    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)
    users: int = 1


class CustomMetrics:
    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._family_handles: dict[int, _Family] = {}
        self._series_handles: dict[int, _Series] = {}
        self._ids = itertools.count(1)

    # --- registration ---------------------------------------------------------------------------
    def family(self, name: str, description: str, kind: str) -> int:
        if kind not in KINDS:
            raise invalid_arg("Unsupported kind passed to MetricFamily constructor.")
        if not _NAME.match(name):
            raise invalid_arg(f"Invalid metric name: {name}")
        existing = self._families.get(name)
        if existing is not None:
            if existing.kind != kind:
                raise invalid_arg("Family name already exists with different type")
            # Triton's registry merges a family added again under its name: the first
            # description stays (prometheus-cpp compares only the type and constant labels)
            existing.users += 1
            chosen = existing
        else:
            chosen = self._families[name] = _Family(name, description, kind)
        handle = next(self._ids)
        self._family_handles[handle] = chosen
        return handle

    def metric(self, family: int, labels: dict[str, str], buckets: list[float] | None) -> int:
        owner = self._family(family)
        for label in labels:
            if not _LABEL.match(label) or label.startswith("__"):
                raise invalid_arg(f"Invalid label name: {label}")
        if owner.kind == "HISTOGRAM":
            if buckets is None:  # an empty list is a histogram with only the +Inf bucket
                raise invalid_arg("Bucket boundaries not found in Metric args.")
            if any(low >= high for low, high in itertools.pairwise(buckets)):
                raise invalid_arg("Bucket Boundaries must be strictly sorted")
        elif buckets:
            raise invalid_arg(f"Unexpected args found in {owner.kind.lower()} Metric constructor.")
        key = tuple(sorted(labels.items()))
        series = owner.series.get(key)
        if series is None:
            bounds = tuple(buckets or ())
            series = owner.series[key] = _Series(owner, key, bounds, counts=[0] * (len(bounds) + 1))
        else:
            series.users += 1
        handle = next(self._ids)
        self._series_handles[handle] = series
        return handle

    def release(self, family: int, metric: int) -> None:
        """Drop a handle; a series nobody holds any more disappears from the endpoint."""
        series = self._series_handles.pop(metric, None)
        if series is not None:
            series.users -= 1
            if series.users == 0:
                series.family.series.pop(series.labels, None)
        self._family_handles.pop(family, None)

    # --- values ---------------------------------------------------------------------------------
    def update(self, metric: int, op: str, value: float) -> None:
        series = self._series(metric)
        kind = series.family.kind
        if op not in _OPS[kind]:
            raise unsupported(f"TRITONSERVER_METRIC_KIND_{kind} does not support {op.capitalize()}")
        if op == "increment":
            if kind == "COUNTER" and value < 0:
                raise invalid_arg(
                    "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
                    "non-negative values."
                )
            series.value += value
        elif op == "set":
            series.value = value
        else:
            series.counts[bisect.bisect_left(series.buckets, value)] += 1
            series.total += value

    def value(self, metric: int) -> float:
        series = self._series(metric)
        if series.family.kind == "HISTOGRAM":
            raise unsupported("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")
        return series.value

    def _family(self, handle: int) -> _Family:
        family = self._family_handles.get(handle)
        if family is None:
            raise invalid_arg("Invalid metric operation as the 'MetricFamily' has been deleted.")
        return family

    def _series(self, handle: int) -> _Series:
        series = self._series_handles.get(handle)
        if series is None:
            raise invalid_arg("Could not update metric value. Metric has been invalidated.")
        return series

    # --- exposition -----------------------------------------------------------------------------
    def render(self) -> str:
        """The text exposition of every family that has a series ("" when none)."""
        lines: list[str] = []
        for family in self._families.values():
            if not family.series:
                continue
            lines.append(f"# HELP {family.name} {family.description}")
            lines.append(f"# TYPE {family.name} {family.kind.lower()}")
            for series in family.series.values():
                if family.kind != "HISTOGRAM":
                    text = _label_text(series.labels)
                    lines.append(f"{family.name}{text} {format_value(series.value)}")
                    continue
                self._render_histogram(lines, family.name, series)
        return "\n".join(lines) + "\n" if lines else ""

    @staticmethod
    def _render_histogram(lines: list[str], name: str, series: _Series) -> None:
        count = sum(series.counts)
        lines.append(f"{name}_count{_label_text(series.labels)} {count}")
        lines.append(f"{name}_sum{_label_text(series.labels)} {format_value(series.total)}")
        cumulative = 0
        for bound, hits in zip((*series.buckets, math.inf), series.counts, strict=True):
            cumulative += hits
            le = f'le="{format_value(bound)}"'
            lines.append(f"{name}_bucket{_label_text(series.labels, le)} {cumulative}")
