"""Real Triton 2.51 (the reference implementation), installed and started by the project itself.

The ``tritonserver`` binary (2.51.0) ships inside the ``nvidia-pytriton`` wheel, pinned here. Only
its python backend is included, so it serves python-backend models and ensembles; models of other
backends fail to load *after* their config has been parsed and validated.

``install()`` puts the wheel into a venv in the user's cache folder (``$REPOKIT_TRITON_HOME``, else
``$XDG_CACHE_HOME/repokit``, else ``~/.cache/repokit``), one folder per wheel and Python version,
with the python backend and the backend stub for that Python beside it. Concurrent callers (test
workers, benchmarks) share it: the install runs under a file lock, into a temporary folder that is
renamed into place once complete, so nobody ever sees half an installation.

``TritonServer`` starts ``tritonserver`` on a repository with free ports (out of the kernel's
ephemeral range) and the caller's flags, writes its own log, waits until it is live (or ready) and
stops it together with its python stub processes (its own process group).

As a command::

    python -m tools.triton_reference REPO [--http-port N ...] [-- tritonserver flags]
    python -m tools.triton_reference --install
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from repokit.parent_death import popen_tied

PYTRITON_VERSION = "0.7.0"  # the nvidia-pytriton release that carries tritonserver 2.51.0
TRITON_VERSION = "2.51.0"
REQUIREMENTS = (f"nvidia-pytriton=={PYTRITON_VERSION}", "numpy<2")
HOME_VARIABLE = "REPOKIT_TRITON_HOME"
STUB_PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")  # the wheel's python backend stubs
MIN_GLIBC = (2, 35)  # the wheel is manylinux_2_35_x86_64
MARKER = "installed.json"
PORT_FLOOR = 20000
ADDRESS_IN_USE = "already in use"  # "Socket '0.0.0.0:N' already in use"
# tritonserver's handler of SIGSEGV and SIGABRT (src/triton_signal.cc) writes this line, then a
# symbolised stack trace, which can take minutes, before it dies: the server has crashed once the
# line is in its log, although its process still runs (and may still answer health checks)
FATAL_SIGNAL = re.compile(rb"^Signal \((?:6|11)\) received\.$", re.MULTILINE)
POLL_S = 0.05  # how often a start looks whether the server is live


class ReferenceUnavailable(RuntimeError):
    """The reference cannot run here; the message says why."""


# ---------------------------------------------------------------------------------- installation


def unsupported_reason(python_version: str | None = None) -> str | None:
    """Why the wheel cannot run on this machine, or None when it can."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in ("x86_64", "AMD64"):
        return f"the Triton reference runs on Linux x86-64 only, not {platform.system()} {machine}"
    libc, version = platform.libc_ver()
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if libc != "glibc" or numbers < MIN_GLIBC:
        found = f"{libc} {version}".strip() or "no glibc"
        return (
            f"the Triton reference needs glibc >= {MIN_GLIBC[0]}.{MIN_GLIBC[1]} "
            f"(nvidia-pytriton {PYTRITON_VERSION} is manylinux_2_35), this system has {found}"
        )
    version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    if version not in STUB_PYTHONS:
        return (
            f"nvidia-pytriton {PYTRITON_VERSION} has python backend stubs for Python "
            f"{STUB_PYTHONS[0]}-{STUB_PYTHONS[-1]}, not {version}"
        )
    return None


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The folder that holds the installations."""
    env = os.environ if environ is None else environ
    if env.get(HOME_VARIABLE):
        return Path(env[HOME_VARIABLE]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "repokit"


def installation_name(python_version: str | None = None) -> str:
    version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    return f"triton-reference-{PYTRITON_VERSION}-py{version}"


@dataclass(frozen=True)
class Installation:
    """An installed reference: a venv with the wheel, the python backend and its stub."""

    home: Path
    site_packages: Path
    python_libdir: str
    python_version: str

    @classmethod
    def read(cls, home: Path) -> Installation | None:
        """The installation in ``home``, or None when there is no complete one."""
        try:
            data = json.loads((home / MARKER).read_text())
            if data["pytriton"] != PYTRITON_VERSION:
                return None
            installation = cls(
                home,
                home / data["site_packages"],
                str(data["python_libdir"]),
                str(data["python_version"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # none, or not one this launcher wrote: installed again
        # the venv's python links to the interpreter it was made with: gone, it is no use
        usable = installation.binary.exists() and (home / "bin" / "python").exists()
        return installation if usable else None

    @property
    def tritonserver_root(self) -> Path:
        return self.site_packages / "pytriton" / "tritonserver"

    @property
    def binary(self) -> Path:
        return self.tritonserver_root / "bin" / "tritonserver"

    @property
    def backend_directory(self) -> Path:
        """For ``--backend-directory``: the python backend with the stub for this Python."""
        return self.home / "backends"

    @property
    def cache_directory(self) -> Path:
        """For ``--cache-directory``: holds ``local/libtritoncache_local.so`` (the response
        cache); Triton's default (/opt/tritonserver/caches) does not exist here."""
        return self.tritonserver_root / "caches"

    def library_path(self) -> list[str]:
        """The folders tritonserver and the python stub load their libraries from."""
        folders = [
            self.tritonserver_root / "external_libs",
            self.tritonserver_root / "lib",
            self.site_packages / "nvidia_pytriton.libs",
        ]
        found = [str(folder) for folder in folders if folder.is_dir()]
        return [*found, self.python_libdir] if self.python_libdir else found

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the library path and PATH the
        server needs; the python stub finds the venv's interpreter (and numpy) through PATH."""
        env = dict(os.environ if base is None else base)
        libraries = self.library_path()
        if env.get("LD_LIBRARY_PATH"):
            libraries.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libraries)
        path = env.get("PATH", os.defpath)
        env["PATH"] = os.pathsep.join([str(self.home / "bin"), path])
        return env

    def command(
        self, repository: Path, http: int, grpc: int, metrics: int, flags: Sequence[str] = ()
    ) -> list[str]:
        """The tritonserver command line; ``--cache-directory`` is added when the flags configure
        a cache (``--cache-config``, ``--response-cache-byte-size``) without naming one."""
        command = [
            str(self.binary),
            f"--model-repository={repository}",
            f"--backend-directory={self.backend_directory}",
            f"--http-port={http}",
            f"--grpc-port={grpc}",
            f"--metrics-port={metrics}",
            *flags,
        ]
        wants_cache = any(
            flag.startswith(("--cache-config", "--response-cache-byte-size")) for flag in flags
        )
        names_one = any(flag.startswith("--cache-directory") for flag in flags)
        if wants_cache and not names_one:
            command.append(f"--cache-directory={self.cache_directory}")
        return command

    def describe(self) -> dict[str, str]:
        return {
            "pytriton": PYTRITON_VERSION,
            "triton": TRITON_VERSION,
            "python": self.python_version,
            "home": str(self.home),
            "binary": str(self.binary),
            "backend_directory": str(self.backend_directory),
            "cache_directory": str(self.cache_directory),
        }


def install(
    root: Path | None = None, python: str | None = None, progress: IO[str] | None = None
) -> Installation:
    """The installation for ``python`` (default: this interpreter) under ``root`` (default:
    ``cache_root()``), installed first if needed. Raises ReferenceUnavailable with the reason
    when this machine cannot run it or the install fails (e.g. no package index)."""
    python = python or sys.executable
    version = _python_version(python)
    reason = unsupported_reason(version)
    if reason:
        raise ReferenceUnavailable(reason)
    root = cache_root() if root is None else root
    home = root / installation_name(version)
    found = Installation.read(home)
    if found is not None:
        return found
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReferenceUnavailable(f"cannot create {root} for the Triton reference: {exc}") from exc
    with _locked(root / f"{home.name}.lock"):
        found = Installation.read(home)  # another worker may have finished meanwhile
        if found is not None:
            return found
        if progress is not None:
            print(
                f"installing Triton {TRITON_VERSION} (nvidia-pytriton {PYTRITON_VERSION}) "
                f"into {home}",
                file=progress,
                flush=True,
            )
        for leftover in [home, *root.glob(f"{home.name}.tmp-*")]:
            shutil.rmtree(leftover, ignore_errors=True)  # incomplete, from an interrupted run
        staging = Path(tempfile.mkdtemp(prefix=f"{home.name}.tmp-", dir=root))
        try:
            staging.chmod(0o755)
            _populate(staging, python, version)
            os.rename(staging, home)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    found = Installation.read(home)
    if found is None:
        raise ReferenceUnavailable(f"the Triton reference in {home} is incomplete after install")
    return found


def _populate(venv: Path, python: str, version: str) -> None:
    """Create the venv in ``venv``, install the wheel, prepare the backend, write the marker."""
    _run([python, "-m", "venv", str(venv)], "creating a venv for the Triton reference")
    venv_python = str(venv / "bin" / "python")
    pip = [venv_python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
    _run(
        [*pip, *REQUIREMENTS],
        f"installing {' '.join(REQUIREMENTS)} (is the package index reachable?)",
    )
    probe = (
        "import json, sysconfig; "
        "print(json.dumps([sysconfig.get_paths()['purelib'], sysconfig.get_config_var('LIBDIR')]))"
    )
    out = _run([venv_python, "-c", probe], "inspecting the venv")
    purelib, libdir = json.loads(out.strip().splitlines()[-1])
    site = Path(purelib)
    tritonserver = site / "pytriton" / "tritonserver"
    stub = tritonserver / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise ReferenceUnavailable(f"nvidia-pytriton {PYTRITON_VERSION} has no stub for {version}")
    backend = venv / "backends" / "python"
    shutil.copytree(tritonserver / "backends" / "python", backend)
    shutil.copy2(stub, backend / stub.name)
    marker = {
        "pytriton": PYTRITON_VERSION,
        "triton": TRITON_VERSION,
        "python_version": version,
        "site_packages": str(site.relative_to(venv)),
        "python_libdir": libdir or "",
    }
    (venv / MARKER).write_text(json.dumps(marker, indent=1) + "\n")


def _python_version(python: str) -> str:
    if python == sys.executable:
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    probe = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    return _run([python, "-c", probe], f"asking {python} for its version").strip()


def _run(command: Sequence[str], what: str) -> str:
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
        )
    except OSError as exc:
        raise ReferenceUnavailable(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line or "rror:" in line] or lines
        detail = "\n".join(errors[-4:]) or f"exit status {done.returncode}"
        raise ReferenceUnavailable(f"{what} failed:\n{detail}")
    return done.stdout


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl  # here: the module is imported (and says why it cannot run) off Linux too

    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------ ports


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux default 32768-60999)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct ports nothing is bound to right now, at random from 20000-65535 outside
    the ephemeral range (so outgoing connections do not take them meanwhile)."""
    rng = rng or random.Random()
    low, high = ephemeral_range()
    candidates = [
        *range(PORT_FLOOR, max(low, PORT_FLOOR)),
        *range(max(high + 1, PORT_FLOOR), 65536),
    ]
    ports: list[int] = []
    while len(ports) < count:
        port = rng.choice(candidates)
        if port not in ports and _bindable(port):
            ports.append(port)
    return ports


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))  # tritonserver binds every address
        except OSError:
            return False
    return True


# ----------------------------------------------------------------------------------------- server


class TritonServer:
    """One ``tritonserver`` process serving ``repository``, logging into ``log_path``.

    ``ports`` fixes (http, grpc, metrics); by default free ones are picked at each start (and
    picked again when one was taken before tritonserver bound it)."""

    def __init__(
        self,
        repository: Path,
        log_path: Path,
        flags: Sequence[str] = (),
        installation: Installation | None = None,
        ports: tuple[int, int, int] | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.repository = Path(repository).resolve()
        # the server gets SIGKILL when this process dies, however (a killed pytest or tool
        # leaves no tritonserver behind); False: it may outlive this process (--detach)
        self.die_with_parent = die_with_parent
        self.log_path = Path(log_path)
        self.flags = list(flags)
        self.installation = installation
        self.fixed_ports = ports
        self.process: subprocess.Popen[bytes] | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.restarts = 0
        self.regions: set[Path] = set()  # python backend regions seen mapped by the server
        self._log_lock = threading.Lock()
        self._log_offset = 0  # where the current process's log lines not yet looked at begin
        self._crashed = False

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    def start(self, timeout: float = 120.0, attempts: int = 3) -> None:
        """Start the server and wait until it is live."""
        installation = self.installation = self.installation or install()
        for attempt in range(attempts):
            http, grpc, metrics = self.fixed_ports or free_ports(3)
            self.http_port, self.grpc_port, self.metrics_port = http, grpc, metrics
            command = installation.command(self.repository, http, grpc, metrics, self.flags)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("ab") as log:
                with self._log_lock:
                    self._log_offset, self._crashed = log.tell(), False
                popen = popen_tied if self.die_with_parent else subprocess.Popen
                self.process = popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=installation.environment(),
                    start_new_session=True,  # its own group: the python stubs join it
                )
            try:
                self.wait_for("/v2/health/live", timeout)
                return
            except RuntimeError:
                taken = ADDRESS_IN_USE in self.log_tail(60)
                if self.fixed_ports or not taken or attempt == attempts - 1:
                    raise

    def wait_for(self, path: str, timeout: float = 120.0) -> None:
        """Poll GET ``path`` until it answers 200; stop the server and raise if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                self.stop()
                raise RuntimeError(
                    f"tritonserver exited while waiting for {path}:\n{self.log_tail()}"
                )
            if self.get(path) == 200:
                return
            time.sleep(POLL_S)
        self.stop()
        raise RuntimeError(f"tritonserver: {path} not 200 in {timeout}s:\n{self.log_tail()}")

    def wait_ready(self, models: Iterable[str] = (), timeout: float = 120.0) -> None:
        """Wait until the server is ready, or, given ``models``, until each of them is."""
        paths = [f"/v2/models/{urllib.parse.quote(m, safe='')}/ready" for m in models]
        for path in paths or ["/v2/health/ready"]:
            self.wait_for(path, timeout)
        self.note_regions()

    def note_regions(self) -> None:
        """Remember the python backend regions the server's processes have mapped now, so that
        stop removes them even when the server has been killed meanwhile."""
        if self.process is not None:
            self.regions |= python_backend_regions(group_of(self.process.pid))

    @property
    def running(self) -> bool:
        """The process has not exited (it may still hang)."""
        return self.process is not None and self.process.poll() is None

    @property
    def crashed(self) -> bool:
        """The server has reported a fatal signal (SIGSEGV, SIGABRT) since it was started."""
        with self._log_lock:
            if self._crashed or self.process is None:
                return self._crashed
            try:
                with self.log_path.open("rb") as log:
                    log.seek(self._log_offset)
                    chunk = log.read()
            except OSError:
                return False
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written is read next time
            self._log_offset += len(complete)
            self._crashed = FATAL_SIGNAL.search(complete) is not None
            return self._crashed

    @property
    def alive(self) -> bool:
        """The process runs, has not crashed and still answers."""
        return (
            self.running
            and not self.crashed
            and any(self.get("/v2/health/live") == 200 for _ in range(3))
        )

    def get(self, path: str) -> int:
        """The status of GET ``path`` (0 when there is no answer)."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint (what tritonclient.grpc and grpc channels take)."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def stop(self, graceful: bool = True) -> None:
        """End the server (SIGTERM, then SIGKILL; only SIGKILL unless ``graceful``) and every
        python stub of its process group. A graceful stop takes tritonserver two seconds at
        least (it looks whether its models are unloaded once a second)."""
        if self.process is None:
            return
        # a crashed server is writing its stack trace: it does not exit on SIGTERM
        signals = ((signal.SIGTERM, 5.0),) if graceful and not self.crashed else ()
        process, self.process = self.process, None
        regions, self.regions = self.regions | python_backend_regions(group_of(process.pid)), set()
        for sig, grace in (*signals, (signal.SIGKILL, 5.0)):
            with contextlib.suppress(OSError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(grace)
                break
        # python stubs of a crashed or stopped server can outlive it: end the whole group
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5.0)
        deadline = time.monotonic() + 5.0
        while group_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        # a python backend whose server or stubs were killed leaves its regions in /dev/shm
        for region in regions:
            with contextlib.suppress(OSError):
                region.unlink()

    def __enter__(self) -> TritonServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that have not exited (zombies do not count)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def group_of(pid: int) -> list[int]:
    """``pid`` and the other live members of its process group (a server and its stubs)."""
    return [pid, *(member for member in group_members(pid) if member != pid)]


SHM_REGION_PREFIX = "/dev/shm/triton_python_backend_shm_region_"


def python_backend_regions(pids: Iterable[int]) -> set[Path]:
    """The python backend's shared-memory regions that the processes ``pids`` have mapped."""
    regions = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)  # address perms offset device inode [path]
            path = fields[5] if len(fields) == 6 else ""
            if path.startswith(SHM_REGION_PREFIX):
                regions.add(Path(path.removesuffix(" (deleted)")))
    return regions


@contextmanager
def running_server(
    repository: Path,
    log_path: Path,
    flags: Sequence[str] = (),
    ready: Iterable[str] | None = None,
    installation: Installation | None = None,
) -> Iterator[TritonServer]:
    """A live Triton serving ``repository``, stopped on exit. ``ready``: None waits for live only,
    () for server readiness, names for those models' readiness."""
    server = TritonServer(repository, log_path, flags, installation)
    server.start()
    try:
        if ready is not None:
            server.wait_ready(ready)
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------- command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.triton_reference",
        description=(
            f"Start real Triton {TRITON_VERSION} (from nvidia-pytriton {PYTRITON_VERSION}, "
            f"installed on first use into ${HOME_VARIABLE}, else $XDG_CACHE_HOME/repokit, else "
            "~/.cache/repokit) on a model repository. Flags after -- go to tritonserver; "
            "--cache-directory is added when they configure a cache without one."
        ),
    )
    parser.add_argument("repository", nargs="?", type=Path, help="the model repository")
    parser.add_argument("--http-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--grpc-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--metrics-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--log", type=Path, help="server log (default: a new temporary file)")
    parser.add_argument(
        "--wait", choices=("live", "ready"), default="live", help="what to wait for (default live)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="print the server as JSON and leave it running (stop it: kill -TERM -PID)",
    )
    parser.add_argument(
        "--install", action="store_true", help="only install; print where things are as JSON"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    split = args_in.index("--") if "--" in args_in else len(args_in)
    parser = _parser()
    args = parser.parse_args(args_in[:split])
    flags = args_in[split + 1 :]
    if args.repository is None and not args.install:
        parser.error("a model repository is needed (or --install)")
    if args.repository is not None and not args.repository.is_dir():
        parser.error(f"{args.repository} is not a folder")
    try:
        installation = install(progress=sys.stderr)
    except ReferenceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.install:
        print(json.dumps(installation.describe(), indent=1))
        return 0
    log = args.log
    if log is None:
        handle, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
        os.close(handle)
        log = Path(name)
    asked = (args.http_port, args.grpc_port, args.metrics_port)
    ports = None  # all free ones: picked at start, again if one is taken meanwhile
    if any(asked):
        free = iter(free_ports(3))
        http, grpc, metrics = (port or next(free) for port in asked)
        ports = (http, grpc, metrics)
    server = TritonServer(
        args.repository, log, flags, installation, ports, die_with_parent=not args.detach
    )
    signal.signal(signal.SIGTERM, _interrupt)  # before the start: a stop meanwhile stops it too
    try:
        server.start(args.timeout)
        if args.wait == "ready":
            server.wait_ready(timeout=args.timeout)
    except RuntimeError as exc:
        print(f"error: {exc}\n(log: {log})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        server.stop()
        return 1
    if args.detach:
        described = {
            "pid": server.pid,
            "http": server.url,
            "grpc": server.grpc_url,
            "metrics": server.metrics_url,
            "log": str(log),
        }
        print(json.dumps(described))
        return 0
    return _serve_until_stopped(server, log)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _serve_until_stopped(server: TritonServer, log: Path) -> int:
    try:
        print(
            f"tritonserver {TRITON_VERSION} pid {server.pid}: HTTP {server.url}, gRPC "
            f"{server.grpc_url}, metrics {server.metrics_url}, log {log} (Ctrl-C stops it)",
            flush=True,
        )
        while server.running:
            time.sleep(0.5)
        print(f"tritonserver exited:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
