"""Triton's runtime log settings (``/v2/logging``, gRPC ``LogSettings``) with its errors.

Keys: log_file (read-only here), log_info, log_warning, log_error, log_verbose_level,
log_format ("default" | "ISO8601"). Unknown keys are ignored, ``None`` leaves a setting as it
is. Every value is checked before any is applied. The ``repokit`` logger's level follows
them; :mod:`repokit.core.server_log` writes the records they enable.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from repokit.core.server_log import ROOT_LOGGER, logging_level
from repokit.core.settings import LogSettings
from repokit.errors import internal, unavailable, unsupported

_FORMATS = ("default", "ISO8601")


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise internal("attempt to access JSON non-boolean as boolean")
    return value


class LogSettingsStore:
    def __init__(self, settings: LogSettings) -> None:
        self._settings = settings
        self._apply()

    def get(self) -> dict[str, Any]:
        return asdict(self._settings)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        updates: dict[str, Any] = {}
        if changes.get("log_file") is not None:
            raise unsupported("log file location can not be updated through network protocol")
        for key in ("log_info", "log_warning", "log_error"):
            if changes.get(key) is not None:
                updates[key] = _check_bool(key, changes[key])
        level = changes.get("log_verbose_level")
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, int) or level < 0:
                raise internal("attempt to access JSON non-unsigned-integer as unsigned-integer")
            updates["log_verbose_level"] = level
        text = changes.get("log_format")
        if text is not None:
            if not isinstance(text, str):
                raise internal("attempt to access JSON non-string as string")
            if text not in _FORMATS:
                raise unavailable(f"invalid argument for --log_format, got: {text}")
            updates["log_format"] = text
        for key, value in updates.items():
            setattr(self._settings, key, value)
        self._apply()
        return self.get()

    def _apply(self) -> None:
        logging.getLogger(ROOT_LOGGER).setLevel(logging_level(self._settings))
