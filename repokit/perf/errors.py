"""Errors of ``repokit perf`` with perf_analyzer's exit codes.

``PerfError(message, exit_code)`` is the only exception the perf package raises on purpose:
``OPTION_ERROR`` (3) for bad options and bad input-data files, ``STABILITY_ERROR`` (2) when no
stable measurement was obtained, ``GENERIC_ERROR`` (99) for everything else (server errors,
connection failures, output validation failures). The CLI prints the message and exits with
the code; it never shows a traceback.
"""

from __future__ import annotations

SUCCESS = 0
STABILITY_ERROR = 2
OPTION_ERROR = 3
GENERIC_ERROR = 99


class PerfError(Exception):
    def __init__(self, message: str, exit_code: int = GENERIC_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def option_error(message: str) -> PerfError:
    return PerfError(message, OPTION_ERROR)
