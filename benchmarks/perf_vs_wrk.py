"""repokit perf's requests/s against wrk (HTTP) and h2load (gRPC) on real Triton 2.51.

Run by hand:  .venv/bin/python benchmarks/perf_vs_wrk.py [--concurrency 1 8] [--seconds 5]

Starts Triton 2.51 (tools/triton_reference.py through benchmarks/_common.py, with its own log)
on a copy of the
python model ``add_sub``, then at each concurrency measures back to back on the same server
(reference, ours, reference again, because the 2-core machine is shared and noisy):
- wrk -t1 -c N posting the binary-tensor request repokit perf sends (same JSON header + bytes),
- repokit perf -i http --concurrency-range N (its CSV's Inferences/Second),
- wrk again;
- h2load -c N -m 1 -D s posting the serialized ModelInferRequest repokit perf sends,
- repokit perf -i grpc --concurrency-range N (unary), then the same with --streaming,
- h2load again.
Prints every run and the ratio repokit perf / mean of the two reference runs (goal >= 0.9).

Measured 2026-11-22 on the shared 2-core machine (load average 3-8 from other work, so single
runs swing by +-30%; ratios of four complete runs, 6 s each):
    HTTP  c=1: 0.95 0.83 0.54 0.61      HTTP  c=8: 0.93 1.20 1.08 0.95
    gRPC  c=1: 1.06 1.01 0.85 0.90      gRPC  c=8: 1.06 1.16 0.68 1.01
    gRPC streaming c=1: 1.02 1.18 0.99 0.83   c=8: 1.06 1.22 0.98 1.14
Before the own HTTP/2 client (grpc library, sync channels) gRPC was 0.25x (c=1) and 0.50x (c=8).
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    ROOT,
    copy_models,
    machine,
    require_tools,
    run_h2load,
    run_wrk,
    triton,
    write_wrk_post_script,
)

from repokit.perf.transports.base import TransportOptions
from repokit.perf.transports.grpc import GrpcTransport
from repokit.perf.transports.http import HttpTransport


def request_bytes(port_http: int, port_grpc: int) -> tuple[bytes, bytes, bytes]:
    """(HTTP JSON header, HTTP binary tail, gRPC framed body) exactly as repokit perf sends."""
    a = np.random.default_rng(0).random((1, 16)).astype(np.float32)
    inputs = {"INPUT0": ("FP32", a), "INPUT1": ("FP32", a)}
    outputs = [("OUTPUT0", "FP32"), ("OUTPUT1", "FP32")]
    clock = time.monotonic_ns
    http = HttpTransport(TransportOptions("http", f"127.0.0.1:{port_http}"), clock)
    prepared = http.prepare("add_sub", "", inputs, outputs)
    header = b"{" + prepared.fragment
    grpc_prepared = GrpcTransport(TransportOptions("grpc", f"127.0.0.1:{port_grpc}"), clock)
    body = grpc_prepared.prepare("add_sub", "", inputs, outputs).serialized
    framed = b"\x00" + len(body).to_bytes(4, "big") + body
    return header, prepared.binary, framed


def wrk(port: int, lua: Path, concurrency: int, seconds: int) -> float:
    url = f"http://127.0.0.1:{port}/v2/models/add_sub/infer"
    return run_wrk(url, lua, concurrency, seconds, threads=1).rate


def h2load(port: int, body: Path, concurrency: int, seconds: int) -> float:
    run = run_h2load(port, body, concurrency, "-D", str(seconds), "--warm-up-time", "1")
    if run.succeeded < run.done - concurrency:
        raise RuntimeError(f"h2load did not succeed:\n{run.output}")
    return run.rate


def repokit_perf(
    protocol: str, port: int, concurrency: int, seconds: int, work: Path, *extra: str
) -> float:
    out = work / f"perf-{protocol}-{concurrency}.csv"
    cmd = [str(ROOT / ".venv/bin/repokit"), "perf", "-m", "add_sub", "-i", protocol,
           "-u", f"127.0.0.1:{port}", "--concurrency-range", str(concurrency),
           "-p", str(seconds * 1000 // 3), "-s", "15", "-f", str(out), *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"repokit perf failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    for warning in re.findall(r"warning: (.*)", proc.stdout):
        print(f"    repokit perf warning: {warning}")
    with out.open() as f:
        row = next(csv.DictReader(f))
    return float(row["Inferences/Second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=int, default=6)
    args = parser.parse_args()
    require_tools("wrk", "h2load", install="wrk nghttp2-client")
    work = Path(tempfile.mkdtemp(prefix="perf-vs-wrk-"))
    repo = copy_models(work / "models", ("add_sub",))
    try:
        with triton(repo, work, ready=("add_sub",)) as reference:
            measure(reference.http_port, reference.grpc_port, work, args.concurrency, args.seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(http_port: int, grpc_port: int, work: Path, levels: list[int], seconds: int) -> None:
    header, binary, framed = request_bytes(http_port, grpc_port)
    (work / "body.bin").write_bytes(header + binary)
    (work / "grpc.bin").write_bytes(framed)
    lua = write_wrk_post_script(
        work / "post.lua",
        work / "body.bin",
        {"Content-Type": "application/octet-stream",
         "Inference-Header-Content-Length": str(len(header))},
    )  # fmt: skip
    wrk(http_port, lua, 4, 2)  # warm-up
    print(machine())
    print(f"Triton 2.51, add_sub (python backend) 1x16 FP32, {seconds} s per run")
    print(f"{'c':>4} {'wrk':>9} {'perf http':>10} {'wrk':>9} {'ratio':>6}")
    for c in levels:
        first = wrk(http_port, lua, c, seconds)
        ours = repokit_perf("http", http_port, c, seconds, work)
        second = wrk(http_port, lua, c, seconds)
        print(f"{c:>4} {first:>9.1f} {ours:>10.1f} {second:>9.1f} "
              f"{2 * ours / (first + second):>6.2f}")  # fmt: skip
    print(f"{'c':>4} {'h2load':>9} {'perf grpc':>10} {'ratio':>6} {'streaming':>10} "
          f"{'ratio':>6} {'h2load':>9}")  # fmt: skip
    body = work / "grpc.bin"
    for c in levels:
        first = h2load(grpc_port, body, c, seconds)
        unary = repokit_perf("grpc", grpc_port, c, seconds, work)
        streaming = repokit_perf("grpc", grpc_port, c, seconds, work, "--streaming")
        second = h2load(grpc_port, body, c, seconds)
        mean = (first + second) / 2
        print(f"{c:>4} {first:>9.1f} {unary:>10.1f} {unary / mean:>6.2f} {streaming:>10.1f} "
              f"{streaming / mean:>6.2f} {second:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
