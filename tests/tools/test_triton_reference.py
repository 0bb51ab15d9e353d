"""The reference launcher's installation, ports and command line, without starting Triton (that
is in tests/differential/test_triton_launcher.py): where it installs, when it refuses, how
concurrent installs share one installation, and what a failed install leaves behind."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.differential.triton_reference import CRASHED, NOT_SENT, LoadResult, TritonReference
from tools import triton_reference as tr
from tools.triton_reference import Installation, ReferenceUnavailable

ROOT = Path(__file__).resolve().parents[2]
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_cache_root_prefers_the_variable_then_xdg_then_home(tmp_path: Path) -> None:
    home = Path.home()
    assert tr.cache_root({}) == home / ".cache" / "repokit"
    assert tr.cache_root({"XDG_CACHE_HOME": str(tmp_path / "x")}) == tmp_path / "x" / "repokit"
    both = {"XDG_CACHE_HOME": str(tmp_path / "x"), tr.HOME_VARIABLE: str(tmp_path / "own")}
    assert tr.cache_root(both) == tmp_path / "own"


def test_one_installation_per_wheel_and_python() -> None:
    assert tr.installation_name("3.12") == f"triton-reference-{tr.PYTRITON_VERSION}-py3.12"
    assert tr.installation_name() == f"triton-reference-{tr.PYTRITON_VERSION}-py{PYTHON}"


@pytest.mark.parametrize(
    ("system", "machine", "libc", "expected"),
    [
        ("darwin", "arm64", ("", ""), "Linux x86-64 only"),
        ("linux", "aarch64", ("glibc", "2.39"), "Linux x86-64 only"),
        ("linux", "x86_64", ("glibc", "2.31"), "glibc >= 2.35"),
        ("linux", "x86_64", ("", ""), "glibc >= 2.35"),
    ],
)
def test_machines_the_wheel_cannot_run_on_are_named(
    monkeypatch: pytest.MonkeyPatch,
    system: str,
    machine: str,
    libc: tuple[str, str],
    expected: str,
) -> None:
    monkeypatch.setattr(tr.sys, "platform", system)
    monkeypatch.setattr(tr.platform, "machine", lambda: machine)
    monkeypatch.setattr(tr.platform, "libc_ver", lambda: libc)
    reason = tr.unsupported_reason("3.11")
    assert reason is not None
    assert expected in reason


def test_a_python_without_a_stub_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tr.sys, "platform", "linux")
    monkeypatch.setattr(tr.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(tr.platform, "libc_ver", lambda: ("glibc", "2.36"))
    assert tr.unsupported_reason("3.11") is None
    reason = tr.unsupported_reason("3.14")
    assert reason is not None
    assert "stubs for Python 3.8-3.13, not 3.14" in reason


def test_install_refuses_before_touching_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tr, "unsupported_reason", lambda version=None: "not here")
    with pytest.raises(ReferenceUnavailable, match="not here"):
        tr.install(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def fake_populate(calls: list[str], delay: float = 0.0, fail: bool = False) -> object:
    """Stands in for the pip install: writes what an installation consists of."""

    def populate(venv: Path, python: str, version: str) -> None:
        calls.append(venv.name)
        time.sleep(delay)
        if fail:
            raise ReferenceUnavailable("installing nvidia-pytriton failed: no index")
        site = venv / "lib" / f"python{version}" / "site-packages"
        binary = site / "pytriton" / "tritonserver" / "bin" / "tritonserver"
        binary.parent.mkdir(parents=True)
        binary.write_text("")
        (venv / "bin").mkdir()
        (venv / "bin" / "python").symlink_to(sys.executable)
        marker = {
            "pytriton": tr.PYTRITON_VERSION,
            "python_version": version,
            "site_packages": str(site.relative_to(venv)),
            "python_libdir": "",
        }
        (venv / tr.MARKER).write_text(json.dumps(marker))

    return populate


@pytest.fixture
def supported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tr, "unsupported_reason", lambda version=None: None)


@pytest.mark.usefixtures("supported")
def test_concurrent_installs_share_one_installation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(tr, "_populate", fake_populate(calls, delay=0.3))
    results: list[Installation] = []
    threads = [
        threading.Thread(target=lambda: results.append(tr.install(tmp_path))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1  # the lock kept the others waiting, then they found it installed
    assert len(results) == 4
    assert {r.home for r in results} == {tmp_path / tr.installation_name()}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        tr.installation_name(),
        f"{tr.installation_name()}.lock",
    ]


@pytest.mark.usefixtures("supported")
def test_a_failed_install_leaves_nothing_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(tr, "_populate", fake_populate(calls, fail=True))
    with pytest.raises(ReferenceUnavailable, match="no index"):
        tr.install(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [f"{tr.installation_name()}.lock"]
    monkeypatch.setattr(tr, "_populate", fake_populate(calls))
    assert tr.install(tmp_path).home == tmp_path / tr.installation_name()
    assert len(calls) == 2


@pytest.mark.usefixtures("supported")
def test_leftovers_of_an_interrupted_install_are_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = tr.installation_name()
    (tmp_path / f"{name}.tmp-abc123" / "lib").mkdir(parents=True)  # killed while installing
    (tmp_path / name / "bin").mkdir(parents=True)  # no marker: not complete
    (tmp_path / name / "bin" / "stale").write_text("")
    calls: list[str] = []
    monkeypatch.setattr(tr, "_populate", fake_populate(calls))
    installation = tr.install(tmp_path)
    assert installation.binary.exists()
    assert len(calls) == 1
    assert not (tmp_path / name / "bin" / "stale").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, f"{name}.lock"]


@pytest.mark.usefixtures("supported")
def test_an_installation_whose_interpreter_is_gone_is_made_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(tr, "_populate", fake_populate(calls))
    installation = tr.install(tmp_path)
    link = installation.home / "bin" / "python"
    link.unlink()
    link.symlink_to(tmp_path / "removed-python")  # the base interpreter was uninstalled
    assert tr.install(tmp_path).home == installation.home
    assert len(calls) == 2
    assert (installation.home / "bin" / "python").exists()


@pytest.mark.parametrize("marker", ["", "{", "[]", '{"pytriton": "0.7.0"}', '{"pytriton": "0.1"}'])
def test_a_marker_this_launcher_did_not_write_means_not_installed(
    tmp_path: Path, marker: str
) -> None:
    (tmp_path / tr.MARKER).write_text(marker)
    assert Installation.read(tmp_path) is None


def test_an_unwritable_cache_folder_is_a_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ReferenceUnavailable, match="cannot create"):
        tr.install(blocker / "cache")


def unreachable_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip with no configuration and an index nobody answers on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")


def test_no_package_index_is_a_reason_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if tr.unsupported_reason() is not None:
        pytest.skip(f"needs a machine the wheel runs on: {tr.unsupported_reason()}")
    unreachable_index(monkeypatch)
    with pytest.raises(ReferenceUnavailable) as caught:
        tr.install(tmp_path)
    message = str(caught.value)
    assert "installing nvidia-pytriton==" in message
    assert "is the package index reachable?" in message
    assert [p.name for p in tmp_path.iterdir()] == [f"{tr.installation_name()}.lock"]


def test_the_command_adds_the_cache_folder_only_when_a_cache_is_configured(
    tmp_path: Path,
) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    installation = Installation(tmp_path, site, "/usr/lib", "3.11")
    plain = installation.command(tmp_path / "models", 1, 2, 3, ["--log-verbose=1"])
    assert plain == [
        str(site / "pytriton" / "tritonserver" / "bin" / "tritonserver"),
        f"--model-repository={tmp_path / 'models'}",
        f"--backend-directory={tmp_path / 'backends'}",
        "--http-port=1",
        "--grpc-port=2",
        "--metrics-port=3",
        "--log-verbose=1",
    ]
    cached = installation.command(tmp_path, 1, 2, 3, ["--cache-config=local,size=1024"])
    assert cached[-1] == f"--cache-directory={site / 'pytriton' / 'tritonserver' / 'caches'}"
    own = ["--cache-config", "local,size=1024", "--cache-directory=/elsewhere"]
    assert installation.command(tmp_path, 1, 2, 3, own)[-3:] == own


def test_the_environment_puts_the_libraries_and_the_venv_first(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "nvidia_pytriton.libs").mkdir(parents=True)
    installation = Installation(tmp_path, site, "/base/lib", "3.11")
    env = installation.environment({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/mine"})
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        str(site / "nvidia_pytriton.libs"),  # external_libs and lib do not exist: left out
        "/base/lib",
        "/mine",
    ]
    assert env["PATH"].split(os.pathsep) == [str(tmp_path / "bin"), "/usr/bin"]


def test_free_ports_skip_bound_ones_and_the_ephemeral_range() -> None:
    low, high = tr.ephemeral_range()
    first, second, third = tr.free_ports(3)
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        picks = iter([held.getsockname()[1], first, first, second, third])

        class Scripted(random.Random):
            def choice(self, seq: object) -> int:  # type: ignore[override]
                return next(picks)

        assert tr.free_ports(3, Scripted()) == [first, second, third]
    ports = tr.free_ports(50)
    assert len(set(ports)) == 50
    assert all(p >= tr.PORT_FLOOR and not low <= p <= high for p in ports)


def run_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.triton_reference", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_help_names_the_cache_variable() -> None:
    done = run_command("--help")
    assert done.returncode == 0
    assert tr.HOME_VARIABLE in " ".join(done.stdout.split())
    assert "--detach" in done.stdout


def test_runs_as_a_file_too() -> None:
    done = subprocess.run(
        [sys.executable, "tools/triton_reference.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert "tritonserver" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [((), "a model repository is needed"), (("no-such-folder",), "is not a folder")],
)
def test_usage_errors_exit_2_before_installing(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    env = {**os.environ, tr.HOME_VARIABLE: str(tmp_path / "cache")}
    done = run_command(*args, env=env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "cache").exists()


def test_an_unavailable_reference_exits_1_with_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, tr.HOME_VARIABLE: str(blocker / "cache")}
    done = run_command("--install", env=env)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ")
    assert "Traceback" not in done.stderr


def run_differential(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    """pytest on one differential module where the reference cannot be installed."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, tr.HOME_VARIABLE: str(blocker / "cache"), "CI": ci}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rsE", "-n", "0"]
    command.append("tests/differential/test_grpc_vs_triton.py")
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_differential_tests_are_skipped_with_the_reason(tmp_path: Path) -> None:
    done = run_differential(tmp_path, "")
    assert done.returncode == 0, done.stdout
    assert "skipped" in done.stdout
    assert "passed" not in done.stdout and "failed" not in done.stdout
    assert "the Triton reference cannot run here" in done.stdout


def test_in_ci_a_missing_reference_fails_the_differential_tests(tmp_path: Path) -> None:
    done = run_differential(tmp_path, "true")
    assert done.returncode == 1, done.stdout
    assert "error" in done.stdout
    assert "skipped" not in done.stdout
    assert "CI=true: the differential tests must run" in done.stdout


# ------------------------------------------------------------ a crashed server, without Triton


def crash_stand_in(tmp_path: Path) -> tuple[TritonReference, socket.socket]:
    """A TritonReference whose "tritonserver" is a process that stays up (and would die of
    SIGTERM) and whose HTTP port takes connections but never answers, as a crashed server's."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    server = TritonReference(tmp_path, tmp_path / "srv")
    server.log_path.parent.mkdir(parents=True)
    server.log_path.write_text('I1125 09:08:24.590510 1 server.cc:1] "earlier run"\n')
    server.process = subprocess.Popen(["sleep", "120"], start_new_session=True)
    server.http_port = listener.getsockname()[1]
    return server, listener


def write_crash(server: TritonReference) -> None:
    with server.log_path.open("a") as log:
        log.write('I1125 09:08:26.294319 1 model_lifecycle.cc:624] "successfully unloaded"\n')
        log.write("Signal (11) received.\n")


def test_the_fatal_signal_line_means_crashed_while_the_process_still_runs(tmp_path: Path) -> None:
    server, listener = crash_stand_in(tmp_path)
    with listener:
        assert not server.crashed
        write_crash(server)
        assert server.crashed and server.running and not server.alive
        server.stop()


def test_a_stop_sends_sigterm_first_unless_crashed_or_not_graceful(tmp_path: Path) -> None:
    for crash, graceful, signal_seen in ((False, True, -15), (True, True, -9), (False, False, -9)):
        server, listener = crash_stand_in(tmp_path / f"{crash}-{graceful}")
        with listener:
            if crash:
                write_crash(server)
            process = server.process
            assert process is not None
            server.stop(graceful=graceful)
            assert process.returncode == signal_seen


def test_a_load_the_crash_cuts_off_fails_at_once_as_cut_off(tmp_path: Path) -> None:
    server, listener = crash_stand_in(tmp_path)
    with listener:
        threading.Timer(0.5, write_crash, (server,)).start()
        result = server.load("hangs", timeout=120)  # the request itself would wait 120 s
        assert result == LoadResult("hangs", False, 0, CRASHED)
        assert result.timed_out  # judge() restarts the server and loads it again
        server.stop()


def test_a_load_after_the_crash_is_not_sent(tmp_path: Path) -> None:
    server, listener = crash_stand_in(tmp_path)
    with listener:
        write_crash(server)
        result = server.load("later", timeout=120)
        assert result == LoadResult("later", False, 0, NOT_SENT)  # judge() loads it again
        listener.settimeout(0)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected
        server.stop()
