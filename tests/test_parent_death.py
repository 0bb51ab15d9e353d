"""Children started with ``repokit.parent_death.popen_tied`` die with their parent, however it
dies (SIGKILL here, as a killed pytest run), also when a thread that is gone by then started
them; a child started with plain ``subprocess.Popen`` outlives it (what this prevents)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# starts `sleep 300` (from the main thread or from a worker thread that then ends), prints its
# pid once the thread has ended, and waits to be killed
LAUNCHER = """
import subprocess, sys, threading, time
from repokit.parent_death import popen_tied

how = sys.argv[1]
popen = subprocess.Popen if how == "plain" else popen_tied
started = []
if how == "thread":
    worker = threading.Thread(target=lambda: started.append(popen(["sleep", "300"])))
    worker.start()
    worker.join()
else:
    started.append(popen(["sleep", "300"]))
print(started[0].pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def gone_within(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def launch(how: str) -> tuple[subprocess.Popen[str], int]:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, how], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    child = int(launcher.stdout.readline())
    return launcher, child


@pytest.mark.parametrize("how", ["main", "thread"])
def test_the_child_dies_with_its_killed_parent(how: str) -> None:
    launcher, child = launch(how)
    try:
        time.sleep(0.3)
        assert alive(child)  # the thread that started it has ended: it lives on
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert gone_within(child, 10)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_plain_child_outlives_its_killed_parent() -> None:
    launcher, child = launch("plain")
    try:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert not gone_within(child, 1)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_program_that_is_not_found_raises_as_popen_does() -> None:
    from repokit.parent_death import popen_tied

    with pytest.raises(FileNotFoundError):
        popen_tied(["no-such-program-here", "x"])
