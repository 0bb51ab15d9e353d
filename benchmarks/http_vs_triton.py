"""HTTP throughput, side by side in one run: real Triton 2.51, repokit, and a bare Sanic handler
doing the same JSON work (the ceiling of the stack). Run by hand, not a test:

    .venv/bin/python benchmarks/http_vs_triton.py [--duration 5] [--rounds 3]

Load generator: wrk (Debian package) with Lua scripts that POST
  * add_sub as JSON (FP32[1,16] twice) at concurrency 8,
  * add_sub_onnx, the same requests on onnxruntime (repokit only: this Triton has no onnxruntime
    backend, so its column shows the python add_sub's figure for reference),
  * identity with a 1 MB FP32 binary tensor at concurrency 4.
The rounds alternate the servers (their order reversed every other round, so a drift of the
machine's speed hits each alike). Prints every run's requests/s, the medians, the ratio of
medians against Triton, each server's CPU per request (its whole process tree: Triton's and
repokit's python backend stubs included) and repokit/bare-Sanic. Triton runs from
tools/triton_reference.py with this run's own log file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import (
    Rounds,
    Wrk,
    copy_models,
    free_port,
    machine,
    process_tree_cpu,
    require_tools,
    run_wrk,
    running_repokit,
    stop_processes,
    triton,
    wait_ready,
    write_wrk_post_script,
)

PYTHON = sys.executable

BARE_SANIC = r"""
import sys
import numpy as np
import orjson
from sanic import Sanic, HTTPResponse

app = Sanic("bare_ceiling", configure_logging=False)
app.config.ACCESS_LOG = False

@app.post("/v2/models/<name>/infer")
async def infer(request, name):
    header_length = request.headers.get("inference-header-content-length")
    if header_length is None:
        doc = orjson.loads(request.body)
        a = np.asarray(doc["inputs"][0]["data"], dtype=np.float32)
        b = np.asarray(doc["inputs"][1]["data"], dtype=np.float32)
        out = {"model_name": name, "model_version": "1", "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16], "data": (a + b).tolist()},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 16], "data": (a - b).tolist()}]}
        return HTTPResponse(orjson.dumps(out), content_type="application/json")
    n = int(header_length)
    doc = orjson.loads(memoryview(request.body)[:n])
    x = np.frombuffer(memoryview(request.body)[n:], dtype=np.float32)
    head = orjson.dumps({"model_name": name, "model_version": "1", "outputs": [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [x.size],
         "parameters": {"binary_data_size": x.nbytes}}]})
    return HTTPResponse(b"".join([head, x.data]), content_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(len(head))})

app.run(host="127.0.0.1", port=int(sys.argv[1]), single_process=True, access_log=False)
"""


def make_payloads(workdir: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    a = np.random.rand(16).astype(np.float32)
    b = np.random.rand(16).astype(np.float32)
    add_sub = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": b.tolist()},
        ],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1"}],
    }
    add_sub_path = workdir / "add_sub.json"
    add_sub_path.write_bytes(json.dumps(add_sub).encode())
    x = np.random.rand(262144).astype(np.float32)  # 1 MiB
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [x.size],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    identity_path = workdir / "identity.bin"
    identity_path.write_bytes(head + x.tobytes())
    return {
        "add_sub": (add_sub_path, {"Content-Type": "application/json"}),
        "add_sub_onnx": (add_sub_path, {"Content-Type": "application/json"}),
        "identity": (
            identity_path,
            {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(len(head)),
            },
        ),
    }


def measure(url: str, body: Path, headers: dict[str, str], conns: int, seconds: int) -> Wrk:
    script = write_wrk_post_script(body.with_suffix(".lua"), body, headers)
    return run_wrk(url, script, conns, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds (each runs every server)"
    )
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    workdir = Path(tempfile.mkdtemp(prefix="repokit-bench-"))
    repo = copy_models(workdir / "models", ("add_sub", "identity"))  # Triton's: python only
    repokit_repo = copy_models(workdir / "repokit-models", ("add_sub", "identity", "add_sub_onnx"))
    payloads = make_payloads(workdir)
    bare_port = free_port()
    bare_sanic = subprocess.Popen(
        [PYTHON, "-c", BARE_SANIC, str(bare_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with triton(repo, workdir) as reference, running_repokit(repokit_repo) as (repokit, ports):
            bare = f"http://127.0.0.1:{bare_port}"
            wait_ready(bare, timeout=60, any_status=True)
            servers = {
                "triton": (reference.url, reference.pid),
                "repokit": (f"http://127.0.0.1:{ports['http']}", repokit.pid),
                "bare-sanic": (bare, bare_sanic.pid),
            }
            rounds = run_rounds(servers, payloads, args.duration, args.rounds)
    finally:
        stop_processes([bare_sanic])
        shutil.rmtree(workdir, ignore_errors=True)
    print(machine())
    print(f"wrk {args.duration} s per run; {args.rounds} rounds, the servers' order alternating")
    print(rounds.render())
    print(
        "cpu: each server's process tree (Triton and repokit with their python backend stubs); "
        "add_sub_onnx: Triton and bare Sanic show the python add_sub's runs"
    )
    for workload in dict.fromkeys(w for w, _ in rounds.runs):
        rk, bare_rate = (
            rounds.median(workload, "repokit")[0],
            rounds.median(workload, "bare-sanic")[0],
        )
        if rk > 0 and bare_rate > 0:
            print(f"{workload}: repokit/bare-sanic {rk / bare_rate:.2f}")


def run_rounds(
    servers: dict[str, tuple[str, int]],
    payloads: dict[str, tuple[Path, dict[str, str]]],
    duration: int,
    rounds: int,
) -> Rounds:
    """Every workload on every server, ``rounds`` times; the servers' order is reversed every
    other round, so a drift of the machine's speed does not favour one of them."""
    scenarios = [("add_sub", 8), ("add_sub_onnx", 8), ("identity", 4)]
    result = Rounds()
    names = list(servers)
    for round_index in range(rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for model, conns in scenarios:
            body, headers = payloads[model]
            label = f"{model} c={conns}"
            for name in order:
                base, pid = servers[name]
                served = "add_sub" if model == "add_sub_onnx" and name != "repokit" else model
                if served != model:  # Triton and bare Sanic: this round's python add_sub run
                    result.add(label, name, *result.runs[(f"{served} c={conns}", name)][-1])
                    continue
                url = f"{base}/v2/models/{served}/infer"
                measure(url, body, headers, conns, 1)  # warm-up
                cpu_before = process_tree_cpu(pid)
                run = measure(url, body, headers, conns, duration)
                cpu_us = 1e6 * (process_tree_cpu(pid) - cpu_before) / max(1, run.total)
                result.add(label, name, run.rate, cpu_us)
    return result


if __name__ == "__main__":
    main()
