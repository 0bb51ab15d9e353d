"""How many frontend worker processes the servers started by tests run (``--serve-workers``,
passed to them through the environment so ``repokit serve`` subprocesses see it too)."""

from __future__ import annotations

import os

SERVE_WORKERS_ENV = "REPOKIT_TEST_SERVE_WORKERS"


def serve_workers() -> int:
    return int(os.environ.get(SERVE_WORKERS_ENV, "1"))
