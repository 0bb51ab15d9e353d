"""Streamed responses of a decoupled model: real Triton 2.51 vs repokit, in one run.

Run by hand:  .venv/bin/python benchmarks/generate_stream_vs_triton.py [--duration 4] [--rounds 3]

Both servers load the generate test models (``tests/e2e/generate_models.py``); the workloads
use ``token_stream``, a decoupled python model answering N responses for N (here 8 tokens), at
``--concurrency`` clients, driven by ``repokit perf`` in this process (the same client for both
servers):

* HTTP ``/v2/models/token_stream/generate_stream`` (Server-Sent Events, one per response);
* gRPC ``ModelStreamInfer`` (each request asks for an empty final response and is read up to
  it, as perf_analyzer does for decoupled models).

Per workload and server: streams/s, responses/s, the time to first response (p50 and p99 of
the run) and the server's CPU per stream (its process and its model instances' processes). The
rounds alternate the servers; medians and the ratio of medians are printed with the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from _common import Rounds, machine, process_tree_cpu, running_repokit, triton

from repokit.perf.options import ConcurrencyRange, PerfOptions
from repokit.perf.profiler import run_perf_blocking
from tests.e2e.generate_models import MODELS, build_generate_repository

MODEL = "token_stream"
TOKENS = 8


def measure(
    url: str, protocol: str, data: Path, pid: int, concurrency: int, seconds: float
) -> tuple[float, float, int, int, float]:
    """(streams/s, responses/s, time to first response p50 and p99 in us, CPU us per stream)."""
    options = PerfOptions(
        model=MODEL,
        url=url,
        protocol=protocol,
        streaming=protocol == "grpc",
        async_mode=protocol == "grpc",
        endpoint="generate_stream" if protocol == "http" else "infer",
        concurrency_range=ConcurrencyRange(concurrency, concurrency, 1),
        input_data=[str(data)],
        measurement_interval_ms=seconds * 1000 / 3,
        stability_percentage=1000.0,  # three windows, whatever they measure
        max_trials=3,
    )
    before = process_tree_cpu(pid)
    report = run_perf_blocking(options)
    cpu = process_tree_cpu(pid) - before
    if report.exit_code != 0 or not report.results:
        raise RuntimeError(f"perf against {url} failed: exit {report.exit_code}")
    s = report.results[0].summary
    # every request the run sent (the warm-up and the windows): what the CPU paid for
    streams = max(1, sum(w.request_count for w in report.results[0].windows))
    return (
        s.throughput,
        s.response_throughput,
        s.extra["first_response_p50_ns"] // 1000,
        s.extra["first_response_p99_ns"] // 1000,
        1e6 * cpu / streams,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=4, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="generate-bench-"))
    repo = build_generate_repository(work / "models")
    data = work / "tokens.json"
    data.write_text(json.dumps({"data": [{"N": [TOKENS]}]}))
    c = args.concurrency
    workloads = {
        f"HTTP generate_stream, {TOKENS} responses per stream, c={c}": "http",
        f"gRPC ModelStreamInfer, {TOKENS} responses per request, c={c}": "grpc",
    }
    streams, responses = Rounds(), Rounds()
    first: dict[tuple[str, str], list[tuple[int, int]]] = {}
    with (
        triton(repo, work, ready=tuple(MODELS)) as reference,
        running_repokit(repo, ()) as (proc, ports),
    ):
        urls = {
            "triton": {
                "http": reference.url.removeprefix("http://"),
                "grpc": f"127.0.0.1:{reference.grpc_port}",
            },
            "repokit": {"http": f"127.0.0.1:{ports['http']}", "grpc": f"127.0.0.1:{ports['grpc']}"},
        }
        pids = {"triton": reference.pid, "repokit": proc.pid}
        print(machine(), "(before)")
        for _ in range(args.rounds):
            for workload, protocol in workloads.items():
                for name in ("triton", "repokit"):
                    rate, per_s, p50, p99, cpu = measure(
                        urls[name][protocol], protocol, data, pids[name], c, args.duration
                    )
                    streams.add(workload, name, rate, cpu)
                    responses.add(workload, name, per_s, 0.0)
                    first.setdefault((workload, name), []).append((p50, p99))
        print(machine(), "(after)")
    print("streams/s (CPU per stream: the server's process tree)")
    print(streams.render("streams/s"))
    print("responses/s")
    print(responses.render("resp/s"))
    print("time to first response, us (p50 / p99 per run; median of the p50s)")
    for (workload, name), runs in first.items():
        cells = " ".join(f"{p50}/{p99}" for p50, p99 in runs)
        median = statistics.median(p50 for p50, _ in runs)
        print(f"  {workload[:34]:<34} {name:<8} {cells}  median p50 {median:,.0f}")


if __name__ == "__main__":
    main()
