"""HTTP throughput, side by side in one run: real Triton 2.51, repokit, and a bare Sanic handler
doing the same JSON work (the ceiling of the stack). Run by hand, not a test:

    .venv/bin/python benchmarks/http_vs_triton.py [--duration 10]

Load generator: wrk (Debian package) with Lua scripts that POST
  * add_sub as JSON (FP32[1,16] twice) at concurrency 8,
  * add_sub_onnx, the same requests on onnxruntime (repokit only: this Triton has no onnxruntime
    backend, so its column shows the python add_sub's figure for reference),
  * identity with a 1 MB FP32 binary tensor at concurrency 4.
Prints requests/s per server and the ratios repokit/Triton and repokit/bare-Sanic. Triton runs
from a private symlink farm over the shared Triton venv, so its log file is this run's own.
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

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
TRITON_SCRIPT = Path("/work/shared/tools/triton-reference.sh")
SHARED_TRITON_VENV = Path("/tmp/triton-reference-venv")
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

LUA = """
wrk.method = "POST"
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
{headers}
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


def run_wrk(
    url: str, body: Path, headers: dict[str, str], conns: int, seconds: int
) -> tuple[float, int]:
    """(requests/s, requests completed)."""
    script = body.with_suffix(".lua")
    header_lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items())
    script.write_text(LUA.format(body=body, headers=header_lines))
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
    total = re.search(r"(\d+) requests in", out)
    if match is None or total is None:
        raise RuntimeError(out)
    return float(match.group(1)), int(total.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install -y wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="repokit-bench-"))
    repo = workdir / "models"  # Triton's: python models only
    for name in ("add_sub", "identity"):
        shutil.copytree(ROOT / "sample_repos" / "models" / name, repo / name)
    repokit_repo = workdir / "repokit-models"
    for name in ("add_sub", "identity", "add_sub_onnx"):
        shutil.copytree(ROOT / "sample_repos" / "models" / name, repokit_repo / name)
    payloads = make_payloads(workdir)
    processes: list[subprocess.Popen[bytes]] = []
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
        r_port, bare_port = free_port(), free_port()
        processes.append(
            subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "repokit",
                    "serve",
                    str(repokit_repo),
                    "--http-port",
                    str(r_port),
                    "--grpc-port",
                    str(free_port()),
                    "--metrics-port",
                    str(free_port()),
                    "--http-address",
                    "127.0.0.1",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=ROOT,
            )
        )
        processes.append(
            subprocess.Popen(
                [PYTHON, "-c", BARE_SANIC, str(bare_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        servers = {
            "triton": f"http://127.0.0.1:{t_ports[0]}",
            "repokit": f"http://127.0.0.1:{r_port}",
        }
        for base in servers.values():
            wait_ready(f"{base}/v2/health/ready")
        bare = f"http://127.0.0.1:{bare_port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(bare, timeout=1)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        servers["bare-sanic"] = bare
        scenarios = [("add_sub", 8), ("add_sub_onnx", 8), ("identity", 4)]
        results: dict[tuple[str, str], float] = {}
        cpu_per_request: dict[str, float] = {}  # repokit's server process, microseconds
        repokit_pid = processes[0].pid
        for model, conns in scenarios:
            body, headers = payloads[model]
            for name, base in servers.items():
                served = "add_sub" if model == "add_sub_onnx" and name != "repokit" else model
                if served != model:  # Triton and bare Sanic: the python add_sub's figure
                    results[(model, name)] = results[(served, name)]
                    continue
                url = f"{base}/v2/models/{served}/infer"
                run_wrk(url, body, headers, conns, 2)  # warm-up
                cpu_before = cpu_seconds(repokit_pid)
                rate, total = run_wrk(url, body, headers, conns, args.duration)
                if name == "repokit":
                    used = cpu_seconds(repokit_pid) - cpu_before
                    cpu_per_request[model] = 1e6 * used / max(1, total)
                results[(model, name)] = rate
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
    finally:
        for proc in processes:
            proc.send_signal(signal.SIGTERM)
        for proc in processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if triton_pid is not None:
            os.kill(triton_pid, signal.SIGTERM)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
