"""A killed `repokit serve` (SIGKILL: no chance to stop anything) takes its model instance
processes along, also one busy in ``execute`` (an idle one sees its socket close; a busy one
lived on until its execute returned, here never)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import urllib.request
from pathlib import Path

from tests.cli.serve_process import PORT_FLAGS, ServeProcess, write_model
from tests.test_parent_death import alive, gone_within

BODY = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1]}]}'


def instance_processes(server: int) -> list[int]:
    """The model instance processes the server started (its children running the stub)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == server and b"repokit.backends.python.stub" in command:
            found.append(int(entry.name))
    return found


def _send(url: str) -> None:
    with contextlib.suppress(OSError):  # the server is killed meanwhile
        urllib.request.urlopen(urllib.request.Request(url, data=BODY), timeout=400).close()


def test_a_killed_server_takes_its_busy_model_instance_along(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    marker = tmp_path / "executing"
    # execute marks that it runs, then holds the instance far longer than the test
    write_model(repo, "busy", f"open({str(marker)!r}, 'w').close()\ntime.sleep(300)\ny = x", 1)
    server = ServeProcess(str(repo), *PORT_FLAGS)
    instances: list[int] = []
    try:
        url = f"http://{server.url('HTTPService')}/v2/models/busy/infer"
        threading.Thread(target=_send, args=(url,), daemon=True).start()
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), server.text
        instances = instance_processes(server.process.pid)
        assert len(instances) == 1 and alive(instances[0])
        server.kill()  # SIGKILL
        assert gone_within(instances[0], 10)
    finally:
        server.kill()
        for pid in instances:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
