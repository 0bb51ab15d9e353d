"""Differential: real Triton 2.51 and repokit serve the same python-backend repository; the same
gRPC requests (valid and malformed, unary and streamed) must get the same status codes,
messages and outputs. Run with ``-m triton``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from tests.frontends.grpc.serving import make_repository, running_server

pytestmark = pytest.mark.triton

TRITON = Path("/work/shared/tools/triton-reference.sh")


def _wait_ready(stub: pb_grpc.GRPCInferenceServiceStub, deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    raise RuntimeError("Triton did not become ready")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repository(tmp_path_factory.mktemp("grpc-diff"), with_types_model=False)


@pytest.fixture(scope="module")
def triton(repo: Path) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    ports = random.sample(range(20000, 60000), 3)
    out = subprocess.run(
        [str(TRITON), str(repo), *map(str, ports)], capture_output=True, text=True, check=True
    )
    pid = int(out.stdout.strip().splitlines()[-1])
    channel = grpc.insecure_channel(f"127.0.0.1:{ports[1]}")
    try:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        _wait_ready(stub)
        yield stub
    finally:
        channel.close()
        os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def ours(repo: Path) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with running_server(repo) as handle:
        channel = grpc.insecure_channel(f"127.0.0.1:{handle.grpc_port}")
        try:
            yield pb_grpc.GRPCInferenceServiceStub(channel)
        finally:
            channel.close()


A = np.arange(16, dtype=np.float32).reshape(1, 16)


def _add_sub(**kw: object) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="add_sub", **kw)  # type: ignore[arg-type]
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    msg.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    return msg


def _raw(msg: pb.ModelInferRequest, *chunks: bytes) -> pb.ModelInferRequest:
    msg.raw_input_contents.extend(chunks or (A.tobytes(), A.tobytes()))
    return msg


def _cases() -> dict[str, pb.ModelInferRequest]:
    cases: dict[str, pb.ModelInferRequest] = {}
    cases["valid"] = _raw(_add_sub(id="v1"))
    cases["extra raw contents"] = _raw(_add_sub(), A.tobytes(), A.tobytes(), A.tobytes())
    cases["wrong raw size"] = _raw(_add_sub(), A.tobytes()[:60], A.tobytes())
    cases["wrong raw size with id"] = _raw(_add_sub(id="q"), A.tobytes()[:60], A.tobytes())
    m = _raw(_add_sub(), A.tobytes())
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["contents and raw together"] = m
    m = _add_sub()
    m.inputs[0].contents.int_contents.extend(range(16))
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["wrong typed field"] = m
    m = _add_sub()
    m.inputs[0].contents.fp32_contents.extend(A.ravel().tolist())
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["typed contents"] = m
    m = _add_sub()
    m.inputs[0].contents.fp32_contents.extend(A.ravel().tolist())
    m.inputs[0].contents.fp64_contents.extend(A.ravel().tolist())
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["two typed fields"] = m
    cases["missing data"] = _raw(_add_sub(), A.tobytes())
    m = _raw(_add_sub())
    m.inputs[0].datatype = "FP64"
    cases["wrong datatype"] = m
    m = _raw(_add_sub())
    m.inputs[0].shape[:] = [1, 8, 2]
    cases["wrong shape"] = m
    for name, key, param in [
        ("sequence_id bool", "sequence_id", pb.InferParameter(bool_param=True)),
        ("negative priority", "priority", pb.InferParameter(int64_param=-1)),
        ("timeout string", "timeout", pb.InferParameter(string_param="1")),
        ("triton_ reserved", "triton_x", pb.InferParameter(bool_param=True)),
        ("custom uint64", "mine", pb.InferParameter(uint64_param=1)),
        ("custom double", "mine", pb.InferParameter(double_param=0.5)),
    ]:
        m = _raw(_add_sub())
        m.parameters[key].CopyFrom(param)
        cases[name] = m
    m = _raw(_add_sub())
    m.model_name = "nope"
    cases["unknown model"] = m
    for version in ("7", "abc", "-1", "1.0"):
        m = _raw(_add_sub())
        m.model_version = version
        cases[f"version {version}"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 3
    cases["classification"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 0
    cases["classification zero"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="NOPE")
    cases["unknown output"] = m
    return cases


CASES = _cases()


def _outcome(
    stub: pb_grpc.GRPCInferenceServiceStub, msg: pb.ModelInferRequest
) -> tuple[object, ...]:
    try:
        reply = stub.ModelInfer(msg, timeout=30)
    except grpc.RpcError as error:
        return ("error", error.code(), error.details())
    outputs = [(o.name, o.datatype, list(o.shape)) for o in reply.outputs]
    return ("ok", reply.id, reply.model_name, reply.model_version, outputs,
            list(reply.raw_output_contents))  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_unary_infer_matches_triton(
    case: str, triton: pb_grpc.GRPCInferenceServiceStub, ours: pb_grpc.GRPCInferenceServiceStub
) -> None:
    assert _outcome(ours, CASES[case]) == _outcome(triton, CASES[case])


def _stream(stub: pb_grpc.GRPCInferenceServiceStub) -> list[tuple[object, ...]]:
    requests = [
        _raw(_add_sub(id="g1")),
        CASES["unknown model"],
        _raw(_add_sub(id="b2"), A.tobytes()[:60], A.tobytes()),
        _raw(_add_sub(id="g2")),
    ]
    bad_param = _raw(_add_sub(id="b3"))
    bad_param.parameters["sequence_start"].int64_param = 1
    requests.insert(3, bad_param)
    replies = []
    for reply in stub.ModelStreamInfer(iter(requests), timeout=60):
        r = reply.infer_response
        params = {k: v.WhichOneof("parameter_choice") for k, v in r.parameters.items()}
        replies.append((r.id, reply.error_message, r.model_name, r.model_version, params,
                        list(r.raw_output_contents)))  # fmt: skip
    return sorted(replies, key=lambda t: str(t[0]) + str(t[1]))


def test_stream_with_bad_requests_matches_triton(
    triton: pb_grpc.GRPCInferenceServiceStub, ours: pb_grpc.GRPCInferenceServiceStub
) -> None:
    assert _stream(ours) == _stream(triton)


@pytest.mark.parametrize(
    "call",
    [
        ("ModelReady", pb.ModelReadyRequest(name="nope")),
        ("ModelReady", pb.ModelReadyRequest(name="add_sub", version="3")),
        ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub")),
        ("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
        ("ModelConfig", pb.ModelConfigRequest(name="nope")),
        ("RepositoryIndex", pb.RepositoryIndexRequest(repository_name="x")),
        ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="add_sub")),
        ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(name="x")),
        ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="x")),
    ],
    ids=lambda c: f"{c[0]}({str(c[1]).strip() or '-'})".replace("\n", " "),
)
def test_other_rpcs_match_triton(
    call: tuple[str, object],
    triton: pb_grpc.GRPCInferenceServiceStub,
    ours: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    method, request = call

    def outcome(stub: pb_grpc.GRPCInferenceServiceStub) -> tuple[object, ...]:
        try:
            return ("ok", str(getattr(stub, method)(request, timeout=30)))
        except grpc.RpcError as error:
            return ("error", error.code(), error.details())

    assert outcome(ours) == outcome(triton)
