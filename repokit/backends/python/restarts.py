"""When a python model instance process dies: what to say about it and whether to restart it.

Triton restarts a python model's stub process when it finds it dead ("Stub process is
unhealthy and it will be restarted."); the requests that were at the process fail with
``Stub process '<instance>' is not healthy.``. repokit does the same as soon as the process is
seen to exit (its socket closes), so the next request is served by the new process. A model
that keeps dying is not restarted forever: after :data:`RESTART_LIMIT` restarts within
:data:`RESTART_WINDOW_S` seconds (or a restart whose ``initialize`` fails) the model version is
marked UNAVAILABLE with the reason. Pure logic with an injectable clock; the process handling
is in :mod:`repokit.backends.python.processes`.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable

RESTART_LIMIT = 3  # restarts of one model's instances allowed within the window
RESTART_WINDOW_S = 60.0
UNHEALTHY_LOG = "Stub process '%s' is unhealthy and it will be restarted (%s)."


def not_healthy(instance: str) -> str:
    """Triton's error for the requests that were at a process that died."""
    return f"Stub process '{instance}' is not healthy."


def exit_description(returncode: int | None) -> str:
    """``killed by signal SIGSEGV`` / ``exited with code 3`` for a process's return code."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"killed by signal {name}"
    return f"exited with code {returncode}"


def hang_description(timeout_s: float) -> str:
    return (
        f"execute did not finish within {timeout_s:g} s (--python-execute-timeout-secs), "
        "the process was killed"
    )


class RestartBudget:
    """Counts the deaths of one model's instances; says when to stop restarting them."""

    def __init__(
        self,
        limit: int = RESTART_LIMIT,
        window_s: float = RESTART_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limit = limit
        self._window_s = window_s
        self._clock = clock
        self._deaths: deque[float] = deque()

    def allow(self) -> bool:
        """Record one death; True while a restart is still allowed."""
        now = self._clock()
        deaths = self._deaths
        deaths.append(now)
        while deaths and now - deaths[0] > self._window_s:
            deaths.popleft()
        return len(deaths) <= self._limit

    def exhausted_reason(self, instance: str, last: str) -> str:
        return (
            f"model instance '{instance}' died {len(self._deaths)} times within "
            f"{self._window_s:g} s and is not restarted again (last: {last})"
        )
