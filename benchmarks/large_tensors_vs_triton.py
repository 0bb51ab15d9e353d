"""Large tensors through the dynamic batcher: real Triton 2.51 vs repokit, in one run.

Run by hand:  .venv/bin/python benchmarks/large_tensors_vs_triton.py [--duration 8] [--rounds 3]

The model, ``identity_batched``, is the sample python ``identity`` model with
``max_batch_size: 64`` and ``dynamic_batching { max_queue_delay_microseconds: 100 }``: every
request goes through the batcher (merged with the others waiting, split back after) and through
the python backend's instance process both ways, so the figures measure the path of the tensor
bytes from the socket to the model and back. Workloads, at ``--concurrency`` clients:

* HTTP with Triton's binary tensor extension (wrk, Debian package): one FP32 input of 1 MiB
  ([1, 262144]) and of 16 MiB ([1, 4194304]), the output asked for as binary;
* gRPC ModelInfer with ``raw_input_contents`` (h2load, Debian package nghttp2-client), the
  same two sizes.

The rounds alternate the servers (each round runs every workload on Triton, then on repokit);
per server the runs, their median, the server's CPU per request (its process and its model
instances' processes) and the ratio of medians are printed, with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import grpc
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
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc

MODEL = "identity_batched"
SIZES = {"1 MiB": 262144, "16 MiB": 4194304}  # FP32 elements


def add_batched_identity(repo: Path) -> None:
    """The sample identity model with a batch dimension and the dynamic batcher."""
    shutil.copytree(repo / "identity", repo / MODEL)
    shutil.rmtree(repo / "identity")
    (repo / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nbackend: "python"\nmax_batch_size: 64\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )


def http_body(work: Path, elements: int) -> tuple[Path, dict[str, str]]:
    x = np.random.default_rng(0).random(elements, dtype=np.float32).reshape(1, elements)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    path = work / f"http-{elements}.bin"
    path.write_bytes(head + x.tobytes())
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return path, headers


def grpc_request(elements: int) -> pb.ModelInferRequest:
    x = np.random.default_rng(0).random(elements, dtype=np.float32)
    msg = pb.ModelInferRequest(model_name=MODEL, raw_input_contents=[x.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, elements])
    return msg


def grpc_body(work: Path, elements: int) -> Path:
    body = grpc_request(elements).SerializeToString()
    path = work / f"grpc-{elements}.bin"
    path.write_bytes(b"\x00" + len(body).to_bytes(4, "big") + body)
    return path


def check(http_url: str, grpc_port: int) -> None:
    """One real request per protocol answers the input unchanged (the load generators only
    see status codes)."""
    body, headers = http_body(Path(tempfile.mkdtemp(prefix="large-check-")), 1024)
    reply = requests.post(f"{http_url}/v2/models/{MODEL}/infer", data=body.read_bytes(),
                          headers=headers, timeout=30)  # fmt: skip
    reply.raise_for_status()
    sent = body.read_bytes()[-4096:]
    assert reply.content[-4096:] == sent, "HTTP: wrong identity output"
    shutil.rmtree(body.parent, ignore_errors=True)
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}", options=options) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = grpc_request(1024)
        answer = stub.ModelInfer(request, timeout=30)
        assert answer.raw_output_contents[0] == request.raw_input_contents[0], "gRPC: wrong"


def wait_model(http_url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{http_url}/v2/models/{MODEL}/ready", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{MODEL} not ready at {http_url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sizes", default=",".join(SIZES), help="of: " + ", ".join(SIZES))
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--transports", default="native", help="repokit's --grpc-transport(s)")
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    require_tools("h2load", install="nghttp2-client")
    work = Path(tempfile.mkdtemp(prefix="large-bench-"))
    repo = copy_models(work / "models", ("identity",))
    add_batched_identity(repo)
    conns = args.concurrency
    workloads: dict[str, tuple[str, Path, dict[str, str]]] = {}
    for size in args.sizes.split(","):
        elements = SIZES[size]
        if "http" in args.protocols:
            body, headers = http_body(work, elements)
            script = write_wrk_post_script(body.with_suffix(".lua"), body, headers)
            workloads[f"HTTP binary FP32 {size}, c={conns}"] = ("http", script, headers)
        if "grpc" in args.protocols:
            workloads[f"gRPC raw FP32 {size}, c={conns}"] = ("grpc", grpc_body(work, elements), {})
    rounds = Rounds()
    try:
        with ExitStack() as stack:
            reference = stack.enter_context(triton(repo, work))
            servers = {"triton": (reference.url, reference.grpc_port, reference.pid)}
            for transport in args.transports.split(","):
                flags = ("--grpc-transport", transport)
                proc, ports = stack.enter_context(running_repokit(repo, flags))
                url = f"http://127.0.0.1:{ports['http']}"
                servers[f"repokit {transport}"] = (url, ports["grpc"], proc.pid)
            for url, grpc_port, _ in servers.values():
                wait_model(url)
                check(url, grpc_port)
            print(machine(), "(before)")
            for _ in range(args.rounds):
                for workload, (protocol, path, _) in workloads.items():
                    for name, (url, grpc_port, pid) in servers.items():
                        rate, done, cpu = run_one(protocol, path, url, grpc_port, pid, conns,
                                                  args.duration)  # fmt: skip
                        rounds.add(workload, name, rate, 1e6 * cpu / max(1, done))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(machine(), "(after)")
    print(f"{MODEL}: python identity, max_batch_size 64, max_queue_delay_microseconds 100; "
          f"{args.rounds} alternating rounds of {args.duration}s")  # fmt: skip
    print(rounds.render())


def run_one(
    protocol: str, path: Path, url: str, grpc_port: int, pid: int, conns: int, seconds: int
) -> tuple[float, int, float]:
    """(requests/s, requests done, CPU seconds of the server's process tree) of one run."""
    if protocol == "http":
        infer = f"{url}/v2/models/{MODEL}/infer"
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


if __name__ == "__main__":
    main()
