"""Reading what a server updates after it has answered: statistics, the repository index,
trace and log files. Triton counts an execution after its responses are sent, finishes an
aborted load's unloads after the load has answered, writes a trace when it releases it; a
test reads such things again until they have settled, then asserts on the last read."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def settled(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 10.0) -> T:
    """``read()`` again until ``done`` holds for what it gives or ``timeout`` seconds have
    passed; the last read either way (the caller asserts on it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)
