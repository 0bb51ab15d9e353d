"""The response cache under repeated identical requests: real Triton 2.51 vs repokit, in one run.

Run by hand:  .venv/bin/python benchmarks/cache_vs_triton.py [--duration 8] [--rounds 3]

Both servers run with ``--cache-config local,size=16777216`` on a repository of two python
models computing the sample ``add_sub`` (FP32[1,16] twice): ``add_sub_cached`` has
``response_cache { enable: true }``, ``add_sub`` does not (the same requests running the model
every time, for reference). Every request of a run is the same one, so after the first all are
cache hits. Workloads, at ``--concurrency`` clients:

* HTTP JSON (wrk, Debian package) to ``add_sub_cached`` and to ``add_sub``;
* gRPC ModelInfer with ``raw_input_contents`` (h2load, Debian package nghttp2-client) to
  ``add_sub_cached``.

The rounds alternate the servers (each round runs every workload on Triton, then on repokit);
per server the runs, their median, the server's CPU per request (its process and its model
instances' processes) and the ratio of medians are printed, with the machine and its load.
Before the runs one request per server checks the answer; after them the statistics extension
must show the cached model's hits (the cache was used, not bypassed). Triton 2.51 here dies now
and then of a segfault during or after the gRPC runs; it is then restarted before its next run
(its hit count covers the runs since), the run it died in has no figure, and the end of its log
is printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
from _common import (
    Rounds,
    copy_models,
    machine,
    process_tree_cpu,
    require_tools,
    run_h2load,
    run_wrk,
    running_repokit,
    triton,
    write_wrk_post_script,
)

from repokit.protocol.generated import grpc_service_pb2 as pb

CACHED = "add_sub_cached"
PLAIN = "add_sub"
CACHE_FLAGS = ("--cache-config=local,size=16777216",)
A = np.linspace(0.0, 1.5, 16, dtype=np.float32).reshape(1, 16)
B = np.linspace(2.0, 3.5, 16, dtype=np.float32).reshape(1, 16)


def add_cached_model(repo: Path) -> None:
    """A copy of the sample add_sub with the response cache enabled."""
    shutil.copytree(repo / PLAIN, repo / CACHED)
    config = (
        (repo / CACHED / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{CACHED}"')
    )
    (repo / CACHED / "config.pbtxt").write_text(config + "response_cache { enable: true }\n")


def json_body(work: Path) -> Path:
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": A.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": B.ravel().tolist()},
        ]
    }
    path = work / "add_sub.json"
    path.write_bytes(json.dumps(body).encode())
    return path


def grpc_body(work: Path) -> Path:
    msg = pb.ModelInferRequest(model_name=CACHED, raw_input_contents=[A.tobytes(), B.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    msg.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    body = msg.SerializeToString()
    path = work / "add_sub.grpc"
    path.write_bytes(b"\x00" + len(body).to_bytes(4, "big") + body)
    return path


def wait_models(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for model in (CACHED, PLAIN):
        while True:
            try:
                if requests.get(f"{url}/v2/models/{model}/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{model} not ready at {url}")
            time.sleep(0.3)


def check(url: str, body: Path) -> None:
    for model in (CACHED, PLAIN):
        reply = requests.post(f"{url}/v2/models/{model}/infer", data=body.read_bytes(), timeout=30)
        reply.raise_for_status()
        outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
        assert np.allclose(outputs["OUTPUT0"], (A + B).ravel()), f"{model}: wrong OUTPUT0"
        assert np.allclose(outputs["OUTPUT1"], (A - B).ravel()), f"{model}: wrong OUTPUT1"


def cache_hits(url: str) -> tuple[int, int]:
    """(cache hits, model executions) of the cached model."""
    reply = requests.get(f"{url}/v2/models/{CACHED}/stats", timeout=30)
    reply.raise_for_status()
    stats = reply.json()["model_stats"][0]
    return stats["inference_stats"]["cache_hit"]["count"], stats["execution_count"]


def run_one(
    protocol: str, path: Path, url: str, grpc_port: int, pid: int, conns: int, seconds: int
) -> tuple[float, int, float]:
    """(requests/s, requests done, CPU seconds of the server's process tree) of one run."""
    if protocol.startswith("http"):
        model = CACHED if protocol == "http-cached" else PLAIN
        infer = f"{url}/v2/models/{model}/infer"
        run_wrk(infer, path, conns, 1)  # warm-up
        before = process_tree_cpu(pid)
        wrk = run_wrk(infer, path, conns, seconds)
        return wrk.rate, wrk.total, process_tree_cpu(pid) - before
    run_h2load(grpc_port, path, conns, "-D", "1")  # warm-up
    before = process_tree_cpu(pid)
    h2 = run_h2load(grpc_port, path, conns, "-D", str(seconds))
    if h2.succeeded != h2.done:
        raise RuntimeError(f"h2load: {h2.done - h2.succeeded} calls failed\n{h2.output}")
    return h2.rate, h2.succeeded, process_tree_cpu(pid) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    require_tools("h2load", install="nghttp2-client")
    work = Path(tempfile.mkdtemp(prefix="cache-bench-"))
    repo = copy_models(work / "models", (PLAIN,))
    add_cached_model(repo)
    body = json_body(work)
    script = write_wrk_post_script(
        body.with_suffix(".lua"), body, {"Content-Type": "application/json"}
    )
    conns = args.concurrency
    workloads = {
        f"HTTP JSON {CACHED} (all hits), c={conns}": ("http-cached", script),
        f"HTTP JSON {PLAIN} (no cache), c={conns}": ("http-plain", script),
        f"gRPC {CACHED} (all hits), c={conns}": ("grpc", grpc_body(work)),
    }
    rounds = Rounds()
    hits: dict[str, tuple[int, int]] = {}
    crashes: list[str] = []  # Triton 2.51 segfaults now and then under this load
    try:
        with (
            triton(repo, work, flags=CACHE_FLAGS) as reference,
            running_repokit(repo, CACHE_FLAGS) as (proc, ports),
        ):

            def endpoints(name: str) -> tuple[str, int, int]:
                if name == "triton":
                    return reference.url, reference.grpc_port, reference.pid
                return f"http://127.0.0.1:{ports['http']}", ports["grpc"], proc.pid

            for name in ("triton", "repokit"):
                wait_models(endpoints(name)[0])
                check(endpoints(name)[0], body)
            print(machine(), "(before)")
            for _ in range(args.rounds):
                for workload, (protocol, path) in workloads.items():
                    for name in ("triton", "repokit"):
                        if name == "triton" and not reference.running:
                            crashes.append(reference.log_tail(12))
                            reference.restart()
                            wait_models(reference.url)
                            check(reference.url, body)
                        url, grpc_port, pid = endpoints(name)
                        try:
                            rate, done, cpu = run_one(protocol, path, url, grpc_port, pid, conns,
                                                      args.duration)  # fmt: skip
                        except RuntimeError:
                            if proc.poll() is not None:
                                print(f"repokit exited with {proc.returncode}")
                            if name == "repokit" or reference.running:
                                raise
                            continue  # Triton died during the run: no figure for it (restarted
                            # before its next run)
                        rounds.add(workload, name, rate, 1e6 * cpu / max(1, done))
            if reference.running:
                hits["triton"] = cache_hits(reference.url)
            else:
                crashes.append(reference.log_tail(12))
            hits["repokit"] = cache_hits(endpoints("repokit")[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(machine(), "(after)")
    print(f"{CACHE_FLAGS[0]}; {args.rounds} alternating rounds of {args.duration}s")
    print(rounds.render())
    for tail in crashes:
        print(f"triton crashed and was restarted; its log ended:\n{tail}")
    for name, (hit, executions) in hits.items():
        print(f"{name}: {CACHED} cache hits {hit:,}, executions {executions:,}")
        if hit == 0 or executions > 1:
            raise SystemExit(f"{name}: the cached model ran more than once: the cache was bypassed")


if __name__ == "__main__":
    main()
