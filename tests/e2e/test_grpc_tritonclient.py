"""tritonclient.grpc (sync, asyncio and streaming) against a real repokit server on port 0:
every RPC and every tensor encoding (raw, typed contents, BYTES, BOOL, FP16, INT8,
classification, system shared memory), statistics, repository control, log settings and
grpc.health.v1 -- with tritonclient's own generated protobuf modules in the same process."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from repokit.paths import default_sample_repository
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from repokit.protocol.generated import health_pb2 as health_pb
from repokit.protocol.generated import health_pb2_grpc as health_grpc
from tests.frontends.grpc.serving import make_repository, running_server


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repo = make_repository(tmp_path_factory.mktemp("grpc-e2e"))
    with running_server(repo, allow_client_shm=True) as handle:
        yield f"127.0.0.1:{handle.grpc_port}"


@pytest.fixture
def client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(url)
    yield c
    c.close()


def _add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = [
        grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
        grpcclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def test_tritonclient_and_generated_modules_coexist() -> None:
    from tritonclient.grpc import service_pb2 as theirs

    assert theirs.ModelInferRequest is not pb.ModelInferRequest
    assert (
        theirs.ModelInferRequest.DESCRIPTOR.full_name == pb.ModelInferRequest.DESCRIPTOR.full_name
    )


def test_health_and_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("add_sub")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "triton" and "classification" in meta["extensions"]
    model = client.get_model_metadata("add_sub", as_json=True)
    assert model["platform"] == "python"
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}
    config = client.get_model_config("add_sub", as_json=True)["config"]
    assert config["name"] == "add_sub" and config["max_batch_size"] == 8
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index
    # Triton 2.51 answers ready=false (status OK) for an unknown model or version over gRPC
    assert client.is_model_ready("nope") is False
    assert client.is_model_ready("add_sub", "3") is False


def test_infer_raw_and_statistics(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    result = client.infer("add_sub", _add_sub_inputs(a, b), request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "r-1" and response.model_version == "1"
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) >= 1
    assert stats["name"] == "add_sub"


def test_infer_errors(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros((1, 15), dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_sub", _add_sub_inputs(a, a))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT1' for model 'add_sub'" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.infer("missing", _add_sub_inputs(a, a))
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert info.value.message() == "Request for unknown model: 'missing' is not found"


def test_bytes_bool_fp16_int8(client: grpcclient.InferenceServerClient) -> None:
    values = {
        "B": np.array([b"a", b"", "\u00e9".encode()], dtype=object),
        "Z": np.array([True, False, True]),
        "H": np.array([1.5, -0.25], dtype=np.float16),
        "I": np.array([-128, 5, 127], dtype=np.int8),
    }
    datatypes = {"B": "BYTES", "Z": "BOOL", "H": "FP16", "I": "INT8"}
    inputs = []
    for name, arr in values.items():
        tensor = grpcclient.InferInput(name, list(arr.shape), datatypes[name])
        tensor.set_data_from_numpy(arr)
        inputs.append(tensor)
    result = client.infer("types", inputs)
    assert list(result.as_numpy("B_OUT")) == list(values["B"])
    for name in ("Z", "H", "I"):
        out = result.as_numpy(f"{name}_OUT")
        assert out.dtype == values[name].dtype
        np.testing.assert_array_equal(out, values[name])


def test_classification(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    result = client.infer("add_sub", _add_sub_inputs(a, a), outputs=outputs)
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (1, 3)
    assert [s.decode() for s in top[0]] == ["30.000000:15", "28.000000:14", "26.000000:13"]


def test_typed_contents_with_a_raw_stub(url: str) -> None:
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        msg = pb.ModelInferRequest(model_name="types")
        msg.inputs.add(name="B", datatype="BYTES", shape=[2]).contents.bytes_contents.extend(
            [b"x", b"yz"]
        )
        msg.inputs.add(name="Z", datatype="BOOL", shape=[1]).contents.bool_contents.append(True)
        h = msg.inputs.add(name="H", datatype="FP16", shape=[1])
        msg.inputs.add(name="I", datatype="INT8", shape=[2]).contents.int_contents.extend([1, -2])
        # FP16 has no typed field: raw is not allowed together with contents, so this fails
        h.contents.fp32_contents.append(1.0)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(msg)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "of type 'FP32', expected datatype 'FP16'" in str(info.value.details())

        ident = pb.ModelInferRequest(model_name="identity")
        ident.inputs.add(name="INPUT0", datatype="FP32", shape=[3]).contents.fp32_contents.extend(
            [1.0, 2.5, -3.0]
        )
        reply = stub.ModelInfer(ident)
        assert reply.outputs[0].name == "OUTPUT0" and not reply.outputs[0].HasField("contents")
        out = np.frombuffer(reply.raw_output_contents[0], dtype=np.float32)
        np.testing.assert_array_equal(out, [1.0, 2.5, -3.0])

        health = health_grpc.HealthStub(channel).Check(health_pb.HealthCheckRequest())
        assert health.status == health_pb.HealthCheckResponse.SERVING


def test_system_shared_memory(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    size = a.nbytes
    key = f"/repokit_grpc_e2e_{id(client)}"
    region = shm.create_shared_memory_region("grpc_in", key, size * 4)
    try:
        shm.set_shared_memory_region(region, [a, a])
        client.register_system_shared_memory("grpc_in", key, size * 4)
        status = client.get_system_shared_memory_status(as_json=True)
        assert "grpc_in" in status["regions"]
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
            grpcclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_shared_memory("grpc_in", size, 0)
        inputs[1].set_shared_memory("grpc_in", size, size)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("grpc_in", size, size * 2)
        result = client.infer("add_sub", inputs, outputs=[out])
        # As Triton 2.51: the shm output is listed with an empty raw_output_contents entry
        # (so tritonclient's as_numpy cannot reshape it); the data went to shared memory.
        response = result.get_response()
        assert [o.name for o in response.outputs] == ["OUTPUT0"]
        assert list(response.outputs[0].shape) == [1, 16]
        assert list(response.raw_output_contents) == [b""]
        written = shm.get_contents_as_numpy(region, np.float32, [1, 16], offset=size * 2)
        np.testing.assert_array_equal(written, a + a)
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)
    assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}


def test_log_settings(client: grpcclient.InferenceServerClient) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert "log_verbose_level" in settings
    updated = client.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
    assert updated["log_verbose_level"]["uint32_param"] == 1
    client.update_log_settings({"log_verbose_level": 0})


def test_streaming(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    a = np.ones((1, 16), dtype=np.float32)
    try:
        client.async_stream_infer("add_sub", _add_sub_inputs(a, a), request_id="s1")
        client.async_stream_infer("missing", _add_sub_inputs(a, a), request_id="s2")
        client.async_stream_infer("add_sub", _add_sub_inputs(a, 2 * a), request_id="s3")
        got = {}
        for _ in range(3):
            result, error = results.get(timeout=30)
            if error is not None:
                got["error"] = str(error)
            else:
                response = result.get_response()
                assert response.parameters["triton_final_response"].bool_param
                got[response.id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    np.testing.assert_array_equal(got["s1"], 2 * a)
    np.testing.assert_array_equal(got["s3"], 3 * a)
    assert "Request for unknown model: 'missing' is not found" in got["error"]


def test_stream_sequence_in_order(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i, value in enumerate([1, 2, 3, 4]):
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            client.async_stream_infer(
                "accumulate",
                [tensor],
                request_id=str(i),
                sequence_id=4242,
                sequence_start=i == 0,
                sequence_end=i == 3,
            )
        sums = {}
        for _ in range(4):
            result, error = results.get(timeout=30)
            assert error is None, error
            sums[result.get_response().id] = int(result.as_numpy("OUTPUT")[0][0])
    finally:
        client.stop_stream()
    assert sums == {"0": 1, "1": 3, "2": 6, "3": 10}


async def test_asyncio_client(url: str) -> None:
    async with aioclient.InferenceServerClient(url) as client:
        assert await client.is_server_ready()
        a = np.full((1, 16), 2.0, dtype=np.float32)
        inputs = [
            aioclient.InferInput("INPUT0", [1, 16], "FP32"),
            aioclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        result = await client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), np.float32))

        async def requests() -> Any:
            for i in range(3):
                yield {"model_name": "add_sub", "inputs": inputs, "request_id": f"a{i}"}

        ids = []
        async for result, error in client.stream_infer(requests()):
            assert error is None
            ids.append(result.get_response().id)
        assert sorted(ids) == ["a0", "a1", "a2"]


def test_repository_load_unload_explicit(tmp_path: Path) -> None:
    repo = make_repository(tmp_path, with_types_model=False)
    with running_server(repo, model_control_mode="explicit") as handle:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{handle.grpc_port}")
        try:
            assert not _ready(client, "identity")
            client.load_model("identity")
            assert client.is_model_ready("identity")
            client.unload_model("identity")
            index = client.get_model_repository_index(as_json=True)["models"]
            entry = next(m for m in index if m["name"] == "identity")
            assert entry["state"] == "UNAVAILABLE"
            with pytest.raises(InferenceServerException) as info:
                client.load_model("does_not_exist")
            # Triton 2.51 answers INTERNAL here (HTTP 500), with this message
            assert info.value.status() == "StatusCode.INTERNAL"
            assert info.value.message() == (
                "failed to load 'does_not_exist', failed to poll from model repository"
            )
        finally:
            client.close()


def test_model_control_as_tritons_grpc_example_runs_it(tmp_path: Path) -> None:
    """The steps of Triton's simple_grpc_model_control.py on an ONNX 'simple': load, a
    malformed override, an override that only sets max_batch_size (the rest completed from
    the model file), unload, a file parameter too long for the file system, a wrong name."""
    repo = tmp_path / "models"
    source = default_sample_repository() / "add_sub_onnx"
    shutil.copytree(source, repo / "simple")
    config = repo / "simple" / "config.pbtxt"
    config.write_text(config.read_text().replace('"add_sub_onnx"', '"simple"'))
    with running_server(repo, model_control_mode="explicit") as handle:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{handle.grpc_port}")
        try:
            client.load_model("simple")
            assert client.is_model_ready("simple")
            with pytest.raises(InferenceServerException, match="failed to load"):
                client.load_model("simple", config='"parameters": {"config": {{"a": "1"}}}')
            client.load_model("simple", config='{"max_batch_size":"16"}')
            assert client.get_model_config("simple").config.max_batch_size == 16
            client.unload_model("simple")
            assert not client.is_model_ready("simple")
            with pytest.raises(InferenceServerException) as info:
                client.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
            assert info.value.status() == "StatusCode.INTERNAL"
            assert "failed to poll from model repository" in info.value.message()
            assert client.is_server_live()
            with pytest.raises(InferenceServerException, match="failed to load"):
                client.load_model("wrong_model_name")
        finally:
            client.close()


def _ready(client: grpcclient.InferenceServerClient, name: str) -> bool:
    try:
        return bool(client.is_model_ready(name))
    except InferenceServerException:  # an unloaded model may be unknown: NOT_FOUND
        return False


def _types_request(**tensors: tuple[str, list[int], bytes]) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="types", id="t")
    for name, (datatype, shape, raw) in tensors.items():
        msg.inputs.add(name=name, datatype=datatype, shape=shape)
        msg.raw_input_contents.append(raw)
    return msg


def _valid_types(**override: tuple[str, list[int], bytes]) -> pb.ModelInferRequest:
    tensors = {
        "B": ("BYTES", [1], b"\x01\0\0\0a"),
        "Z": ("BOOL", [1], b"\x01"),
        "H": ("FP16", [1], np.float16(1).tobytes()),
        "I": ("INT8", [1], b"\x05"),
    }
    return _types_request(**{**tensors, **override})


def _malformed() -> list[tuple[str, pb.ModelInferRequest, grpc.StatusCode, str]]:
    """Requests the real core rejects, with the status and words of Triton 2.51 (checked by
    tests/differential/test_grpc_vs_triton.py)."""
    dup = _valid_types()
    dup.inputs.add(name="Z", datatype="BOOL", shape=[1])
    dup.raw_input_contents.append(b"\x01")
    typed = _valid_types()
    del typed.raw_input_contents[:]
    for tensor in typed.inputs:
        tensor.contents.SetInParent()
    typed.inputs[0].contents.bytes_contents.extend([b"a", b"b"])
    typed.inputs[1].contents.bool_contents.append(True)
    typed.inputs[2].datatype = "INT8"  # FP16 has no typed field: declare something else
    typed.inputs[2].contents.int_contents.append(1)
    typed.inputs[3].contents.int_contents.append(1)
    a = np.zeros((1, 16), np.float32).tobytes()
    small = pb.ModelInferRequest(model_name="add_sub", raw_input_contents=[a, a])
    small.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    small.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    out = small.outputs.add(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = "grpc_small"
    out.parameters["shared_memory_byte_size"].int64_param = 32
    return [
        ("duplicate input", dup, grpc.StatusCode.INVALID_ARGUMENT,
         "[request id: t] input 'Z' already exists in request"),
        ("string data past the end", _valid_types(B=("BYTES", [1], b"\x0a\0\0\0abc")),
         grpc.StatusCode.INVALID_ARGUMENT,
         "incomplete string data for inference input 'B', expecting string of length 10 but "
         "only 3 bytes available"),
        ("truncated length indicator", _valid_types(B=("BYTES", [1], b"\x01\0")),
         grpc.StatusCode.INVALID_ARGUMENT,
         "[request id: t] incomplete string length indicator for inference input 'B' for model "
         "'types', expecting 4 bytes but only 2 bytes available. Please make sure the string "
         "length indicator is in one buffer."),
        # B has a string too many and H the wrong datatype: Triton checks H first (the order
        # of its input map, repokit.core.triton_input_order)
        ("too many typed strings", typed, grpc.StatusCode.INVALID_ARGUMENT,
         "[request id: t] inference input 'H' data-type is 'INT8', but model 'types' expects "
         "'FP16'"),
        ("unknown datatype", _valid_types(I=("int8", [1], b"\x05")),
         grpc.StatusCode.INVALID_ARGUMENT,
         "[request id: t] inference input 'I' data-type is '<invalid>', but model 'types' "
         "expects 'INT8'"),
        ("shm output too small", small, grpc.StatusCode.INTERNAL,
         "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should "
         "be at least 64 bytes to hold the results"),
    ]  # fmt: skip


MALFORMED = _malformed()


@pytest.mark.parametrize(
    ("case", "msg", "code", "message"), MALFORMED, ids=[c[0] for c in MALFORMED]
)
def test_malformed_requests_get_tritons_status_and_message(
    url: str, case: str, msg: pb.ModelInferRequest, code: grpc.StatusCode, message: str
) -> None:
    key = f"/repokit_grpc_small_{id(msg)}"
    region = shm.create_shared_memory_region("grpc_small", key, 64)
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        stub.SystemSharedMemoryRegister(
            pb.SystemSharedMemoryRegisterRequest(name="grpc_small", key=key, byte_size=64)
        )
        try:
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(msg, timeout=30)
            assert (info.value.code(), info.value.details()) == (code, message)
        finally:
            stub.SystemSharedMemoryUnregister(
                pb.SystemSharedMemoryUnregisterRequest(name="grpc_small")
            )
            shm.destroy_shared_memory_region(region)
