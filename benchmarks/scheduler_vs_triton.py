"""Dynamic batching throughput, side by side in one run: real Triton 2.51 and repokit serving
the sample ``batcher`` model (python backend, sleeps 2 ms per execute whatever the batch,
max_batch_size 32, max_queue_delay_microseconds 500, one instance). Run by hand, not a test:

    .venv/bin/python benchmarks/scheduler_vs_triton.py [--duration 10] [--levels 8,32,64]

Load: wrk (Debian package) POSTing one FP32[1,4] JSON request per call at each concurrency
level, each server alone in turn (the other one idle). Prints requests/s for both, the ratio
repokit/Triton, and the mean batch size each executed (inference_count / execution_count from
the statistics extension, over the measured run). The ideal is 16,000 req/s (32 every 2 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
TRITON_SCRIPT = Path("/work/shared/tools/triton-reference.sh")
SHARED_TRITON_VENV = Path("/tmp/triton-reference-venv")
MODEL = "batcher"

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
"""


def free_port() -> int:
    while True:
        port = random.randint(20000, 60000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def wait_ready(url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready")


def private_triton_venv(workdir: Path) -> Path:
    """Symlinks into the shared Triton venv so this run's triton.log is its own."""
    venv = workdir / "triton-venv"
    venv.mkdir()
    for entry in SHARED_TRITON_VENV.iterdir():
        if entry.name != "triton.log":
            (venv / entry.name).symlink_to(entry)
    return venv


def run_wrk(url: str, script: Path, conns: int, seconds: int) -> float:
    out = subprocess.run(
        ["wrk", "-t", "2", "-c", str(conns), "-d", f"{seconds}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non_2xx:
        raise RuntimeError(f"{url}: {non_2xx.group(1)} error responses\n{out}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if match is None:
        raise RuntimeError(out)
    return float(match.group(1))


def counts(base: str) -> tuple[int, int]:
    doc = requests.get(f"{base}/v2/models/{MODEL}/stats", timeout=10).json()
    entry = doc["model_stats"][0]
    return int(entry["inference_count"]), int(entry["execution_count"])


def measure(base: str, script: Path, conns: int, seconds: int) -> tuple[float, float]:
    url = f"{base}/v2/models/{MODEL}/infer"
    run_wrk(url, script, conns, 2)  # warm-up
    inferences, executions = counts(base)
    rate = run_wrk(url, script, conns, seconds)
    after_inf, after_exec = counts(base)
    mean_batch = (after_inf - inferences) / max(1, after_exec - executions)
    return rate, mean_batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--levels", default="8,32,64")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install -y wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="repokit-sched-bench-"))
    repo = workdir / "models"
    shutil.copytree(ROOT / "sample_repos" / "models" / MODEL, repo / MODEL)
    body = workdir / "batcher.json"
    body.write_text(
        json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}]}
        )
    )
    script = workdir / "batcher.lua"
    script.write_text(LUA.format(body=body))
    repokit_proc: subprocess.Popen[bytes] | None = None
    triton_pid = None
    try:
        venv = private_triton_venv(workdir)
        t_ports = [free_port() for _ in range(3)]
        out = subprocess.run(
            [str(TRITON_SCRIPT), str(repo), *map(str, t_ports)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "TRITON_VENV": str(venv)},
        )
        triton_pid = int(out.stdout.split()[-1])
        r_port = free_port()
        repokit_proc = subprocess.Popen(
            [
                sys.executable, "-m", "repokit", "serve", str(repo),
                "--http-port", str(r_port), "--grpc-port", str(free_port()),
                "--metrics-port", str(free_port()), "--http-address", "127.0.0.1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )  # fmt: skip
        servers = {
            "triton": f"http://127.0.0.1:{t_ports[0]}",
            "repokit": f"http://127.0.0.1:{r_port}",
        }
        for base in servers.values():
            wait_ready(f"{base}/v2/health/ready")
        results: dict[tuple[str, int], tuple[float, float]] = {}
        for conns in levels:
            for name, base in servers.items():
                results[(name, conns)] = measure(base, script, conns, args.duration)
        title = "batcher (2 ms/execute, max_batch_size 32, delay 500 us, 1 instance)"
        print(f"{title}, wrk {args.duration}s per level")
        print(
            f"{'concurrency':<13}{'triton req/s':>14}{'repokit req/s':>15}{'rk/triton':>11}"
            f"{'triton batch':>14}{'repokit batch':>15}"
        )
        for conns in levels:
            (t, tb), (r, rb) = results[("triton", conns)], results[("repokit", conns)]
            print(f"{conns:<13}{t:>14.0f}{r:>15.0f}{r / t:>11.2f}{tb:>14.1f}{rb:>15.1f}")
    finally:
        if repokit_proc is not None:
            repokit_proc.send_signal(signal.SIGTERM)
            try:
                repokit_proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                repokit_proc.kill()
        if triton_pid is not None:
            os.kill(triton_pid, signal.SIGTERM)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
