"""One trace setting (global or one model's): its values, its sampling and its traces.

A setting object keeps its values (only the remaining count goes down): an update builds a new
one (Triton's ``TraceManager::TraceSetting``), so a trace sampled under the old values finishes
under them.
Sampling follows Triton: every ``rate``-th request is traced while ``count`` is not exhausted
(-1: no limit); ``rate`` 0, level OFF, or (triton mode) no trace file means nothing is sampled,
except requests that carry an OpenTelemetry context in opentelemetry mode (forced).

Triton-mode traces are kept until ``log_frequency`` of them are collected, then written to the
next index file; with ``log_frequency`` 0 they are written to the trace file when the setting is
replaced or the server stops. When ``count`` is exhausted and every sampled trace has been
collected, they go to an index file at once (Triton's docs; its code compares with the number of
requests seen instead, which only agrees with rate 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from repokit.core.tracing.trace_file import TraceFile
from repokit.errors import invalid_arg, unsupported

TIMESTAMPS = 0x4  # Triton's TRITONSERVER_TRACE_LEVEL_TIMESTAMPS
TENSORS = 0x8  # TRITONSERVER_TRACE_LEVEL_TENSORS
TRITON_MODE = "triton"
OTEL_MODE = "opentelemetry"
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
SETTING_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def level_names(level: int) -> list[str]:
    if not level:
        return ["OFF"]
    names = []
    if level & TIMESTAMPS:
        names.append("TIMESTAMPS")
    if level & TENSORS:
        names.append("TENSORS")
    return names


@dataclass(frozen=True)
class NewSetting:
    """A protocol update: a value to set, or ``clear`` to fall back (model: to the global
    setting; global: to the startup value). Unnamed settings keep what they were."""

    level: int | None = None
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None
    clear: frozenset[str] = frozenset()


def _one(key: str, values: list[str]) -> str:
    if len(values) != 1:
        raise invalid_arg(f"expect only 1 value for '{key}'")
    return values[0]


def _integer(key: str, text: str, low: int, high: int) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise invalid_arg(f"Unable to parse '{key}', got: {text}")
    value = int(text)
    if key == "trace_count" and value < low:
        raise invalid_arg(f"Unable to parse 'trace_count'. Expecting value >= {low}, got: {text}")
    if not low <= value <= high:
        raise invalid_arg(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return value


def parse_level_values(values: list[str]) -> int:
    level = 0
    for name in values:
        if name == "OFF":
            if len(values) != 1:
                raise invalid_arg("Expect only one trace level 'OFF' is specified")
        elif name == "TIMESTAMPS":
            level |= TIMESTAMPS
        elif name == "TENSORS":
            level |= TENSORS
        else:  # Triton ignores unknown levels; a typo would then change nothing silently
            raise invalid_arg(
                f"Unknown trace level '{name}': expected 'OFF', 'TIMESTAMPS' or 'TENSORS'"
            )
    return level


def parse_update(changes: Mapping[str, list[str] | None]) -> NewSetting:
    """The protocol's update (``{name: values}``; None or an empty list clears a setting),
    checked as Triton checks it. ``trace_file`` cannot be changed; unknown names are ignored."""
    if "trace_file" in changes:
        raise unsupported("trace file location can not be updated through network protocol")
    clear: set[str] = set()
    parsed: dict[str, int] = {}
    for key in SETTING_KEYS:
        if key not in changes:
            continue
        values = changes[key]
        if not values:
            clear.add(key)
        elif key == "trace_level":
            parsed[key] = parse_level_values(values)
        elif key == "trace_count":
            parsed[key] = _integer(key, _one(key, values), -1, INT32_MAX)
        else:
            parsed[key] = _integer(key, _one(key, values), 0, UINT32_MAX)
    return NewSetting(
        level=parsed.get("trace_level"),
        rate=parsed.get("trace_rate"),
        count=parsed.get("trace_count"),
        log_frequency=parsed.get("log_frequency"),
        clear=frozenset(clear),
    )


class TraceSetting:
    def __init__(
        self,
        *,
        level: int,
        rate: int,
        count: int,
        log_frequency: int,
        file: TraceFile,
        mode: str,
        mode_settings: tuple[tuple[str, str], ...] = (),
        specified: frozenset[str] = frozenset(),
    ) -> None:
        self.level = level
        self.rate = rate
        self.count = count  # remaining traces (-1: unlimited); sampling counts it down
        self.log_frequency = log_frequency
        self.file = file
        self.mode = mode
        self.mode_settings = mode_settings
        self.specified = specified  # the settings given for this model (or globally)
        self._sampled = 0  # requests looked at
        self._created = 0  # traces started
        self._collected = 0  # traces finished
        self._pending: list[str] = []  # finished traces' objects not written yet
        self._pending_traces = 0
        self.retired = False
        if not level:
            self.invalid_reason = "tracing is disabled"
        elif rate == 0:
            self.invalid_reason = "sample rate must be non-zero"
        elif mode == TRITON_MODE and not file.name:
            self.invalid_reason = "trace file name is not given"
        else:
            self.invalid_reason = ""

    @property
    def valid(self) -> bool:
        return not self.invalid_reason

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced (counts it)."""
        hit = False
        if self.rate != 0:
            if self.invalid_reason and not force:
                return False
            self._sampled += 1
            hit = self._sampled % self.rate == 0
            if hit and self.count > 0:
                self.count -= 1
            elif hit and self.count == 0:
                hit = False
        if hit or force:
            self._created += 1
            return True
        return False

    def to_response(self) -> dict[str, str | list[str]]:
        """The trace extension's setting object (Triton's keys, in Triton's order)."""
        out: dict[str, str | list[str]] = {
            "trace_level": level_names(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
        }
        if self.mode == TRITON_MODE:
            out["log_frequency"] = str(self.log_frequency)
            out["trace_file"] = self.file.name
        out["trace_mode"] = self.mode
        for key, value in self.mode_settings:
            out[key] = value
        return out

    # --- triton mode: collected traces ------------------------------------------------
    def collect(self, objects: list[str]) -> None:
        """A finished trace's JSON objects (its own and its composing models')."""
        self._collected += 1
        self._pending.extend(objects)
        self._pending_traces += 1
        if self.retired:
            self.flush()
        elif (self.count == 0 and self._collected >= self._created) or (
            self.log_frequency and self._pending_traces >= self.log_frequency
        ):
            self._write(to_index_file=True)

    def flush(self) -> None:
        """Write what is pending (the setting is replaced, or the server stops)."""
        if self._pending_traces:
            self._write(to_index_file=self.log_frequency != 0)

    def _write(self, to_index_file: bool) -> None:
        pending, self._pending = self._pending, []
        self._pending_traces = 0
        self.file.save(pending, to_index_file)
