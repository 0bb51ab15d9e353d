"""HTTP throughput, side by side in one run: real Triton 2.51, repokit, and a bare Sanic handler
doing the same JSON work (the ceiling of the stack). Run by hand, not a test:

    .venv/bin/python benchmarks/http_vs_triton.py [--duration 10]

Load generator: wrk (Debian package) with Lua scripts that POST
  * add_sub as JSON (FP32[1,16] twice) at concurrency 8,
  * add_sub_onnx, the same requests on onnxruntime (repokit only: this Triton has no onnxruntime
    backend, so its column shows the python add_sub's figure for reference),
  * identity with a 1 MB FP32 binary tensor at concurrency 4.
Prints requests/s per server and the ratios repokit/Triton and repokit/bare-Sanic. Triton runs
from tools/triton_reference.py with this run's own log file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import (
    Wrk,
    copy_models,
    free_port,
    machine,
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (all its threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, body: Path, headers: dict[str, str], conns: int, seconds: int) -> Wrk:
    script = write_wrk_post_script(body.with_suffix(".lua"), body, headers)
    return run_wrk(url, script, conns, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
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
                "triton": reference.url,
                "repokit": f"http://127.0.0.1:{ports['http']}",
                "bare-sanic": bare,
            }
            report(servers, payloads, repokit.pid, args.duration)
    finally:
        stop_processes([bare_sanic])
        shutil.rmtree(workdir, ignore_errors=True)


def report(
    servers: dict[str, str],
    payloads: dict[str, tuple[Path, dict[str, str]]],
    repokit_pid: int,
    duration: int,
) -> None:
    scenarios = [("add_sub", 8), ("add_sub_onnx", 8), ("identity", 4)]
    results: dict[tuple[str, str], float] = {}
    cpu_per_request: dict[str, float] = {}  # repokit's server process, microseconds
    for model, conns in scenarios:
        body, headers = payloads[model]
        for name, base in servers.items():
            served = "add_sub" if model == "add_sub_onnx" and name != "repokit" else model
            if served != model:  # Triton and bare Sanic: the python add_sub's figure
                results[(model, name)] = results[(served, name)]
                continue
            url = f"{base}/v2/models/{served}/infer"
            measure(url, body, headers, conns, 2)  # warm-up
            cpu_before = cpu_seconds(repokit_pid)
            run = measure(url, body, headers, conns, duration)
            if name == "repokit":
                used = cpu_seconds(repokit_pid) - cpu_before
                cpu_per_request[model] = 1e6 * used / max(1, run.total)
            results[(model, name)] = run.rate
    print(machine())
    print(
        f"{'scenario':<24}{'triton':>10}{'repokit':>10}{'bare':>10}{'rk/triton':>11}"
        f"{'rk/bare':>9}{'rk cpu us/req':>15}"
    )
    for model, conns in scenarios:
        t, r, b = (results[(model, n)] for n in ("triton", "repokit", "bare-sanic"))
        label = f"{model} c={conns}"
        print(
            f"{label:<24}{t:>10.0f}{r:>10.0f}{b:>10.0f}{r / t:>11.2f}{r / b:>9.2f}"
            f"{cpu_per_request[model]:>15.1f}"
        )
    print("rk cpu: the repokit server process only (python backend stubs not included)")


if __name__ == "__main__":
    main()
