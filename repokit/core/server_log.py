"""The server log as tritonserver 2.51 writes it.

One line per record: ``I1124 05:01:02.123456 <pid> <file>:<line>] "<message>"`` (``--log-format
default``) or ``2024-11-24T05:01:02Z I <pid> <file>:<line>] "<message>"`` (``ISO8601``). The
letter is ``I`` (info and verbose), ``W`` or ``E``; the message is quoted and escaped as a JSON
string, as Triton 2.51 quotes it. Tables (startup) are written as Triton writes them: after
``] `` a line break, then the table unquoted.

Records of the ``repokit`` logger tree go through :class:`TritonLogHandler`, which reads the
live :class:`~repokit.core.settings.LogSettings` for every record, so ``/v2/logging`` changes
apply at once: ``log_info``, ``log_warning`` and ``log_error`` switch their level,
``log_verbose_level`` N lets verbose records of level <= N through (:data:`VERBOSE` is 1,
:data:`VERBOSE_DETAIL` is 2). A record names its source with the extras ``triton_file`` and
``triton_line`` (a python model's ``pb_utils.Logger`` calls: the model's file and line);
otherwise the Python file and line that logged it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from repokit.core.settings import LogSettings

ROOT_LOGGER = "repokit"
VERBOSE = logging.DEBUG  # --log-verbose 1
VERBOSE_DETAIL = logging.DEBUG - 5  # --log-verbose 2
RAW = "triton_raw"  # extra: write the message unquoted after a line break (tables)


def verbose_level(levelno: int) -> int:
    """The --log-verbose level a record below INFO needs."""
    return 1 if levelno >= VERBOSE else 2


def logging_level(settings: LogSettings) -> int:
    """The lowest level the settings let through (the logger's level: disabled verbose
    logging then costs one comparison)."""
    if settings.log_verbose_level >= 2:
        return VERBOSE_DETAIL
    if settings.log_verbose_level >= 1:
        return VERBOSE
    if settings.log_info:
        return logging.INFO
    if settings.log_warning:
        return logging.WARNING
    if settings.log_error:
        return logging.ERROR
    return logging.CRITICAL + 1


def enabled(settings: LogSettings, levelno: int) -> bool:
    if levelno >= logging.ERROR:
        return settings.log_error
    if levelno >= logging.WARNING:
        return settings.log_warning
    if levelno >= logging.INFO:
        return settings.log_info
    return settings.log_verbose_level >= verbose_level(levelno)


def _letter(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    return "I"


class TritonLogFormatter(logging.Formatter):
    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self._settings = settings
        self._pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        letter = _letter(record.levelno)
        created = record.created
        if self._settings.log_format == "ISO8601":
            head = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)) + f" {letter}"
        else:
            micros = int((created % 1) * 1_000_000)
            head = letter + time.strftime("%m%d %H:%M:%S", time.localtime(created))
            head += f".{micros:06d}"
        source = getattr(record, "triton_file", None) or record.filename
        line = getattr(record, "triton_line", None)
        if line is None:
            line = record.lineno
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if getattr(record, RAW, False):
            body = "\n" + message + "\n"
        else:
            body = json.dumps(message, ensure_ascii=False)
        return f"{head} {self._pid} {source}:{line}] {body}"


class TritonLogHandler(logging.Handler):
    """Writes records enabled by the live settings to stderr or the log file."""

    def __init__(self, settings: LogSettings, stream: IO[str] | None = None) -> None:
        super().__init__(logging.NOTSET)
        self.settings = settings
        self._file: IO[str] | None = None
        if stream is None and settings.log_file:
            self._file = stream = open(settings.log_file, "a", encoding="utf-8")  # noqa: SIM115
        self._stream = stream
        self.setFormatter(TritonLogFormatter(settings))

    def emit(self, record: logging.LogRecord) -> None:
        if not enabled(self.settings, record.levelno):
            return
        try:
            text = self.format(record)
            stream = self._stream if self._stream is not None else sys.stderr
            stream.write(text + "\n")
            stream.flush()
        except Exception:  # a closed or full stream must not break the server
            self.handleError(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


# libraries whose warnings and errors belong in the server log too (uncaught task errors),
# in the same format
_LIBRARY_LOGGERS = ("asyncio", "grpc")


def install(settings: LogSettings, stream: IO[str] | None = None) -> TritonLogHandler:
    """Send the ``repokit`` logger tree (and the models' logs) to a Triton-style handler, with
    the warnings and errors of the libraries the server runs on; :func:`uninstall` removes it.
    Raises OSError when the log file cannot be opened."""
    handler = TritonLogHandler(settings, stream)
    logger = logging.getLogger(ROOT_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging_level(settings))
    logger.propagate = False
    for name in _LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        library.addHandler(handler)
        library.setLevel(logging.WARNING)
        library.propagate = False
    return handler


def uninstall(handler: TritonLogHandler) -> None:
    for name in (ROOT_LOGGER, *_LIBRARY_LOGGERS):
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        logger.propagate = True
    handler.close()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A table drawn as tritonserver draws its startup tables (``+---+`` borders)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: Sequence[str]) -> str:
        return "|" + "|".join(f" {v:<{w}} " for v, w in zip(values, widths, strict=True)) + "|"

    out = [rule, line(list(headers)), rule]
    out.extend(line(row) for row in cells)
    out.append(rule)
    return "\n".join(out)
