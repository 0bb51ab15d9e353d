"""Property-based fuzzing (issue 17): what a client sends never raises an uncaught exception,
never gets a server error, and is answered within a bounded time.

Each target runs a few hundred examples in the default run (a few seconds) and many more
under ``-m slow`` (``nox -s slow``). Hypothesis keeps no example database (CI has no state),
so every run draws fresh examples from its own seed; a failure prints the example to rerun.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from repokit.frontends.runner import ServerHandle
from tests.frontends.grpc.serving import make_repository, running_server

_COMMON = {
    "database": None,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
    "derandomize": False,
}

#: pure decoders: fast, so many examples and a tight deadline per example
PURE = settings(max_examples=200, deadline=timedelta(seconds=1), **_COMMON)
PURE_SLOW = settings(max_examples=5_000, deadline=timedelta(seconds=1), **_COMMON)
#: requests to a real server (models run): fewer examples; the deadline bounds each answer
SERVED = settings(max_examples=150, deadline=timedelta(seconds=10), **_COMMON)
SERVED_SLOW = settings(max_examples=2_000, deadline=timedelta(seconds=10), **_COMMON)


#: the longer runs need more than the suite's per-test timeout
LONG_RUN_TIMEOUT_S = 1200


def long_run(test: Callable[..., Any]) -> Callable[..., Any]:
    """A long fuzz run: only under ``-m slow``, with its own timeout."""
    return pytest.mark.slow(pytest.mark.timeout(LONG_RUN_TIMEOUT_S)(test))


@pytest.fixture(scope="session")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One real server (HTTP and gRPC, port 0) with the python sample models: add_sub
    (batching), identity, accumulate (sequence), batcher (dynamic batching), types."""
    repo = make_repository(tmp_path_factory.mktemp("fuzz"))
    with running_server(repo, http=True, allow_client_shm=True) as handle:
        yield handle
