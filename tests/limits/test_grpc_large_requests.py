"""Large gRPC requests do not stay in the server's memory once answered.

The issue's reproduction: six 100 MiB ModelInfer requests to an unknown model took the server
from 112 to 2,104 MB for good (here: 110 -> 1,439 MB; after the fix 117 MB). Here four 64 MiB
requests, with and without errors.
"""

from __future__ import annotations

import shutil
import time

import grpc
import pytest

from repokit.frontends.heap import HeapTrimmer
from repokit.paths import default_sample_repository
from repokit.protocol.generated import grpc_service_pb2 as pb
from tests.limits.served import ServedProcess, served

MIB = 1 << 20


def _request(model: str, size: int) -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT0", "UINT8"
    tensor.shape.append(size)
    request.raw_input_contents.append(b"\x01" * size)
    return request.SerializeToString()


def _settled_rss(server: ServedProcess) -> float:
    """RSS once the server stopped giving memory back (the trim runs just after the answer)."""
    last = server.rss_mb()
    for _ in range(50):
        time.sleep(0.1)
        now = server.rss_mb()
        if abs(now - last) < 1:
            return now
        last = now
    return last


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    repo = tmp_path_factory.mktemp("grpc_large") / "repo"
    shutil.copytree(default_sample_repository() / "identity", repo / "identity")
    with served(repo) as running:
        yield running


@pytest.mark.skipif(not HeapTrimmer().available, reason="needs glibc's malloc_trim")
def test_rejected_large_requests_leave_no_memory_behind(server: ServedProcess) -> None:
    data = _request("nope", 64 * MIB)
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        before = server.rss_mb()
        for _ in range(4):
            with pytest.raises(grpc.RpcError) as info:
                call(data, timeout=120)
            assert info.value.code() is grpc.StatusCode.NOT_FOUND
            assert info.value.details() == "Request for unknown model: 'nope' is not found"
        after = _settled_rss(server)
    assert after - before < 64, f"RSS {before:.0f} -> {after:.0f} MB after 4 x 64 MiB rejected"


def test_answers_of_large_requests_are_unchanged(server: ServedProcess) -> None:
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    data = np.arange(8 * MIB, dtype=np.float32)  # 32 MiB
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("identity", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    with pytest.raises(Exception, match="unknown model"):
        client.infer("nope", [tensor])
