"""Protocol costs next to model costs: an ONNX model of realistic size served by repokit.

Run by hand:  .venv/bin/python benchmarks/onnx_model_cost.py [--duration 8] [--rounds 3]

The benchmark builds ``mlp_onnx`` with onnx.helper: FP32 [batch, 1024] -> MatMul by a
1024 x 1024 weight -> Relu -> MatMul by a 1024 x 256 weight -> FP32 [batch, 256], about 5 MiB
of weights (onnxruntime backend, max_batch_size 8, dynamic batching with a 100 us queue
delay). Each round measures, one after the other:

* the model alone: ``InferenceSession.run`` in a loop in this process (onnxruntime's own
  threads, as repokit's instance uses them), on one [1, 1024] input and on a batch of 8 rows
  (its rate counted in rows: what the dynamic batcher can reach at best);
* repokit over HTTP with a binary input and output (wrk, Debian package), and over gRPC with
  ``raw_input_contents`` (h2load, Debian package nghttp2-client), at ``--concurrency``.

The per-request time a protocol adds is the server's time per request minus the model's.
This Triton build has no onnxruntime backend, so Triton has no column here (the protocol
comparisons with Triton are in ``grpc_vs_triton.py`` and ``large_tensors_vs_triton.py``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import requests
from _common import (
    Rounds,
    machine,
    process_tree_cpu,
    require_tools,
    run_h2load,
    run_wrk,
    running_repokit,
    write_wrk_post_script,
)
from onnx import TensorProto, helper, numpy_helper

from repokit.protocol.generated import grpc_service_pb2 as pb

MODEL = "mlp_onnx"
WIDTH, HIDDEN, OUT = 1024, 1024, 256


def mlp_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.random((WIDTH, HIDDEN), np.float32) - 0.5) / 32, "W1")
    w2 = numpy_helper.from_array((rng.random((HIDDEN, OUT), np.float32) - 0.5) / 32, "W2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT0", "W1"], ["hidden"]),
            helper.make_node("Relu", ["hidden"], ["active"]),
            helper.make_node("MatMul", ["active", "W2"], ["OUTPUT0"]),
        ],
        MODEL,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", OUT])],
        initializer=[w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write_repository(repo: Path) -> Path:
    version = repo / MODEL / "1"
    version.mkdir(parents=True)
    onnx.save(mlp_model(), version / "model.onnx")
    (repo / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {OUT} ] }} ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n"
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )
    return version / "model.onnx"


def model_alone(path: Path, x: np.ndarray, seconds: float) -> float:
    """Rows/s of the bare session on the batch ``x``."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"INPUT0": x}
    session.run(None, feed)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(None, feed)
        done += 1
    return done * len(x) / (time.perf_counter() - start)


def bodies(work: Path, x: np.ndarray) -> tuple[Path, dict[str, str], Path]:
    head = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": list(x.shape), "datatype": "FP32",
                        "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()  # fmt: skip
    http = work / "http.bin"
    http.write_bytes(head + x.tobytes())
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    msg = pb.ModelInferRequest(model_name=MODEL, raw_input_contents=[x.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=list(x.shape))
    body = msg.SerializeToString()
    grpc_body = work / "grpc.bin"
    grpc_body.write_bytes(b"\x00" + len(body).to_bytes(4, "big") + body)
    return http, headers, grpc_body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    require_tools("wrk", install="wrk")
    require_tools("h2load", install="nghttp2-client")
    work = Path(tempfile.mkdtemp(prefix="onnx-bench-"))
    model_path = write_repository(work / "models")
    x = np.random.default_rng(1).random((1, WIDTH), np.float32)
    http_body, headers, grpc_body = bodies(work, x)
    script = write_wrk_post_script(http_body.with_suffix(".lua"), http_body, headers)
    workload = f"{MODEL} (~{(WIDTH * HIDDEN + HIDDEN * OUT) * 4 >> 20} MiB of weights), [1, 1024]"
    rounds = Rounds(reference="model alone")
    conns = args.concurrency
    try:
        with running_repokit(work / "models") as (proc, ports):
            url = f"http://127.0.0.1:{ports['http']}/v2/models/{MODEL}/infer"
            reply = requests.post(url, data=http_body.read_bytes(), headers=headers, timeout=30)
            reply.raise_for_status()
            print(machine(), "(before)")
            for _ in range(args.rounds):
                rounds.add(workload, "model alone", model_alone(model_path, x, args.duration), 0)
                batch = np.repeat(x, 8, axis=0)
                rows = model_alone(model_path, batch, args.duration)
                rounds.add(workload, "model, batch 8", rows, 0)
                run_wrk(url, script, conns, 1)  # warm-up
                before = process_tree_cpu(proc.pid)
                wrk = run_wrk(url, script, conns, args.duration)
                cpu = 1e6 * (process_tree_cpu(proc.pid) - before) / max(1, wrk.total)
                rounds.add(workload, f"HTTP binary c={conns}", wrk.rate, cpu)
                run_h2load(ports["grpc"], grpc_body, conns, "-D", "1")  # warm-up
                before = process_tree_cpu(proc.pid)
                h2 = run_h2load(ports["grpc"], grpc_body, conns, "-D", str(args.duration))
                cpu = 1e6 * (process_tree_cpu(proc.pid) - before) / max(1, h2.succeeded)
                rounds.add(workload, f"gRPC raw c={conns}", h2.rate, cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(machine(), "(after)")
    print(f"{args.rounds} rounds of {args.duration}s; ratios against the bare session on one "
          "row (batching lets a server exceed it; 'model, batch 8' is in rows/s)")  # fmt: skip
    print(rounds.render())
    alone = rounds.median(workload, "model alone")[0]
    batched = rounds.median(workload, "model, batch 8")[0]
    for server in ("HTTP binary", "gRPC raw"):
        rate = rounds.median(workload, f"{server} c={conns}")[0]
        print(f"  {server}: {1e6 / rate:8.1f} us per request served; the model alone "
              f"{1e6 / alone:8.1f} us per row, {1e6 / batched:8.1f} in batches of 8")  # fmt: skip


if __name__ == "__main__":
    main()
