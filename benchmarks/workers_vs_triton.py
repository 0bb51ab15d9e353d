"""Where `repokit serve`'s time goes under load, per process, beside real Triton 2.51 in the
same run (the measurement behind `repokit serve --workers`; see the README's design). Run by
hand, not a test:

    .venv/bin/python benchmarks/workers_vs_triton.py [--duration 8] [--rounds 3]
                                                     [--workers 1,2]

Workloads (the servers alternate within each round, so a change of the machine's load hits
all of them):

* HTTP JSON: wrk POSTing add_sub (FP32[1,16] twice) as JSON at concurrency 8;
* gRPC: h2load posting unary ModelInfer add_sub (raw_input_contents) at concurrency 8;
* batching: wrk POSTing FP32[1,4] JSON to the sample ``batcher`` (2 ms per execute whatever
  the batch, max_batch_size 32) at concurrency 64.

For each run: requests/s, then the CPU each process used as a share of one core over the
run: repokit's server process (the event loop: with ``--workers 1`` protocol work, scheduling
and statistics; with more, scheduling and statistics only), each of its frontend worker
processes and model instance processes, and Triton's process tree as one figure. ``--workers``
lists the ``repokit serve --workers`` values to run (each one a server of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from _common import (
    copy_models,
    free_port,
    machine,
    process_tree_cpu,
    require_tools,
    run_h2load,
    run_wrk,
    stop_processes,
    triton,
    wait_ready,
    write_wrk_post_script,
)
from grpc_vs_triton import grpc_frame, request_message

PYTHON = sys.executable


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _name(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(part.decode(errors="replace") for part in raw if part)
    if "repokit.frontends.workers.process" in text:
        return "worker"
    if "repokit serve" in text or "repokit', 'serve" in text or " serve " in text:
        return "server"
    return "instance" if "repokit" in text or "python" in text else Path(raw[0].decode()).name


class ProcessCpu:
    """CPU seconds of a process and its direct children, sampled before and after a run."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start: dict[int, float] = {}
        self.t0 = 0.0

    def begin(self) -> None:
        self.start = {p: _cpu(p) for p in [self.pid, *_children(self.pid)]}
        self.t0 = time.monotonic()

    def end(self) -> dict[str, float]:
        """{label: share of one core} over the run."""
        seconds = time.monotonic() - self.t0
        shares: dict[str, float] = {}
        for index, pid in enumerate([self.pid, *_children(self.pid)]):
            used = _cpu(pid) - self.start.get(pid, 0.0)
            label = "main" if index == 0 else f"{_name(pid)}{index}"
            shares[label] = used / seconds
        return shares


@contextmanager
def running_repokit_workers(
    repository: Path, workers: int
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int]]]:
    names = ("http", "grpc", "metrics")
    ports = {name: free_port() for name in names}
    command = [PYTHON, "-m", "repokit", "serve", str(repository),
               "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"]  # fmt: skip
    if workers != 1:
        command += ["--workers", str(workers)]
    for name in names:
        command += [f"--{name}-port", str(ports[name])]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{ports['http']}/v2/health/ready")
        yield proc, ports
    finally:
        stop_processes([proc])


def _payloads(workdir: Path) -> dict[str, Path]:
    a = np.arange(16, dtype=np.float32).tolist()
    add_sub = {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": a},
    ]}  # fmt: skip
    one = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}
    batcher = {"inputs": [one]}
    out = {}
    for name, doc in (("add_sub", add_sub), ("batcher", batcher)):
        body = workdir / f"{name}.json"
        body.write_text(json.dumps(doc))
        out[name] = write_wrk_post_script(
            workdir / f"{name}.lua", body, {"Content-Type": "application/json"}
        )
    grpc_body = workdir / "add_sub.grpc"
    grpc_body.write_bytes(grpc_frame(request_message().SerializeToString()))
    out["grpc"] = grpc_body
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="1")
    parser.add_argument("--no-triton", action="store_true")
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    require_tools("h2load", install="nghttp2-client")
    counts = [int(x) for x in args.workers.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="repokit-workers-bench-"))
    repo = copy_models(workdir / "models", ("add_sub", "batcher"))
    payloads = _payloads(workdir)
    results: dict[tuple[str, str], list[tuple[float, dict[str, float]]]] = {}
    print(machine())
    try:
        with contextlib_exit_stack() as stack:
            servers: dict[str, tuple[int, int, int]] = {}  # name -> (pid, http, grpc)
            if not args.no_triton:
                reference = stack.enter_context(triton(repo, workdir))
                servers["triton"] = (reference.pid, reference.http_port, reference.grpc_port)
            for n in counts:
                proc, ports = stack.enter_context(running_repokit_workers(repo, n))
                servers[f"repokit -w{n}"] = (proc.pid, ports["http"], ports["grpc"])
            workloads: dict[str, Callable[[int, int], float]] = {
                "HTTP JSON add_sub c=8": lambda http, grpc: run_wrk(
                    f"http://127.0.0.1:{http}/v2/models/add_sub/infer",
                    payloads["add_sub"], 8, args.duration,
                ).rate,
                "gRPC add_sub c=8": lambda http, grpc: run_h2load(
                    grpc, payloads["grpc"], 8, "-D", str(args.duration)
                ).rate,
                "batcher JSON c=64": lambda http, grpc: run_wrk(
                    f"http://127.0.0.1:{http}/v2/models/batcher/infer",
                    payloads["batcher"], 64, args.duration,
                ).rate,
            }  # fmt: skip
            for _ in range(args.rounds):
                for workload, run in workloads.items():
                    for name, (pid, http, grpc) in servers.items():
                        cpu = ProcessCpu(pid)
                        before = process_tree_cpu(pid)
                        cpu.begin()
                        t0 = time.monotonic()
                        rate = run(http, grpc)
                        shares = cpu.end()
                        shares["tree"] = (process_tree_cpu(pid) - before) / (time.monotonic() - t0)
                        results.setdefault((workload, name), []).append((rate, shares))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for workload in dict.fromkeys(w for w, _ in results):
        print(workload)
        for (w, name), runs in results.items():
            if w != workload:
                continue
            rates = " ".join(f"{r:,.0f}" for r, _ in runs)
            median = float(np.median([r for r, _ in runs]))
            # CPU per request is steadier than req/s on a shared machine: medians over runs
            tree_us = float(np.median([s["tree"] / r * 1e6 for r, s in runs if r > 0]))
            per_process = {
                label: float(np.median([s.get(label, 0.0) / r * 1e6 for r, s in runs if r > 0]))
                for label in runs[-1][1]
                if label != "tree"
            }
            parts = ", ".join(f"{k} {v:.0f}" for k, v in per_process.items() if v >= 1)
            print(f"  {name:<12} req/s {rates:<24} median {median:>8,.0f}  cpu us/req: "
                  f"tree {tree_us:.0f} ({parts})")  # fmt: skip


@contextmanager
def contextlib_exit_stack() -> Iterator[object]:
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield stack


if __name__ == "__main__":
    main()
