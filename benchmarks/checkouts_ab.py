"""Before and after: ``repokit serve`` of two checkouts on the same workloads, in one run.

Run by hand:  .venv/bin/python benchmarks/checkouts_ab.py BEFORE AFTER [--duration 4] [--rounds 3]

BEFORE and AFTER are checkouts of repokit, each with its own ``.venv`` (``python -m venv
.venv && .venv/bin/pip install -e .``), e.g. a ``git worktree`` of an older commit beside this
one. Each serves its own ``sample_repos/models`` (with that checkout's code), so a change to
the sample repository is part of what is compared. Workloads (wrk and h2load, Debian packages
wrk and nghttp2-client):

* HTTP JSON ``add_sub`` (python, [1,16] FP32 twice) at c=8;
* HTTP JSON ``add_sub_onnx`` (onnxruntime, dynamic batching, 100 us queue delay) at c=8;
* HTTP JSON ``batcher`` (python, 2 ms per batch, dynamic batching) at c=64;
* gRPC ModelInfer ``add_sub`` with raw contents at c=8;
* gRPC ModelStreamInfer ``add_sub``: streams of 16 such requests sent at once, c=8 (the rate
  is responses/s).

The rounds alternate the checkouts (each round starts each checkout's server once and runs
every workload on it); per workload the runs, the medians, the server's CPU per request (its
process and its model instances' processes) and the ratio of medians (AFTER against BEFORE)
are printed with the machine.

``--simultaneous`` loads both servers at the same time instead (the HTTP workloads: one wrk
each, same connections and duration), the order of the pair swapped every round, and prints
each round's CPU per request of both and its ratio. Where the machine's speed drifts from one
second to the next (a shared virtual machine), both servers see the same drift, so the ratio
of CPU per request holds where alternating rounds scatter. Each wrk runs one thread there, and
each round prints the server process's own CPU per request beside that of its whole tree (the
server and its model instances' processes), so a change to one side of the process boundary
shows by itself. ``--connections N`` runs every HTTP workload at N connections instead of its
own (e.g. the batcher at c=8, where each batch's cycle is serialised).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from _common import (
    GRPC_INFER_PATH,
    GRPC_STREAM_PATH,
    Rounds,
    Wrk,
    free_ports,
    machine,
    process_cpu,
    process_tree_cpu,
    require_tools,
    run_h2load,
    run_wrk,
    stop_processes,
    wait_ready,
    write_wrk_post_script,
)

from repokit.protocol.generated import grpc_service_pb2 as pb

A = np.linspace(0.0, 1.5, 16, dtype=np.float32).reshape(1, 16)
B = np.linspace(2.0, 3.5, 16, dtype=np.float32).reshape(1, 16)
STREAM_MESSAGES = 16  # requests per ModelStreamInfer call, sent at once
GRPC_KEYS = ("grpc", "stream")


@contextmanager
def serving(checkout: Path) -> Iterator[tuple[int, dict[str, int]]]:
    """The checkout's ``repokit serve sample_repos/models`` on free loopback ports."""
    names = ("http", "grpc", "metrics")
    ports = dict(zip(names, free_ports(3), strict=True))
    command = [str(checkout / ".venv" / "bin" / "repokit"), "serve", "sample_repos/models",
               "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1"]  # fmt: skip
    for name in names:
        command += [f"--{name}-port", str(ports[name])]
    proc = subprocess.Popen(
        command, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for model in ("add_sub", "add_sub_onnx", "batcher"):
            wait_ready(f"http://127.0.0.1:{ports['http']}/v2/models/{model}/ready")
        yield proc.pid, ports
    finally:
        stop_processes([proc])


def bodies(work: Path) -> dict[str, Path]:
    """The request bodies: wrk scripts per model, and one gRPC message for h2load."""
    out: dict[str, Path] = {}
    for model, shape in (("add_sub", [1, 16]), ("add_sub_onnx", [1, 16]), ("batcher", [1, 4])):
        if model == "batcher":
            row = A.ravel()[:4].tolist()
            inputs = [{"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": row}]
        else:
            inputs = [
                {"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": A.ravel().tolist()},
                {"name": "INPUT1", "shape": shape, "datatype": "FP32", "data": B.ravel().tolist()},
            ]
        body = work / f"{model}.json"
        body.write_bytes(json.dumps({"inputs": inputs}).encode())
        out[model] = write_wrk_post_script(
            work / f"{model}.lua", body, {"Content-Type": "application/json"}
        )
    message = pb.ModelInferRequest(model_name="add_sub")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    message.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    message.raw_input_contents.extend([A.tobytes(), B.tobytes()])
    raw = message.SerializeToString()
    frame = b"\x00" + len(raw).to_bytes(4, "big") + raw
    out["grpc"] = work / "add_sub.grpc"
    out["grpc"].write_bytes(frame)
    out["stream"] = work / "add_sub_stream.grpc"
    out["stream"].write_bytes(frame * STREAM_MESSAGES)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--duration", type=int, default=4, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        action="append",
        choices=("add_sub", "add_sub_onnx", "batcher", "grpc", "stream"),
        help="run only this workload (repeatable; all by default)",
    )
    parser.add_argument(
        "--simultaneous",
        action="store_true",
        help="load both servers at the same time (HTTP workloads), see the docstring",
    )
    parser.add_argument(
        "--connections",
        type=int,
        help="connections of every HTTP workload (default: each workload's own)",
    )
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    require_tools("h2load", install="nghttp2-client")
    for checkout in (args.before, args.after):
        if not (checkout / ".venv" / "bin" / "repokit").exists():
            raise SystemExit(f"{checkout}: no .venv/bin/repokit (install the checkout first)")
    paths = bodies(Path(tempfile.mkdtemp(prefix="checkouts-ab-")))
    workloads = [
        ("HTTP JSON add_sub (python), c=8", "add_sub", 8),
        ("HTTP JSON add_sub_onnx (onnxruntime, dynamic batching), c=8", "add_sub_onnx", 8),
        ("HTTP JSON batcher (python, dynamic batching), c=64", "batcher", 64),
        ("gRPC add_sub raw contents, c=8", "grpc", 8),
        (f"gRPC ModelStreamInfer add_sub, {STREAM_MESSAGES} per stream, c=8", "stream", 8),
    ]
    if args.only:
        workloads = [w for w in workloads if w[1] in args.only]
    if args.connections:
        workloads = [
            (label.rsplit(", c=", 1)[0] + f", c={args.connections}", key, args.connections)
            if key not in GRPC_KEYS
            else (label, key, conns)
            for label, key, conns in workloads
        ]
    if args.simultaneous:
        simultaneous(args.before, args.after, workloads, paths, args.rounds, args.duration)
        return
    rounds = Rounds(reference="before")
    print(machine(), "(before)")
    for _ in range(args.rounds):
        for name, checkout in (("before", args.before), ("after", args.after)):
            with serving(checkout) as (pid, ports):
                for label, key, conns in workloads:
                    if key in GRPC_KEYS:
                        path = GRPC_STREAM_PATH if key == "stream" else GRPC_INFER_PATH
                        per_call = STREAM_MESSAGES if key == "stream" else 1
                        grpc_port = ports["grpc"]
                        run_h2load(grpc_port, paths[key], conns, "-D", "1", path=path)  # warm-up
                        cpu = process_tree_cpu(pid)
                        h2 = run_h2load(
                            grpc_port, paths[key], conns, "-D", str(args.duration), path=path
                        )
                        if h2.succeeded != h2.done:
                            raise RuntimeError(f"{name}: {h2.done - h2.succeeded} calls failed")
                        rate, done = h2.rate * per_call, h2.succeeded * per_call
                    else:
                        url = f"http://127.0.0.1:{ports['http']}/v2/models/{key}/infer"
                        run_wrk(url, paths[key], conns, 1)  # warm-up
                        cpu = process_tree_cpu(pid)
                        wrk = run_wrk(url, paths[key], conns, args.duration)
                        rate, done = wrk.rate, wrk.total
                    cpu = process_tree_cpu(pid) - cpu
                    rounds.add(label, name, rate, 1e6 * cpu / max(1, done))
    print(machine(), "(after)")
    print(f"before: {args.before}\nafter:  {args.after}")
    print(rounds.render())


def simultaneous(
    before: Path,
    after: Path,
    workloads: list[tuple[str, str, int]],
    paths: dict[str, Path],
    rounds: int,
    duration: int,
) -> None:
    """Both checkouts' servers under the same load at the same time, per HTTP workload."""
    print(machine(), "(before)")
    ratios: dict[str, list[float]] = {}
    own_ratios: dict[str, list[float]] = {}
    with serving(before) as (pid_b, ports_b), serving(after) as (pid_a, ports_a):
        servers = {"before": (pid_b, ports_b["http"]), "after": (pid_a, ports_a["http"])}
        for label, key, conns in workloads:
            if key in GRPC_KEYS:
                continue  # h2load's runs are not paired here
            for index in range(rounds):
                order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
                tree = {name: process_tree_cpu(servers[name][0]) for name in order}
                own = {name: process_cpu(servers[name][0]) for name in order}

                def load(name: str, key: str = key, conns: int = conns) -> Wrk:
                    url = f"http://127.0.0.1:{servers[name][1]}/v2/models/{key}/infer"
                    return run_wrk(url, paths[key], conns, duration, threads=1)

                with ThreadPoolExecutor(2) as pool:
                    runs = dict(zip(order, pool.map(load, order), strict=True))
                tree_us, own_us = {}, {}
                for name in order:
                    done = max(1, runs[name].total)
                    tree_us[name] = 1e6 * (process_tree_cpu(servers[name][0]) - tree[name]) / done
                    own_us[name] = 1e6 * (process_cpu(servers[name][0]) - own[name]) / done
                ratio = tree_us["after"] / tree_us["before"]
                own_ratio = own_us["after"] / own_us["before"]
                ratios.setdefault(label, []).append(ratio)
                own_ratios.setdefault(label, []).append(own_ratio)
                print(
                    f"{label}, {' first, '.join(order)} second: "
                    + "; ".join(
                        f"{name} {runs[name].rate:,.0f} req/s, CPU per request: server "
                        f"{own_us[name]:.1f} us, tree {tree_us[name]:.1f} us"
                        for name in ("before", "after")
                    )
                    + f"; after/before: server {own_ratio:.3f}, tree {ratio:.3f}"
                )
    print(machine(), "(after)")
    print(f"before: {before}\nafter:  {after}")
    for label, values in ratios.items():
        for part, figures in (("server", own_ratios[label]), ("tree", values)):
            runs = ", ".join(f"{v:.3f}" for v in figures)
            median = statistics.median(figures)
            print(f"{label}: {part} CPU per request after/before, median {median:.3f} ({runs})")


if __name__ == "__main__":
    main()
