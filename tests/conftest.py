"""Suite-wide options: ``--serve-workers N`` makes every server the tests start (ServerThread,
``running_server``, ServeProcess) serve HTTP and gRPC from N frontend worker processes
(``repokit serve --workers N``); ``nox -s workers`` runs the scheduler and differential tests
so."""

from __future__ import annotations

import os

import pytest

from tests.serve_workers import SERVE_WORKERS_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serve-workers",
        type=int,
        default=None,
        metavar="N",
        help="servers started by the tests run N frontend worker processes (default 1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("--serve-workers")
    if count is not None:
        if count < 1:
            raise pytest.UsageError(f"--serve-workers expects at least 1, got {count}")
        os.environ[SERVE_WORKERS_ENV] = str(count)
