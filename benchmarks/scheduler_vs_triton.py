"""Dynamic batching throughput, side by side in one run: real Triton 2.51 and repokit serving
the sample ``batcher`` model (python backend, sleeps 2 ms per execute whatever the batch,
max_batch_size 32, max_queue_delay_microseconds 500, one instance). Run by hand, not a test:

    .venv/bin/python benchmarks/scheduler_vs_triton.py [--duration 5] [--levels 8,32,64]
                                                       [--rounds 3]

Load: wrk (Debian package) POSTing one FP32[1,4] JSON request per call at each concurrency
level, each server alone in turn (the other one idle); the rounds alternate the servers, their
order reversed every other round. Prints every run's requests/s, the medians, the ratio of
medians, each server's CPU per request (its process tree, the python backend stub included)
and the mean batch size each executed (inference_count / execution_count from the statistics
extension, over the measured run). The ideal is 16,000 req/s (32 every 2 ms).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import requests
from _common import (
    Rounds,
    copy_models,
    machine,
    process_tree_cpu,
    require_tools,
    run_wrk,
    running_repokit,
    triton,
    write_wrk_post_script,
)

MODEL = "batcher"


def counts(base: str) -> tuple[int, int]:
    doc = requests.get(f"{base}/v2/models/{MODEL}/stats", timeout=10).json()
    entry = doc["model_stats"][0]
    return int(entry["inference_count"]), int(entry["execution_count"])


def measure(
    base: str, pid: int, script: Path, conns: int, seconds: int
) -> tuple[float, float, float]:
    """Requests/s, CPU per request (us, the server's process tree) and the mean batch size."""
    url = f"{base}/v2/models/{MODEL}/infer"
    run_wrk(url, script, conns, 1)  # warm-up
    inferences, executions = counts(base)
    cpu_before = process_tree_cpu(pid)
    run = run_wrk(url, script, conns, seconds)
    cpu_us = 1e6 * (process_tree_cpu(pid) - cpu_before) / max(1, run.total)
    after_inf, after_exec = counts(base)
    mean_batch = (after_inf - inferences) / max(1, after_exec - executions)
    return run.rate, cpu_us, mean_batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--levels", default="8,32,64")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds (each runs both servers)"
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    require_tools("wrk", install="wrk")
    workdir = Path(tempfile.mkdtemp(prefix="repokit-sched-bench-"))
    repo = copy_models(workdir / "models", (MODEL,))
    body = workdir / "batcher.json"
    body.write_text(
        json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}]}
        )
    )
    script = write_wrk_post_script(
        workdir / "batcher.lua", body, {"Content-Type": "application/json"}
    )
    rounds = Rounds()
    batches: dict[tuple[str, str], list[float]] = {}
    try:
        with triton(repo, workdir) as reference, running_repokit(repo) as (repokit, ports):
            servers = {
                "triton": (reference.url, reference.pid),
                "repokit": (f"http://127.0.0.1:{ports['http']}", repokit.pid),
            }
            names = list(servers)
            for round_index in range(args.rounds):
                order = names if round_index % 2 == 0 else names[::-1]
                for conns in levels:
                    for name in order:
                        base, pid = servers[name]
                        rate, cpu_us, batch = measure(base, pid, script, conns, args.duration)
                        rounds.add(f"c={conns}", name, rate, cpu_us)
                        batches.setdefault((f"c={conns}", name), []).append(batch)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    title = "batcher (2 ms/execute, max_batch_size 32, delay 500 us, 1 instance)"
    print(machine())
    print(f"{title}: wrk {args.duration} s per run, {args.rounds} rounds, order alternating")
    print(rounds.render())
    print("cpu: each server's process tree (with its python backend stub)")
    for (level, name), sizes in batches.items():
        print(f"mean batch {level} {name}: " + " ".join(f"{size:.1f}" for size in sizes))


if __name__ == "__main__":
    main()
