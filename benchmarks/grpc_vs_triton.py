"""Unary ModelInfer throughput: real Triton 2.51 vs repokit vs a bare grpc.aio servicer.

Run by hand:  .venv/bin/python benchmarks/grpc_vs_triton.py [--requests 20000] [--concurrency 8]

A neutral load generator (h2load, Debian package nghttp2-client) posts one length-prefixed
serialized ModelInferRequest for ``add_sub`` (raw_input_contents, batch 1 x 16 FP32) with the
headers ``content-type: application/grpc`` and ``te: trailers``, at the given concurrency
(separate HTTP/2 connections), against each server in turn in one run. The bare servicer does the
same work (decode raw bytes, add/sub with numpy, build the response) with no model machinery,
on uvloop as ``repokit serve`` runs: it is the ceiling of the grpc.aio stack. Prints
requests/s and ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from _common import (
    ROOT,
    copy_models,
    free_port,
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
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

async def main():
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handlers = {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(Bare().ModelInfer,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString),
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


def request_message() -> pb.ModelInferRequest:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    msg = pb.ModelInferRequest(model_name="add_sub", raw_input_contents=[a.tobytes(), a.tobytes()])
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    msg.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    return msg


def grpc_frame(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def wait_and_check(port: int, deadline_s: float = 180.0) -> None:
    """Wait until ready, then check one real ModelInfer succeeds (h2load only sees HTTP 200)."""
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
        reply = stub.ModelInfer(request_message(), timeout=30)
        out = np.frombuffer(reply.raw_output_contents[0], dtype=np.float32)
        assert np.array_equal(out, 2 * np.arange(16, dtype=np.float32)), "wrong add_sub output"


def h2load(port: int, body_file: Path, requests: int, concurrency: int) -> float:
    run = run_h2load(port, body_file, concurrency, "-n", str(requests))
    if run.succeeded != requests:
        raise RuntimeError(f"h2load did not succeed:\n{run.output}")
    return run.rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    require_tools("h2load", install="nghttp2-client")
    work = Path(tempfile.mkdtemp(prefix="grpc-bench-"))
    repo = copy_models(work / "models", ("add_sub",))
    body = work / "request.bin"
    body.write_bytes(grpc_frame(request_message().SerializeToString()))
    bare_port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(bare_port)], env=env)
    try:
        with triton(repo, work) as reference, running_repokit(repo) as (_, ports):
            targets = {
                "triton": reference.grpc_port,
                "repokit": ports["grpc"],
                "bare grpc.aio": bare_port,
            }
            for port in targets.values():
                wait_and_check(port)
            rates: dict[str, float] = {}
            for name, port in targets.items():
                h2load(port, body, min(2000, args.requests), args.concurrency)  # warm-up
                rates[name] = h2load(port, body, args.requests, args.concurrency)
    finally:
        stop_processes([bare], signal.SIGINT)
        shutil.rmtree(work, ignore_errors=True)
    print(f"unary ModelInfer add_sub 1x16 FP32 raw, concurrency {args.concurrency}, "
          f"{args.requests} requests each (h2load)")  # fmt: skip
    for name, rate in rates.items():
        print(f"  {name:14s} {rate:10.1f} req/s")
    print(f"  repokit / triton        = {rates['repokit'] / rates['triton']:.2f}x")
    print(f"  repokit / bare grpc.aio = {rates['repokit'] / rates['bare grpc.aio']:.2f}x")
    print(f"  bare grpc.aio / triton  = {rates['bare grpc.aio'] / rates['triton']:.2f}x")


if __name__ == "__main__":
    main()
