"""Real Triton 2.51 as a test fixture (and for the benchmarks): start it on a repository with
free ports, wait until it is live (or until models are ready), load models through the
repository API, read its verdicts, stop it with the python stubs of its process group.

The server is started with /work/shared/tools/triton-reference.sh (or $TRITON_REFERENCE_SCRIPT)
with the caller's flags (e.g. ``--model-control-mode=explicit``). It writes its log into
``$TRITON_VENV/triton.log``; to keep parallel users of the shared venv from overwriting each
other's log, a private directory of symlinks to the shared venv is used as TRITON_VENV.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.frontends.http.server_thread import Endpoints

DEFAULT_SCRIPT = Path("/work/shared/tools/triton-reference.sh")
SHARED_VENV = Path("/tmp/triton-reference-venv")
_VENV_ENTRIES = ("bin", "lib", "lib64", "include", "pyvenv.cfg", "triton-backends")
MISSING_BACKEND = "unable to find backend library"


@dataclass(frozen=True)
class LoadResult:
    model: str
    ok: bool
    status: int  # HTTP status, 0 when the load timed out
    message: str

    @property
    def backend_missing(self) -> bool:
        """Triton validated the config but has no library for the model's backend."""
        return MISSING_BACKEND in self.message

    @property
    def timed_out(self) -> bool:
        return self.status == 0


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports, free right now, picked at random in 20000-60000 (out of
    the kernel's ephemeral range, so outgoing connections do not take them meanwhile)."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(20000, 60000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def private_venv(directory: Path) -> Path | None:
    """A symlink farm over the shared venv, so that this server gets its own log file."""
    if not (SHARED_VENV / "bin" / "python").exists():
        return None
    directory.mkdir(parents=True, exist_ok=True)
    for entry in _VENV_ENTRIES:
        source = SHARED_VENV / entry
        if source.exists() and not (directory / entry).exists():
            (directory / entry).symlink_to(source)
    return directory


class TritonReference:
    """One tritonserver process serving ``repository``."""

    def __init__(self, repository: Path, workdir: Path, flags: Sequence[str] = ()) -> None:
        self.repository = repository
        self.workdir = workdir
        self.flags = list(flags)
        self.pid = 0
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.restarts = 0
        self.venv = private_venv(workdir / "venv")

    @property
    def log_path(self) -> Path:
        return (self.venv or SHARED_VENV) / "triton.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self, timeout: float = 120.0) -> None:
        script = Path(os.environ.get("TRITON_REFERENCE_SCRIPT", DEFAULT_SCRIPT))
        if not script.exists():
            raise RuntimeError(f"the Triton reference script {script} is missing")
        http, grpc, metrics = free_ports(3)
        env = dict(os.environ)
        if self.venv is not None:
            env["TRITON_VENV"] = str(self.venv)
        out = subprocess.run(
            [str(script), str(self.repository), str(http), str(grpc), str(metrics), *self.flags],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        self.pid = int(out.stdout.strip().splitlines()[-1])
        self.http_port, self.grpc_port, self.metrics_port = http, grpc, metrics
        self.wait_for("/v2/health/live", timeout)

    def wait_for(self, path: str, timeout: float = 120.0) -> None:
        """Poll GET ``path`` until it answers 200; stop the server and raise if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._alive():
                raise RuntimeError(
                    f"tritonserver exited while waiting for {path}:\n{self.log_tail()}"
                )
            if self._get(path) == 200:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tritonserver: {path} not 200 in {timeout}s:\n{self.log_tail()}")

    def wait_ready(self, models: Iterable[str] = (), timeout: float = 120.0) -> None:
        """Wait until the server is ready, or, given ``models``, until each of them is."""
        paths = [f"/v2/models/{urllib.parse.quote(m, safe='')}/ready" for m in models]
        for path in paths or ["/v2/health/ready"]:
            self.wait_for(path, timeout)

    def _alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        try:
            waited, _ = os.waitpid(self.pid, os.WNOHANG)
            return waited == 0
        except ChildProcessError:
            return True  # not our child (setsid); kill(0) said it exists

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

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

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints(self.url, self.grpc_url, self.metrics_url)

    def load(self, model: str, timeout: float = 60.0) -> LoadResult:
        quoted = urllib.parse.quote(model, safe="")
        request = urllib.request.Request(
            f"{self.url}/v2/repository/models/{quoted}/load", data=b"", method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return LoadResult(model, True, int(response.status), "")
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                message = str(json.loads(body).get("error", ""))
            except ValueError:
                message = body.decode(errors="replace")
            return LoadResult(model, False, int(exc.code), message.strip())
        except OSError as exc:  # timeout: Triton 2.51 hangs on some python-backend failures
            return LoadResult(model, False, 0, f"load did not finish in {timeout}s ({exc})")

    def model_config(self, model: str) -> dict[str, object]:
        """GET /v2/models/<m>/config as JSON."""
        quoted = urllib.parse.quote(model, safe="")
        with urllib.request.urlopen(f"{self.url}/v2/models/{quoted}/config", timeout=10) as r:
            data: dict[str, object] = json.loads(r.read())
            return data

    def index(self) -> list[dict[str, str]]:
        """POST /v2/repository/index: every model with its state and reason."""
        request = urllib.request.Request(
            f"{self.url}/v2/repository/index", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            data: list[dict[str, str]] = json.loads(response.read())
            return data

    def load_all(
        self, models: Sequence[str], timeout: float = 60.0, workers: int = 4
    ) -> dict[str, LoadResult]:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda m: self.load(m, timeout), models))
        return {r.model: r for r in results}

    @property
    def alive(self) -> bool:
        """The process exists and still answers (a crashed server may linger as a zombie)."""
        if not self.pid or not self._alive():
            return False
        return any(self._get("/v2/health/live") == 200 for _ in range(3))

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def judge(
        self, models: Sequence[str], timeout: float = 60.0, workers: int = 4, retries: int = 1
    ) -> dict[str, LoadResult]:
        """Load every model and keep the verdicts, surviving server crashes.

        Triton 2.51 segfaults on a few invalid configs (sometimes only when loads run in
        parallel). When the server dies it is restarted and the loads it cut off are retried,
        in parallel ``retries`` times, then one at a time; a model that kills the server on
        its own gets a failed verdict ("tritonserver crashed while loading it").
        """
        results = self.load_all(models, timeout, workers)
        if self.alive:
            return results
        cut_off = [m for m in models if results[m].timed_out]
        self.restart()
        if retries > 0:
            results.update(self.judge(cut_off, timeout, workers, retries - 1))
            return results
        for model in cut_off:
            result = self.load(model, timeout)
            if not self.alive:
                result = LoadResult(model, False, 0, "tritonserver crashed while loading it")
                self.restart()
            results[model] = result
        return results

    def stop(self) -> None:
        if not self.pid:
            return
        for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            try:  # the script starts the server with setsid: its group holds the python stubs
                os.killpg(self.pid, sig)
            except OSError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._alive():
                time.sleep(0.1)
            if not self._alive():
                break
        # python stubs of a crashed or stopped server can outlive it: end the whole group
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        self.pid = 0


@contextmanager
def running_triton(
    repository: Path, workdir: Path, flags: Sequence[str] = (), ready: Iterable[str] | None = None
) -> Iterator[TritonReference]:
    """A live Triton serving ``repository`` (its private venv and log under ``workdir``), stopped
    on exit. ``ready``: None waits for live only, () for server readiness, names for those
    models' readiness."""
    server = TritonReference(repository, workdir, flags)
    server.start()
    try:
        if ready is not None:
            server.wait_ready(ready)
        yield server
    finally:
        server.stop()
