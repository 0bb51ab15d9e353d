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
import shutil
import tempfile
from pathlib import Path

import requests
from _common import (
    copy_models,
    machine,
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


def measure(base: str, script: Path, conns: int, seconds: int) -> tuple[float, float]:
    url = f"{base}/v2/models/{MODEL}/infer"
    run_wrk(url, script, conns, 2)  # warm-up
    inferences, executions = counts(base)
    rate = run_wrk(url, script, conns, seconds).rate
    after_inf, after_exec = counts(base)
    mean_batch = (after_inf - inferences) / max(1, after_exec - executions)
    return rate, mean_batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--levels", default="8,32,64")
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
    try:
        with triton(repo, workdir) as reference, running_repokit(repo) as (_, ports):
            servers = {"triton": reference.url, "repokit": f"http://127.0.0.1:{ports['http']}"}
            results: dict[tuple[str, int], tuple[float, float]] = {}
            for conns in levels:
                for name, base in servers.items():
                    results[(name, conns)] = measure(base, script, conns, args.duration)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    title = "batcher (2 ms/execute, max_batch_size 32, delay 500 us, 1 instance)"
    print(machine())
    print(f"{title}, wrk {args.duration}s per level")
    print(
        f"{'concurrency':<13}{'triton req/s':>14}{'repokit req/s':>15}{'rk/triton':>11}"
        f"{'triton batch':>14}{'repokit batch':>15}"
    )
    for conns in levels:
        (t, tb), (r, rb) = results[("triton", conns)], results[("repokit", conns)]
        print(f"{conns:<13}{t:>14.0f}{r:>15.0f}{r / t:>11.2f}{tb:>14.1f}{rb:>15.1f}")


if __name__ == "__main__":
    main()
