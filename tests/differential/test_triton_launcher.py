"""The reference launcher (tools/triton_reference.py) with real Triton: each server has its own
log, a port taken before Triton binds it is replaced, the response cache library is found, and
stopping ends the python stub processes too, from Python and from the command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import triton_reference as tr
from tools.triton_reference import Installation, TritonServer, group_members

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("launcher_repo")
    shutil.copytree(ROOT / "sample_repos" / "models" / "add_sub", repo / "add_sub")
    return repo


def wait_until(condition: object, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def server(repository: Path, tmp_path: Path) -> Iterator[TritonServer]:
    srv = TritonServer(repository, tmp_path / "one.log")
    yield srv
    srv.stop()


def test_stop_ends_the_server_and_its_stubs(server: TritonServer, tmp_path: Path) -> None:
    server.start()
    server.wait_ready(["add_sub"])
    pgid = server.pid
    assert len(group_members(pgid)) >= 2  # tritonserver and the add_sub stub
    other = TritonServer(server.repository, tmp_path / "two.log")
    other.start()
    try:
        assert {server.http_port, server.grpc_port, server.metrics_port}.isdisjoint(
            {other.http_port, other.grpc_port, other.metrics_port}
        )
    finally:
        other.stop()
    server.stop()
    assert group_members(pgid) == []
    assert not server.running
    assert f"Started HTTPService at 0.0.0.0:{server.http_port}" in server.log_path.read_text()
    assert f"0.0.0.0:{server.http_port}" not in (tmp_path / "two.log").read_text()


def test_a_port_taken_before_triton_binds_it_is_replaced(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tr.free_ports
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = [[taken, *real(2)]]
        monkeypatch.setattr(tr, "free_ports", lambda n: picks.pop() if picks else real(n))
        server.start()
        assert server.http_port != taken
        assert server.get("/v2/health/live") == 200
        assert f"'0.0.0.0:{taken}' already in use" in server.log_path.read_text()


def test_a_fixed_port_that_is_taken_is_an_error_with_the_log(
    repository: Path, tmp_path: Path
) -> None:
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        taken = held.getsockname()[1]
        server = TritonServer(repository, tmp_path / "t.log", ports=(taken, *tr.free_ports(2)))
        with pytest.raises(RuntimeError, match="already in use"):
            server.start(timeout=60)
        assert not server.running


def test_the_response_cache_library_is_found(
    repository: Path, tmp_path: Path, triton_installation: Installation
) -> None:
    assert (triton_installation.cache_directory / "local" / "libtritoncache_local.so").exists()
    flags = ["--cache-config=local,size=1048576"]
    with tr.running_server(repository, tmp_path / "c.log", flags, ready=["add_sub"]) as server:
        assert server.get("/v2/models/add_sub/ready") == 200
        assert "Creating TritonCache with name: 'local'" in server.log_path.read_text()


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tools.triton_reference", *args]


def test_the_command_detaches_and_the_group_stops_with_one_signal(
    repository: Path, tmp_path: Path
) -> None:
    log = tmp_path / "d.log"
    done = subprocess.run(
        command(str(repository), "--detach", "--wait", "ready", "--log", str(log)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout)
    pid = started["pid"]
    try:
        assert started["log"] == str(log)
        assert started["http"].startswith("http://127.0.0.1:")
        assert len(group_members(pid)) >= 2
    finally:
        os.killpg(pid, signal.SIGTERM)
    assert wait_until(lambda: group_members(pid) == [])


def test_the_command_in_the_foreground_stops_on_sigterm(repository: Path, tmp_path: Path) -> None:
    log = tmp_path / "f.log"
    proc = subprocess.Popen(
        command(str(repository), "--log", str(log), "--", "--log-verbose=1"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid = 0
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "Ctrl-C stops it" in line, proc.stderr.read() if proc.stderr else line
        pid = int(line.split(" pid ")[1].split(":")[0])
        assert "--log-verbose=1" in (Path("/proc") / str(pid) / "cmdline").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert group_members(pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid and group_members(pid):  # the launcher failed to stop it: do not leave it running
            os.killpg(pid, signal.SIGKILL)


# starts a server from a worker thread that then ends, prints its pid, waits to be killed
LAUNCHER = """
import sys, threading, time
from pathlib import Path
from tools.triton_reference import TritonServer

server = TritonServer(Path(sys.argv[1]), Path(sys.argv[2]))
starter = threading.Thread(target=server.start)
starter.start()
starter.join()
print(server.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_launcher_takes_its_server_along(tmp_path: Path) -> None:
    """A killed pytest run or tool (SIGKILL, a timeout) left tritonserver running: the server
    now gets SIGKILL when the process that started it dies."""
    empty = tmp_path / "empty"
    empty.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(empty), str(tmp_path / "k.log")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = 0
    try:
        assert launcher.stdout is not None
        pid = int(launcher.stdout.readline())
        time.sleep(0.3)
        assert group_members(pid) == [pid]  # it outlived the thread that started it
        launcher.kill()
        launcher.wait()
        assert wait_until(lambda: group_members(pid) == [])
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if pid and group_members(pid):
            os.killpg(pid, signal.SIGKILL)


def test_stop_removes_the_python_backends_shared_memory_regions(server: TritonServer) -> None:
    """A killed tritonserver leaves its python backend's regions in /dev/shm (1 MiB or more
    each; hundreds had piled up on a test machine): stop removes those of its server."""
    server.start()
    server.wait_ready(["add_sub"])
    regions = tr.python_backend_regions([server.pid, *group_members(server.pid)])
    assert regions and all(region.exists() for region in regions)
    os.killpg(server.pid, signal.SIGKILL)  # no chance to clean up after itself
    assert wait_until(lambda: not group_members(server.pid) or not server.running)
    server.stop()
    assert not any(region.exists() for region in regions)


def test_regions_are_read_from_the_processes_mappings() -> None:
    import mmap

    region = Path(f"{tr.SHM_REGION_PREFIX}test-{os.getpid()}")
    region.write_bytes(b"\0" * 4096)
    try:
        with region.open("r+b") as handle, mmap.mmap(handle.fileno(), 4096):
            assert region in tr.python_backend_regions([os.getpid()])
        assert region not in tr.python_backend_regions([os.getpid()])  # unmapped
        assert tr.python_backend_regions([2**22 + 7]) == set()  # no such process
    finally:
        region.unlink()
