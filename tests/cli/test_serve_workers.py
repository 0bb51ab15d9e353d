"""repokit serve --workers: the count's forms and errors; one worker serves as before, and more
are refused with a message that says why (until the split keeps server-wide semantics)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.cli.serve_workers import check_workers, parse_workers
from tests.cli.serve_process import PORT_FLAGS, ServeProcess
from tests.frontends.http.server_thread import copy_models


@pytest.mark.parametrize(
    ("text", "cores", "count"),
    [("1", None, 1), ("3", None, 3), (" 2 ", None, 2), ("auto", 16, 16), ("AUTO", 1, 1)],
)
def test_worker_counts(text: str, cores: int | None, count: int) -> None:
    assert parse_workers(text, cores) == count


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "expects at least 1 process, got 0"),
        ("-2", "expects at least 1 process, got -2"),
        ("two", "expects a number of processes or 'auto', got 'two'"),
        ("", "expects a number of processes or 'auto', got ''"),
    ],
)
def test_bad_worker_counts(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_workers(text)


def test_one_worker_is_available_more_are_refused() -> None:
    assert check_workers("1") == 1
    assert check_workers("auto", cores=1) == 1
    with pytest.raises(ValueError, match=r"^2: serving from more than one process is not"):
        check_workers("2")
    with pytest.raises(ValueError, match=r"^'auto' \(8 cores\): serving from more than one"):
        check_workers("auto", cores=8)


@pytest.mark.parametrize("value", ["2", "0", "many"])
def test_cli_refuses_before_loading_anything(value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        make_app(), ["serve", str(tmp_path / "missing"), "--workers", value],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--workers'" in result.output
    assert "Traceback" not in result.output


def test_one_worker_serves(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    server = ServeProcess(str(repo), *PORT_FLAGS, "--workers", "1")
    try:
        url = f"http://{server.url('HTTPService')}/v2/health/ready"
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.kill()
