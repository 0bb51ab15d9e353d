"""Whether the differential tests can run: the Triton reference is installed (first run: into the
user's cache folder, see ``tools/triton_reference.py``) once the tests are collected, before any
of them starts (so the install does not count against a test's timeout).

Where the reference cannot run (not Linux x86-64, no package index, the install failed) every
test here is skipped with the reason, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tools.triton_reference import (
    Installation,
    ReferenceUnavailable,
    cache_root,
    install,
    installation_name,
    unsupported_reason,
)

HERE = Path(__file__).resolve().parent
OUTCOME = pytest.StashKey["Installation | str"]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(HERE in Path(str(item.path)).parents for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    home = cache_root() / installation_name()
    fresh = Installation.read(home) is None and unsupported_reason() is None
    if fresh and reporter is not None:
        reporter.write_line(f"installing the Triton reference into {home} (first run only)")
    started = time.monotonic()
    try:
        outcome: Installation | str = install()
    except ReferenceUnavailable as exc:
        outcome = str(exc)
    session.config.stash[OUTCOME] = outcome
    if fresh and reporter is not None:
        reporter.write_line(f"Triton reference: {time.monotonic() - started:.0f} s")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="session", autouse=True)
def triton_installation(request: pytest.FixtureRequest) -> Installation:
    """The reference installation; skips (fails in CI) every test here when there is none."""
    outcome = request.config.stash.get(OUTCOME, None)
    if outcome is None:  # collected without the hook having run (should not happen)
        try:
            outcome = install()
        except ReferenceUnavailable as exc:
            outcome = str(exc)
    if isinstance(outcome, str):
        reason = f"the Triton reference cannot run here: {outcome}"
        if in_ci():
            pytest.fail(f"{reason} (CI=true: the differential tests must run)", pytrace=False)
        pytest.skip(reason)
    return outcome
