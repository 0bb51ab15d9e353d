"""What tracing costs a repokit server, in one run: the same HTTP JSON load (wrk, FP32[1,16]
twice, concurrency 8) on add_sub (python backend) and add_sub_onnx (in-process onnxruntime),
with tracing off, with Triton-mode tracing on at the default rate (1 request in 1000 traced)
and at rate 1 (every request). Rounds alternate the servers; prints per server the median
requests/s and server CPU per request (its own process, from /proc), and the ratios to tracing
off. Run by hand, not a test:

    .venv/bin/python benchmarks/tracing_cost.py [--duration 6] [--rounds 3]

The HTTP infer endpoint samples every request (in either mode; it reads the ``traceparent``
header) and a traced request takes the standard path instead of the wire lane (add_sub's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    ROOT,
    copy_models,
    free_ports,
    require_tools,
    run_wrk,
    stop_processes,
    wait_ready,
    write_wrk_post_script,
)

MODELS = ("add_sub", "add_sub_onnx")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    work = Path(tempfile.mkdtemp(prefix="tracing_cost_"))
    try:
        _run(work, args.duration, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, duration: int, rounds: int) -> None:
    repo = copy_models(work / "repo", MODELS)
    data = list(range(16))
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": data},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": data},
        ]
    }
    (work / "body.json").write_text(json.dumps(body))
    script = write_wrk_post_script(
        work / "post.lua", work / "body.json", {"Content-Type": "application/json"}
    )
    trace_file = ["--trace-config", f"triton,file={work / 'trace.json'}",
                  "--trace-config", "triton,log-frequency=1000"]  # fmt: skip
    variants = {
        "off": [],
        "on, rate 1000": [*trace_file, "--trace-config", "level=TIMESTAMPS"],
        "on, rate 1": [
            *trace_file,
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=1",
        ],
    }
    rates: dict[str, dict[str, list[float]]] = {v: {m: [] for m in MODELS} for v in variants}
    cpus: dict[str, dict[str, list[float]]] = {v: {m: [] for m in MODELS} for v in variants}
    for round_number in range(rounds):
        for name, flags in variants.items():
            http, grpc, metrics = free_ports(3)
            command = [sys.executable, "-m", "repokit", "serve", str(repo),
                       "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
                       "--http-port", str(http), "--grpc-port", str(grpc),
                       "--metrics-port", str(metrics), *flags]  # fmt: skip
            proc = subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                wait_ready(f"http://127.0.0.1:{http}/v2/health/ready")
                for model in MODELS:
                    url = f"http://127.0.0.1:{http}/v2/models/{model}/infer"
                    run_wrk(url, script, 8, 1)  # warm up
                    before = _cpu_seconds(proc.pid)
                    result = run_wrk(url, script, 8, duration)
                    used = _cpu_seconds(proc.pid) - before
                    rates[name][model].append(result.rate)
                    cpus[name][model].append(used / max(result.total, 1) * 1e6)
            finally:
                stop_processes([proc])
        print(f"round {round_number + 1}/{rounds} done", flush=True)
    off_rate = {m: statistics.median(rates["off"][m]) for m in MODELS}
    off_cpu = {m: statistics.median(cpus["off"][m]) for m in MODELS}
    print(
        f"{'tracing':<16}{'model':<14}{'req/s':>10}{'CPU us/req':>12}{'rate/off':>10}{'CPU/off':>9}"
    )
    for name in variants:
        for model in MODELS:
            rate = statistics.median(rates[name][model])
            cpu = statistics.median(cpus[name][model])
            print(
                f"{name:<16}{model:<14}{rate:>10.0f}{cpu:>12.1f}"
                f"{rate / off_rate[model]:>10.2f}{cpu / off_cpu[model]:>9.2f}"
            )


if __name__ == "__main__":
    main()
