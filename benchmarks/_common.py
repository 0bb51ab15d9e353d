"""What the side-by-side benchmarks share: real Triton 2.51 (started through
``tests.differential.triton_reference`` over ``tools/triton_reference.py``: free ports, its own
log, stopped with its python stubs), a ``repokit serve`` process, and the wrk / h2load runs
with their output parsed. Imported by the scripts in this folder (run by hand, not tests)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.differential.triton_reference import (  # noqa: E402
    TritonReference,
    free_ports,
    running_triton,
)
from tests.frontends.http.server_thread import copy_models  # noqa: E402

__all__ = [
    "GRPC_INFER_PATH",
    "GRPC_STREAM_PATH",
    "ROOT",
    "H2load",
    "Rounds",
    "TritonReference",
    "Wrk",
    "copy_models",
    "free_port",
    "machine",
    "process_tree_cpu",
    "require_tools",
    "run_h2load",
    "run_wrk",
    "running_repokit",
    "running_triton",
    "stop_processes",
    "triton",
    "wait_ready",
    "write_wrk_post_script",
]

GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
GRPC_STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"


def machine() -> str:
    """The CPU model, its cores and the load average: printed beside every figure, since
    figures from one machine (and one load) do not carry to another."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"CPU: {model}, {os.cpu_count()} cores; load average {load}"


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of one process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid`` alone (0 when it is gone)."""
    stat = _proc_stat(pid)
    return 0.0 if stat is None else stat[1]


def process_tree_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and every process below it (a server and its model
    instance processes, e.g. python stubs): on a loaded machine, CPU per request compares
    servers better than requests/s, which depend on each server's share of the cores."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _proc_stat(int(entry.name))
            if stat is not None:
                stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            total += stats[current][1]
        todo.extend(children.get(current, ()))
    return total


class Rounds:
    """Figures of alternating runs: ``add(workload, server, rate, cpu_us)`` per run, then the
    medians and the ratio of medians against ``reference``. A run that answered nothing
    (rate 0: the server failed or died) is shown as ``failed`` and left out of the median."""

    def __init__(self, reference: str = "triton") -> None:
        self.reference = reference
        self.runs: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def add(self, workload: str, server: str, rate: float, cpu_us: float) -> None:
        self.runs.setdefault((workload, server), []).append((rate, cpu_us))

    def median(self, workload: str, server: str) -> tuple[float, float]:
        """Median rate and CPU per request of the runs that answered (0, 0 if none did)."""
        runs = [(r, c) for r, c in self.runs[(workload, server)] if r > 0]
        if not runs:
            return 0.0, 0.0
        return (statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs))

    def render(self, unit: str = "req/s") -> str:
        """One block per workload: every run, the medians, ratios against the reference
        (rate: higher is better; CPU per request: lower is better)."""
        lines: list[str] = []
        workloads = list(dict.fromkeys(w for w, _ in self.runs))
        for workload in workloads:
            servers = [s for w, s in self.runs if w == workload]
            lines.append(workload)
            for server in servers:
                runs = self.runs[(workload, server)]
                rates = " ".join(f"{r:,.0f}" if r > 0 else "failed" for r, _ in runs)
                rate, cpu = self.median(workload, server)
                median = f"{rate:>9,.0f}" if rate > 0 else f"{'none':>9}"
                line = f"  {server:<16} {unit} {rates:<30} median {median}"
                line += f"  cpu {cpu:7.1f} us/req" if cpu > 0 else ""
                if server != self.reference and (workload, self.reference) in self.runs:
                    ref_rate, ref_cpu = self.median(workload, self.reference)
                    if ref_rate > 0 and rate > 0:  # a server that failed every round has none
                        line += f"  {rate / ref_rate:5.2f}x {self.reference}"
                    if cpu > 0 and ref_cpu > 0:
                        line += f" (cpu {ref_cpu / cpu:4.2f}x)"
                lines.append(line)
        return "\n".join(lines)


def free_port() -> int:
    return free_ports(1)[0]


def require_tools(*tools: str, install: str) -> None:
    """Exit with the install hint when a load generator is missing."""
    for tool in tools:
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install -y {install})")


@contextmanager
def triton(
    repository: Path, workdir: Path, ready: Iterable[str] = (), flags: Sequence[str] = ()
) -> Iterator[TritonReference]:
    """Triton serving ``repository`` (with tritonserver ``flags``), ready (or its ``ready``
    models are), stopped on exit."""
    with running_triton(repository, workdir / "triton", flags, ready=ready) as server:
        yield server


def wait_ready(url: str, timeout: float = 180, any_status: bool = False) -> None:
    """Poll GET ``url`` until it answers 200 (``any_status``: answers at all)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=2).status_code == 200 or any_status:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready")


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    for proc in processes:
        proc.send_signal(sig)
    for proc in processes:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def running_repokit(
    repository: Path, flags: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int]]]:
    """``repokit serve`` (with ``flags``) on loopback with free ports ({"http", "grpc",
    "metrics"}), ready, and stopped (SIGTERM) on exit."""
    names = ("http", "grpc", "metrics")
    ports = dict(zip(names, free_ports(3), strict=True))
    command = [sys.executable, "-m", "repokit", "serve", str(repository),
               "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"]  # fmt: skip
    for name in names:
        command += [f"--{name}-port", str(ports[name])]
    command += list(flags)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        wait_ready(f"http://127.0.0.1:{ports['http']}/v2/health/ready")
        yield proc, ports
    finally:
        stop_processes([proc])


def write_wrk_post_script(script: Path, body: Path, headers: dict[str, str]) -> Path:
    """A wrk Lua script POSTing the bytes of ``body`` with ``headers``."""
    lines = ['wrk.method = "POST"', f'local f = io.open("{body}", "rb")',
             'wrk.body = f:read("*all")', "f:close()"]  # fmt: skip
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    script.write_text("\n".join(lines) + "\n")
    return script


@dataclass(frozen=True)
class Wrk:
    rate: float  # requests/s
    total: int  # requests completed


def run_wrk(url: str, script: Path, connections: int, seconds: int, threads: int = 2) -> Wrk:
    """One wrk run; raises when any response was not 2xx/3xx."""
    command = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
               "-s", str(script), url]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    out = done.stdout
    if done.returncode != 0:
        raise RuntimeError(f"wrk {url} exited with {done.returncode}:\n{out}{done.stderr}")
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non_2xx:
        raise RuntimeError(f"{url}: {non_2xx.group(1)} error responses\n{out}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if rate is None or total is None:
        raise RuntimeError(out)
    return Wrk(float(rate.group(1)), int(total.group(1)))


@dataclass(frozen=True)
class H2load:
    rate: float  # requests/s
    done: int
    succeeded: int
    output: str


def run_h2load(
    port: int, body: Path, concurrency: int, *limit: str, path: str = GRPC_INFER_PATH
) -> H2load:
    """h2load posting ``body`` as one gRPC call (unary ModelInfer unless ``path`` says
    otherwise; a body of several messages makes a stream) on 127.0.0.1:``port``; ``limit`` is
    ``-n N`` or ``-D seconds`` (and any other flags)."""
    command = ["h2load", *limit, "-c", str(concurrency), "-m", "1", "-d", str(body),
               "-H", "content-type: application/grpc", "-H", "te: trailers",
               f"http://127.0.0.1:{port}{path}"]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if done is None or rate is None:
        raise RuntimeError(f"h2load did not succeed:\n{out}")
    return H2load(float(rate.group(1)), int(done.group(1)), int(done.group(2)), out)
