"""``repokit serve --workers N|auto``: how many processes do the protocol work.

Only one is available so far: the README ("Serving on every core") has the measurements and
the design for more (frontend processes sharing the ports, one scheduling process owning the
model instances), and says what is missing. Until the split keeps every server-wide guarantee
(one set of instances, batching across all requests, sequence slots, priorities, statistics,
model control), a count above one is refused rather than served with other semantics.
"""

from __future__ import annotations

import os

AVAILABLE_WORKERS = 1


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


def check_workers(text: str, cores: int | None = None) -> int:
    """The worker count, or ValueError when it is more than this version can run."""
    count = parse_workers(text, cores)
    if count > AVAILABLE_WORKERS:
        given = f"'{text}' ({count} cores)" if text.strip().lower() == "auto" else str(count)
        raise ValueError(
            f"{given}: serving from more than one process is not available yet (the design "
            "and what remains: README, 'Serving on every core'); run one process, or several "
            "replicas behind a load balancer (repokit deploy kserve --replicas)"
        )
    return count
