"""repokit serve --workers: the count's forms and errors; one worker serves as before; two serve
over one scheduling process and stop with it (SIGTERM), or on their own when it dies."""

from __future__ import annotations

import signal
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.cli.serve_workers import parse_workers
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


@pytest.mark.parametrize("value", ["0", "many"])
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


def _worker_pids(parent: int) -> list[int]:
    """The frontend worker processes of ``parent`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == parent and b"repokit.frontends.workers.process" in command:
            found.append(int(entry.name))
    return found


def _gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_two_workers_serve_and_stop_with_the_server(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    server = ServeProcess(str(repo), *PORT_FLAGS, "--workers", "2")
    try:
        pids = _worker_pids(server.process.pid)
        assert len(pids) == 2, server.text
        for _ in range(6):  # new connections, whichever worker takes each
            url = f"http://{server.url('HTTPService')}/v2/health/ready"
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.status == 200
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, server.text
        assert _gone(pids, 10)
    finally:
        server.kill()
    assert "Traceback" not in server.text, server.text


def test_workers_exit_when_the_scheduling_process_dies(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    server = ServeProcess(str(repo), *PORT_FLAGS, "--workers", "2")
    try:
        pids = _worker_pids(server.process.pid)
        assert len(pids) == 2, server.text
        server.process.kill()
        server.wait(timeout=30)
        assert _gone(pids, 30)
    finally:
        server.kill()
