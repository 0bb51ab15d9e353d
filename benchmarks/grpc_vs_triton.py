"""gRPC throughput: real Triton 2.51 vs repokit (native transport and grpc.aio) vs bare
servers, in one run.

Run by hand:  .venv/bin/python benchmarks/grpc_vs_triton.py [--duration 8] [--rounds 3]
              [--transports native,grpcio] [--no-bare]

``repokit serve`` runs once per ``--grpc-transport`` named in ``--transports`` (its own HTTP/2
server, ``native``, and grpc.aio, ``grpcio``), side by side.

A neutral load generator (h2load, Debian package nghttp2-client) posts length-prefixed
serialized ModelInferRequests (raw_input_contents, FP32 x 16 twice) with the headers
``content-type: application/grpc`` and ``te: trailers``, at the given concurrency (separate
HTTP/2 connections). Workloads:

* unary ModelInfer on ``add_sub`` (max_batch_size 8, shape [1, 16]: with a batch dimension);
* unary ModelInfer on ``add_sub_nobatch`` (the same model with max_batch_size 0, shape [16]);
* ModelStreamInfer on ``add_sub``: each call is a stream of ``--stream-messages`` requests
  sent at once, answered one response each; the rate printed is responses/s.

The rounds alternate the servers (each round runs every workload on every server in turn), so
a change of the machine's load hits all of them; per server the runs, their median, the
server's CPU per request (its process and its model instances' processes) and the ratios of
medians against Triton are printed, with the machine and its load average. The bare servicer
does the same work (decode raw bytes, add/sub with numpy, build the response) with no model
machinery, on uvloop as ``repokit serve`` runs: the ceiling of the grpc.aio stack. The bare
HTTP/2 server (``bare_h2_grpc.py``) does the same work over our own HTTP/2 framing: what an own
gRPC transport could give instead of grpc.aio.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import grpc
import numpy as np
from _common import (
    GRPC_INFER_PATH,
    GRPC_STREAM_PATH,
    ROOT,
    H2load,
    Rounds,
    copy_models,
    free_port,
    machine,
    process_tree_cpu,
    require_tools,
    run_h2load,
    running_repokit,
    stop_processes,
    triton,
)

from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc

BARE_SERVER = """
import asyncio, signal, sys
import grpc, numpy as np
from repokit.protocol.generated import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg

class Bare:
    async def ModelInfer(self, request, context):
        a = np.frombuffer(request.raw_input_contents[0], dtype=np.float32)
        b = np.frombuffer(request.raw_input_contents[1], dtype=np.float32)
        reply = pb.ModelInferResponse(
            model_name=request.model_name, model_version="1", id=request.id)
        for name in ("OUTPUT0", "OUTPUT1"):
            reply.outputs.add(name=name, datatype="FP32", shape=[1, 16])
        reply.raw_output_contents.extend([(a + b).tobytes(), (a - b).tobytes()])
        return reply
    async def ModelStreamInfer(self, requests, context):
        async for request in requests:
            reply = await self.ModelInfer(request, context)
            yield pb.ModelStreamInferResponse(infer_response=reply)
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

async def main():
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handlers = {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(Bare().ModelInfer,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(Bare().ModelStreamInfer,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelStreamInferResponse.SerializeToString),
        "ServerReady": grpc.unary_unary_rpc_method_handler(Bare().ServerReady,
            request_deserializer=pb.ServerReadyRequest.FromString,
            response_serializer=pb.ServerReadyResponse.SerializeToString),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", handlers)])
    server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    await server.start()
    # stop the server on SIGINT/SIGTERM inside the running loop, so grpc.aio never tries to
    # shut it down from a finalizer after the loop has closed
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(None)

import uvloop  # the loop repokit serve runs on, so both pay the same loop costs
uvloop.run(main())
"""


NOBATCH = "add_sub_nobatch"


def request_message(model: str = "add_sub") -> pb.ModelInferRequest:
    shape = [16] if model == NOBATCH else [1, 16]
    a = np.arange(16, dtype=np.float32).reshape(shape)
    msg = pb.ModelInferRequest(model_name=model, raw_input_contents=[a.tobytes(), a.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=shape)
    msg.inputs.add(name="INPUT1", datatype="FP32", shape=shape)
    return msg


def grpc_frame(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def add_nobatch_model(repo: Path) -> None:
    """``add_sub`` with max_batch_size 0 (inputs and outputs without a batch dimension)."""
    shutil.copytree(repo / "add_sub", repo / NOBATCH)
    config = repo / NOBATCH / "config.pbtxt"
    text = config.read_text().replace('name: "add_sub"', f'name: "{NOBATCH}"')
    config.write_text(re.sub(r"max_batch_size: \d+", "max_batch_size: 0", text))


def wait_and_check(port: int, deadline_s: float = 180.0) -> None:
    """Wait until ready, then check that real calls succeed (h2load only sees HTTP 200)."""
    expected = 2 * np.arange(16, dtype=np.float32)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        end = time.monotonic() + deadline_s
        while True:
            try:
                if stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                    break
            except grpc.RpcError:
                pass
            if time.monotonic() > end:
                raise RuntimeError(f"server on port {port} never became ready")
            time.sleep(0.5)
        for model in ("add_sub", NOBATCH):
            reply = stub.ModelInfer(request_message(model), timeout=30)
            out = np.frombuffer(reply.raw_output_contents[0], dtype=np.float32)
            assert np.array_equal(out, expected), f"wrong {model} output"
        replies = list(stub.ModelStreamInfer(iter([request_message()] * 2), timeout=30))
        assert len(replies) == 2 and not replies[0].error_message, "stream failed"
        out = np.frombuffer(replies[0].infer_response.raw_output_contents[0], dtype=np.float32)
        assert np.array_equal(out, expected), "wrong stream output"


def failed_calls(server: str, workload: str, run: H2load, pid: int) -> str:
    """What to say when some calls of a run failed: a run that answered nothing counts as
    failed (not as 0 req/s), and a server that died says so."""
    alive = Path(f"/proc/{pid}").exists()
    codes = re.search(r"status codes: .*", run.output)
    return (
        f"{server}: {run.done - run.succeeded} of {run.done} calls failed on {workload}"
        f" ({codes.group(0) if codes else 'no status codes'});"
        f" its process {'still runs' if alive else 'has exited'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--stream-messages", type=int, default=16)
    parser.add_argument("--no-bare", action="store_true", help="leave out the bare servers")
    parser.add_argument("--transports", default="native,grpcio", help="repokit's, comma-separated")
    args = parser.parse_args()
    require_tools("h2load", install="nghttp2-client")
    work = Path(tempfile.mkdtemp(prefix="grpc-bench-"))
    repo = copy_models(work / "models", ("add_sub",))
    add_nobatch_model(repo)
    messages = args.stream_messages
    bodies = {}
    for name, model, count in (("unary", "add_sub", 1), ("unary-nobatch", NOBATCH, 1),
                               ("stream", "add_sub", messages)):  # fmt: skip
        bodies[name] = work / f"{name}.bin"
        bodies[name].write_bytes(grpc_frame(request_message(model).SerializeToString()) * count)
    workloads = {
        f"unary ModelInfer add_sub [1,16] (max_batch_size 8), c={args.concurrency}":
            (bodies["unary"], GRPC_INFER_PATH, 1),
        f"unary ModelInfer add_sub [16] (max_batch_size 0), c={args.concurrency}":
            (bodies["unary-nobatch"], GRPC_INFER_PATH, 1),
        f"ModelStreamInfer add_sub, {messages} requests per stream, c={args.concurrency} "
        "(responses/s)": (bodies["stream"], GRPC_STREAM_PATH, messages),
    }  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bare_port = free_port()
    bare = None
    h2_port = free_port()
    h2 = None
    if not args.no_bare:
        bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(bare_port)], env=env)
        script = Path(__file__).with_name("bare_h2_grpc.py")
        h2 = subprocess.Popen([sys.executable, str(script), str(h2_port)], env=env)
    rounds = Rounds()
    try:
        with ExitStack() as stack:
            reference = stack.enter_context(triton(repo, work))
            targets = {"triton": (reference.grpc_port, reference.pid)}
            for transport in args.transports.split(","):
                flags = ("--grpc-transport", transport)
                proc, ports = stack.enter_context(running_repokit(repo, flags))
                targets[f"repokit {transport}"] = (ports["grpc"], proc.pid)
            if bare is not None and h2 is not None:
                targets["bare grpc.aio"] = (bare_port, bare.pid)
                targets["bare own HTTP/2"] = (h2_port, h2.pid)
            for port, _ in targets.values():
                wait_and_check(port)
            print(machine(), "(before)")
            for _ in range(args.rounds):
                for workload, (body, path, count) in workloads.items():
                    for name, (port, pid) in targets.items():
                        run_h2load(port, body, args.concurrency, "-D", "1", path=path)  # warm-up
                        cpu = process_tree_cpu(pid)
                        run = run_h2load(
                            port, body, args.concurrency, "-D", str(args.duration), path=path
                        )
                        used = process_tree_cpu(pid) - cpu
                        done = run.succeeded * count
                        if run.succeeded < run.done:
                            print(failed_calls(name, workload, run, pid), file=sys.stderr)
                        rounds.add(workload, name, run.rate * count, 1e6 * used / max(1, done))
    finally:
        stop_processes([p for p in (bare, h2) if p is not None], signal.SIGINT)
        shutil.rmtree(work, ignore_errors=True)
    print(machine(), "(after)")
    print(f"h2load, {args.rounds} alternating rounds of {args.duration}s per server and workload")
    print(rounds.render())


if __name__ == "__main__":
    main()
