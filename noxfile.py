"""Development sessions: tests, lint, typecheck, generate (and benchmarks, run by hand)."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite, differential tests against real Triton included."""
    session.install("-e", ".[dev]")
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", "repokit", "tests", "benchmarks", "tools", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session(python=PYTHON)
def generate(session: nox.Session) -> None:
    """Regenerate repokit/protocol/generated from protos/ and schemas/ from the descriptors."""
    session.install("-e", ".[dev]")
    session.run("python", "-m", "repokit.protocol.codegen")


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """Slow differential and soak tests (kept out of the default run)."""
    session.install("-e", ".[dev]")
    session.run("pytest", "-m", "slow", *session.posargs)


# the tests whose servers must keep the server-wide semantics with several frontend workers
WORKERS_TESTS = (
    "tests/scheduler",
    "tests/e2e/test_scheduling.py",
    "tests/e2e/test_rate_limiter.py",
    "tests/e2e/test_rate_limiter_devices.py",
    "tests/e2e/test_python_cancellation.py",
    "tests/e2e/test_trace_files.py",
    "tests/cli/test_serve_shutdown.py",
    "tests/cli/test_serve_workers.py",
    "tests/frontends/workers",
    "tests/differential",
)


@nox.session(python=PYTHON)
def workers(session: nox.Session) -> None:
    """The scheduler and differential tests with every server the tests start serving from
    two frontend worker processes (``repokit serve --workers 2``)."""
    session.install("-e", ".[dev]")
    session.run("pytest", "--serve-workers", "2", *WORKERS_TESTS, *session.posargs)


@nox.session(python=PYTHON)
def triton_qa(session: nox.Session) -> None:
    """Triton's own python-backend qa tests against repokit (and/or real Triton): needs a git
    dir of triton-inference-server/server ($TRITON_SERVER_GIT); see tools/triton_qa.py."""
    session.install("-e", ".[dev]")
    session.run("python", "tools/triton_qa.py", *session.posargs)


@nox.session(python=PYTHON)
def triton_examples(session: nox.Session) -> None:
    """Triton's example clients (tritonclient's src/python/examples) against repokit serve:
    needs git dirs of triton-inference-server/client and /server ($TRITON_CLIENT_GIT,
    $TRITON_SERVER_GIT); see tools/triton_examples.py."""
    session.install("-e", ".[dev]")
    session.run("python", "tools/triton_examples.py", *session.posargs)


@nox.session(python=PYTHON)
def triton_qa_perf(session: nox.Session) -> None:
    """qa/L0_perf_analyzer's command lines run with repokit perf against repokit serve (and/or
    real Triton): needs git dirs of triton-inference-server/server and /python_backend
    ($TRITON_SERVER_GIT, $TRITON_PYTHON_BACKEND_GIT); see tools/triton_qa_perf.py."""
    session.install("-e", ".[dev]")
    session.run("python", "tools/triton_qa_perf.py", *session.posargs)
