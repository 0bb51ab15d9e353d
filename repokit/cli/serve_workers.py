"""``repokit serve --workers N|auto``: how many processes do the protocol work.

1 (the default): one process does everything. More: N frontend worker processes share the
HTTP and gRPC ports over one scheduling process that keeps the model instances, batchers,
sequence slots, statistics and ``/metrics`` (:mod:`repokit.frontends.workers`; the design and
its measurements: README, "Serving on every core").
"""

from __future__ import annotations

import os


def parse_workers(text: str, cores: int | None = None) -> int:
    """``N`` (at least 1) or ``auto`` (the machine's cores); ValueError says what was wrong."""
    value = text.strip().lower()
    if value == "auto":
        return max(cores if cores is not None else (os.cpu_count() or 1), 1)
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"expects a number of processes or 'auto', got '{text}'") from None
    if count < 1:
        raise ValueError(f"expects at least 1 process, got {count}")
    return count
