"""The startup trace settings: ``--trace-config`` in tritonserver 2.51's forms and the
deprecated ``--trace-file/-level/-rate/-count/-log-frequency`` flags.

``--trace-config <setting>=<value>`` sets a global setting (``level``, ``rate``, ``count``,
``mode``); ``--trace-config <mode>,<setting>=<value>`` a setting of one mode: ``triton,file=``,
``triton,log-frequency=``, ``opentelemetry,url=``, ``opentelemetry,resource=<key>=<value>``
(repeatable), ``opentelemetry,bsp_max_queue_size=``, ``bsp_schedule_delay=``,
``bsp_max_export_batch_size=``. A ``--trace-config`` value overrides its deprecated flag (with
tritonserver's warning); ``level`` may repeat (the levels add up) and a level of ``OFF`` (or
``false``) given anywhere turns tracing off. Values are checked as tritonserver checks them;
unlike tritonserver, a setting no mode knows is refused instead of ignored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from repokit.core.tracing.setting import OTEL_MODE, TENSORS, TIMESTAMPS, TRITON_MODE

_MODES = (TRITON_MODE, OTEL_MODE)
_GLOBAL_SETTINGS = ("rate", "level", "count", "mode")
_TRITON_SETTINGS = ("file", "log-frequency")
_BSP_SETTINGS = {
    "bsp_max_queue_size": ("OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
    "bsp_schedule_delay": ("OTEL_BSP_SCHEDULE_DELAY", "5000"),
    "bsp_max_export_batch_size": ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
}
_OTEL_SETTINGS = ("url", "resource", *_BSP_SETTINGS)
DEFAULT_OTEL_URL = "http://localhost:4318/v1/traces"
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
T = TypeVar("T")


@dataclass(frozen=True)
class TraceStartup:
    """What the server starts tracing with (tritonserver's defaults)."""

    level: int = 0  # TIMESTAMPS | TENSORS bits; 0 = OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = TRITON_MODE
    # the mode's own settings as given, in order (shown by the trace setting responses):
    # opentelemetry: url, resource, bsp_* (with their defaults appended)
    mode_settings: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)  # warnings to log once

    def otel_setting(self, key: str, default: str = "") -> str:
        for name, value in self.mode_settings:
            if name == key:
                return value
        return default

    def otel_resources(self) -> dict[str, str]:
        """``resource=<key>=<value>`` pairs, with tritonserver's service name by default."""
        resources = {"service.name": "triton-inference-server"}
        for name, value in self.mode_settings:
            if name == "resource":
                key, _, val = value.partition("=")
                resources[key] = val
        return resources


def parse_level(text: str) -> int:
    """One level value of the command line (case-insensitive, tritonserver's aliases)."""
    lowered = text.lower()
    if lowered in ("false", "off"):
        return 0
    if lowered in ("true", "on", "min", "max", "timestamps"):
        return TIMESTAMPS
    if lowered == "tensors":
        return TENSORS
    raise ValueError(f"invalid value for trace level option: {lowered}")


def parse_mode(text: str) -> str:
    lowered = text.lower()
    if lowered not in _MODES:
        raise ValueError(
            f"invalid value for trace mode option: {lowered}. Available options are "
            '"triton" and "opentelemetry"'
        )
    return lowered


def _parse_int(text: str, low: int, high: int) -> int:
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise ValueError(f"Invalid option value. Got {text}") from None
    if not low <= value <= high:
        raise ValueError(f"Provided option value is out of bound. Got {text}")
    return value


def split_trace_config(spec: str) -> tuple[str, str, str]:
    """``[<mode>,]<setting>=<value>`` -> (mode or "", setting, value)."""
    comma = spec.find(",")
    mode = ""
    if comma == 0:
        raise ValueError(
            "No trace mode specified. --trace-config option format is "
            f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {spec}"
        )
    if comma > 0:
        mode = parse_mode(spec[:comma])
    setting, sep, value = spec[comma + 1 :].partition("=")
    if not sep or not setting or not value:
        raise ValueError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {spec}"
        )
    return mode, setting, value


def parse_trace_flags(
    trace_config: Iterable[str] = (),
    *,
    trace_file: str | None = None,
    trace_level: Iterable[str] = (),
    trace_rate: str | None = None,
    trace_count: str | None = None,
    trace_log_frequency: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> TraceStartup:
    """The startup settings, or ValueError with tritonserver's message for a bad value."""
    env = os.environ if environ is None else environ
    notes: list[str] = []
    given_global: list[tuple[str, str]] = []
    given_mode: dict[str, list[tuple[str, str]]] = {TRITON_MODE: [], OTEL_MODE: []}
    for spec in trace_config:
        mode, setting, value = split_trace_config(spec)
        known = _TRITON_SETTINGS if mode == TRITON_MODE else _OTEL_SETTINGS
        if not mode:
            known = _GLOBAL_SETTINGS
        if setting not in known:
            where = f"{mode},{setting}" if mode else setting
            raise ValueError(
                f'Bad option: "--trace-config {where}": unknown setting; expected one of '
                + ", ".join(known)
            )
        (given_mode[mode] if mode else given_global).append((setting, value))

    level = 0
    disabled = False
    rate, count, log_frequency, file, mode = 1000, -1, 0, "", TRITON_MODE
    for flag, text in (("--trace-level", t) for t in trace_level):
        notes.append(_deprecated(flag, "level=<OFF|TIMESTAMPS|TENSORS>"))
        parsed = _flag(flag, text, parse_level)
        disabled |= parsed == 0
        level |= parsed
    if trace_rate is not None:
        notes.append(_deprecated("--trace-rate", "rate=<rate value>"))
        rate = _flag("--trace-rate", trace_rate, lambda t: _parse_int(t, 0, UINT32_MAX))
    if trace_count is not None:
        notes.append(_deprecated("--trace-count", "count=<count value>"))
        count = _flag("--trace-count", trace_count, lambda t: _parse_int(t, -1, INT32_MAX))
    if trace_file is not None:
        notes.append(_deprecated("--trace-file", "triton,file=<filepath>"))
        file = trace_file
    if trace_log_frequency is not None:
        notes.append(_deprecated("--trace-log-frequency", "triton,log-frequency=<value>"))
        log_frequency = _flag(
            "--trace-log-frequency", trace_log_frequency, lambda t: _parse_int(t, 0, UINT32_MAX)
        )

    for setting, value in given_global:
        where = f"--trace-config {setting}"
        if setting == "rate":
            if trace_rate is not None:
                notes.append(_override("--trace-rate", "rate value"))
            rate = _flag(where, value, lambda t: _parse_int(t, 0, UINT32_MAX))
        elif setting == "level":
            if trace_level:
                notes.append(_override("--trace-level", "level"))
            parsed = _flag(where, value, parse_level)
            disabled |= parsed == 0
            level |= parsed
        elif setting == "mode":
            mode = _flag(where, value, parse_mode)
        else:
            if trace_count is not None:
                notes.append(_override("--trace-count", "count"))
            count = _flag(where, value, lambda t: _parse_int(t, -1, INT32_MAX))

    mode_settings: list[tuple[str, str]] = []
    if mode == TRITON_MODE:
        for setting, value in given_mode[TRITON_MODE]:
            where = f"--trace-config triton,{setting}"
            if setting == "file":
                if trace_file is not None:
                    notes.append(_override("--trace-file", "file"))
                file = value
            else:
                if trace_log_frequency is not None:
                    notes.append(_override("--trace-log-frequency", "log-frequency"))
                log_frequency = _flag(where, value, lambda t: _parse_int(t, 0, UINT32_MAX))
    else:
        if trace_file is not None:
            notes.append(
                "Warning: '--trace-file' is deprecated and will be ignored with "
                "opentelemetry tracing mode."
            )
        if trace_log_frequency is not None:
            notes.append(
                "Warning: '--trace-log-frequency' is deprecated and will be ignored with "
                "opentelemetry tracing mode."
            )
        mode_settings = _otel_settings(given_mode[OTEL_MODE], env)
    if disabled:
        level = 0
    return TraceStartup(
        level=level,
        rate=rate,
        count=count,
        log_frequency=log_frequency,
        file=file,
        mode=mode,
        mode_settings=tuple(mode_settings),
        notes=tuple(notes),
    )


def _otel_settings(given: list[tuple[str, str]], env: Mapping[str, str]) -> list[tuple[str, str]]:
    settings: list[tuple[str, str]] = []
    missing = dict(_BSP_SETTINGS)
    for setting, value in given:
        if setting in _BSP_SETTINGS:
            where = f"--trace-config opentelemetry,{setting}"
            value = str(_flag(where, value, lambda t: _parse_int(t, 0, UINT32_MAX)))
            missing.pop(setting, None)
        elif setting == "resource" and "=" not in value:
            raise ValueError(
                'Bad option: "--trace-config opentelemetry,resource".\n'
                f"expected <key>=<value>, got {value}"
            )
        settings.append((setting, value))
    for setting, (variable, default) in missing.items():
        text = env.get(variable, default)
        value = str(_flag(f"OTEL_{setting.upper()}", text, lambda t: _parse_int(t, 0, UINT32_MAX)))
        settings.append((setting, value))
    queue = int(dict(settings)["bsp_max_queue_size"])
    batch = int(dict(settings)["bsp_max_export_batch_size"])
    if batch > queue:
        raise ValueError(
            f"--trace-config opentelemetry,bsp_max_export_batch_size ({batch}) must be less "
            f"than or equal to bsp_max_queue_size ({queue})"
        )
    return settings


def _flag(where: str, text: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(f'Bad option: "{where}".\n{exc}') from None


def _deprecated(flag: str, instead: str) -> str:
    return (
        f"Warning: '{flag}' has been deprecated and will be removed in future releases. "
        f"Please use '--trace-config {instead} instead."
    )


def _override(flag: str, what: str) -> str:
    return f"Warning: Overriding deprecated '{flag}' in favor of provided {what} in --trace-config!"
