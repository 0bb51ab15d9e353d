"""``pb_utils.Logger``, ``MetricFamily`` / ``Metric`` and model control, in the instance process.

Log lines go to the server (``("@log", level, message, file, line)``), which writes them to its
log under its log settings (verbose lines only with a verbose level > 0). Metric families and
metrics live in the server's custom-metrics registry (they appear on its metrics endpoint);
creating them and reading a value are calls, updates are one-way messages that the server
applies in order, so a ``value()`` after an ``increment()`` sees it. ``load_model``,
``unload_model`` and ``is_model_ready`` are calls answered by the server's model manager, with
its errors (explicit model control mode only for load/unload).
"""

from __future__ import annotations

import contextlib
import enum
import json
import sys
import weakref
from typing import Any

from repokit.backends.python.messages import (
    CALL_IS_MODEL_READY,
    CALL_LOAD_MODEL,
    CALL_METRIC,
    CALL_METRIC_FAMILY,
    CALL_METRIC_VALUE,
    CALL_UNLOAD_MODEL,
    METRIC,
    METRIC_RELEASE,
)
from repokit.backends.python.pb_args import MISSING, incompatible_call
from repokit.backends.python.pb_runtime import RUNTIME


def _exception(message: str) -> Exception:
    from repokit.backends.python.pb_utils import TritonModelException

    return TritonModelException(message)


# --- logging ------------------------------------------------------------------------------------
class LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


def _caller() -> tuple[str, int]:
    frame = sys._getframe(3)
    return frame.f_code.co_filename.rsplit("/", 1)[-1], frame.f_lineno


_LOG_SIGNATURE = "(message: str, level: triton_python_backend_utils.Logger.LogLevel = INFO) -> None"


def _check_message(function: str, message: Any) -> None:
    """Triton's Logger takes only a str message (a TypeError otherwise)."""
    if not isinstance(message, str):
        raise incompatible_call(function, "(message: str) -> None", (message,))


class Logger:
    """Model log lines in the server's log."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def _emit(message: Any, level: int) -> None:
        filename, line = _caller()
        RUNTIME.log(int(level), str(message), filename, line)

    @staticmethod
    def log(message: str, level: int = MISSING) -> None:
        if not isinstance(message, str) or (
            level is not MISSING and not isinstance(level, LogLevel)
        ):
            given = (message,) if level is MISSING else (message, level)
            raise incompatible_call("log", _LOG_SIGNATURE, given)
        Logger._emit(message, LogLevel.INFO if level is MISSING else level)

    @staticmethod
    def log_info(message: str) -> None:
        _check_message("log_info", message)
        Logger._emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _check_message("log_warn", message)
        Logger._emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _check_message("log_error", message)
        Logger._emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _check_message("log_verbose", message)
        Logger._emit(message, LogLevel.VERBOSE)


# --- custom metrics -----------------------------------------------------------------------------
class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class Metric:
    """One labelled series of a MetricFamily."""

    def __init__(self, family: MetricFamily, handle: int) -> None:
        # no reference to the family: as in Triton, deleting the family invalidates its metrics
        self._kind = family.kind
        self._handle = handle
        self.invalidated = False

    def _update(self, op: str, value: float, what: str) -> None:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise _exception(f"Failed to {what} metric value: value must be a number") from None
        if self.invalidated:
            raise _exception(
                f"Failed to {what} metric value: Invalid metric operation as the corresponding "
                "'MetricFamily' has been deleted. The 'MetricFamily' object should be deleted "
                "AFTER its corresponding 'Metric' objects have been deleted."
            )
        problem = MetricFamily.refusal(self._kind, op)
        if problem:
            raise _exception(f"Failed to {what} metric value: {problem}")
        RUNTIME.require_link("Metric").send((METRIC, self._handle, op, number))

    def increment(self, value: float) -> None:
        if not self.invalidated and self._kind == MetricKind.COUNTER and float(value) < 0:
            raise _exception(
                "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be "
                "incremented monotonically by non-negative values."
            )
        self._update("increment", value, "increment")

    def set(self, value: float) -> None:
        self._update("set", value, "set")

    def observe(self, value: float) -> None:
        self._update("observe", value, "observe")

    def value(self) -> float:
        if self.invalidated:
            raise _exception(
                "Failed to get metric value: Invalid metric operation as the corresponding "
                "'MetricFamily' has been deleted. The 'MetricFamily' object should be deleted "
                "AFTER its corresponding 'Metric' objects have been deleted."
            )
        if self._kind == MetricKind.HISTOGRAM:
            raise _exception(
                "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not "
                "support Value"
            )
        result = RUNTIME.call("Metric", CALL_METRIC_VALUE, self._handle)
        return float(result)

    def __del__(self) -> None:
        link = RUNTIME.link
        if link is not None and not link.closed:
            with contextlib.suppress(Exception):  # the process may be shutting down
                link.send((METRIC_RELEASE, self._handle))


_KIND_NAMES = {MetricKind.COUNTER: "COUNTER", MetricKind.GAUGE: "GAUGE"}
_KIND_NAMES[MetricKind.HISTOGRAM] = "HISTOGRAM"


class MetricFamily:
    """A custom metric family on the server's metrics endpoint."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if kind not in _KIND_NAMES:
            raise _exception("Unknown metric kind")
        self.kind = MetricKind(kind)
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()
        try:
            self._handle = RUNTIME.call(
                "MetricFamily", CALL_METRIC_FAMILY, (str(name), str(description), _KIND_NAMES[kind])
            )
        except Exception as exc:
            raise _exception(f"Error when creating MetricFamily: {exc}") from None

    def __del__(self) -> None:
        for metric in list(getattr(self, "_metrics", ())):
            metric.invalidated = True

    def check(self, op: str) -> str:
        return MetricFamily.refusal(self.kind, op)

    @staticmethod
    def refusal(kind_value: MetricKind, op: str) -> str:
        """Triton's refusal of ``op`` for this kind, or ""."""
        kind = _KIND_NAMES[kind_value]
        allowed = {
            "COUNTER": ("increment",),
            "GAUGE": ("increment", "set"),
            "HISTOGRAM": ("observe",),
        }[kind]
        if op in allowed:
            return ""
        return f"TRITONSERVER_METRIC_KIND_{kind} does not support {op.capitalize()}"

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise _exception("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise _exception("Failed to create metric. Buckets must be a list.")
            if self.kind != MetricKind.HISTOGRAM:
                raise _exception("Failed to create metric. Unexpected buckets found.")
        elif self.kind == MetricKind.HISTOGRAM:
            raise _exception("Failed to create metric. Missing required buckets.")
        label_map = {str(k): str(v) for k, v in (labels or {}).items()}
        try:
            handle = RUNTIME.call(
                "Metric",
                CALL_METRIC,
                (
                    self._handle,
                    json.dumps(label_map),
                    None if buckets is None else [float(b) for b in buckets],
                ),
            )
        except Exception as exc:
            raise _exception(f"Error when creating Metric: {exc}") from None
        metric = Metric(self, handle)
        self._metrics.add(metric)
        return metric


# --- model control ------------------------------------------------------------------------------
def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    RUNTIME.call("load_model", CALL_LOAD_MODEL, (model_name, config or None, dict(files or {})))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    RUNTIME.call("unload_model", CALL_UNLOAD_MODEL, (model_name, bool(unload_dependents)))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(RUNTIME.call("is_model_ready", CALL_IS_MODEL_READY, (model_name, model_version)))
