"""tritonclient.http against a real repokit server (port 0): every endpoint, every encoding."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

PASSTHROUGH_CONFIG = """
name: "passthrough"
backend: "python"
max_batch_size: 0
input [
  { name: "IN_BOOL" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "IN_BYTES" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "IN_FP16" data_type: TYPE_FP16 dims: [ -1 ] }
]
output [
  { name: "OUT_BOOL" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "OUT_BYTES" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "OUT_FP16" data_type: TYPE_FP16 dims: [ -1 ] }
]
"""

PASSTHROUGH_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            tensors = []
            for kind in ("BOOL", "BYTES", "FP16"):
                value = pb_utils.get_input_tensor_by_name(request, "IN_" + kind).as_numpy()
                tensors.append(pb_utils.Tensor("OUT_" + kind, value))
            out.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return out
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("repo"))
    (repo / "passthrough" / "1").mkdir(parents=True)
    (repo / "passthrough" / "config.pbtxt").write_text(PASSTHROUGH_CONFIG)
    (repo / "passthrough" / "1" / "model.py").write_text(PASSTHROUGH_MODEL)
    with running_server(
        repo, model_control_mode="explicit", load_models=["*"], allow_client_shm=True
    ) as srv:
        yield srv


@pytest.fixture
def client(server: ServerThread) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def _add_sub_inputs(binary: bool) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    i0.set_data_from_numpy(a, binary_data=binary)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "FP32")
    i1.set_data_from_numpy(b, binary_data=binary)
    return [i0, i1], a, b


def test_health_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "triton" and "binary_tensor_data" in meta["extensions"]
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    model = client.get_model_metadata("add_sub")
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    config = client.get_model_config("add_sub")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [16]
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("nope")


def test_json_infer(client: httpclient.InferenceServerClient) -> None:
    inputs, a, b = _add_sub_inputs(binary=False)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = client.infer("add_sub", inputs, outputs=outputs, request_id="42")
    response = result.get_response()
    assert response["id"] == "42" and response["model_version"] == "1"
    assert "data" in response["outputs"][0]
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)


def test_binary_infer_default_outputs(client: httpclient.InferenceServerClient) -> None:
    inputs, a, b = _add_sub_inputs(binary=True)
    result = client.infer("add_sub", inputs)  # tritonclient sends binary_data_output: true
    response = result.get_response()
    assert "id" not in response
    assert all("binary_data_size" in o["parameters"] for o in response["outputs"])
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)


def test_bytes_bool_fp16(client: httpclient.InferenceServerClient) -> None:
    values = {
        "BOOL": np.array([True, False, True]),
        "BYTES": np.array([b"a", b"", b"\xff\x00binary"], dtype=object),
        "FP16": np.array([1.5, -2.0, 65504.0], dtype=np.float16),
    }
    inputs = []
    for kind, value in values.items():
        tensor = httpclient.InferInput(f"IN_{kind}", [3], kind)
        tensor.set_data_from_numpy(value, binary_data=True)
        inputs.append(tensor)
    result = client.infer("passthrough", inputs)
    for kind, value in values.items():
        assert np.array_equal(result.as_numpy(f"OUT_{kind}"), value)
    # BOOL and BYTES as JSON (FP16 can only travel in binary)
    in_bool = httpclient.InferInput("IN_BOOL", [3], "BOOL")
    in_bool.set_data_from_numpy(values["BOOL"], binary_data=False)
    in_bytes = httpclient.InferInput("IN_BYTES", [2], "BYTES")
    in_bytes.set_data_from_numpy(np.array([b"x", b"yz"], dtype=object), binary_data=False)
    in_fp16 = httpclient.InferInput("IN_FP16", [3], "FP16")
    in_fp16.set_data_from_numpy(values["FP16"], binary_data=True)
    json_inputs = [in_bool, in_bytes, in_fp16]
    outputs = [
        httpclient.InferRequestedOutput("OUT_BOOL", binary_data=False),
        httpclient.InferRequestedOutput("OUT_BYTES", binary_data=False),
        httpclient.InferRequestedOutput("OUT_FP16", binary_data=True),
    ]
    result = client.infer("passthrough", json_inputs, outputs=outputs)
    assert result.as_numpy("OUT_BOOL").tolist() == [True, False, True]
    assert result.as_numpy("OUT_BYTES").tolist() == ["x", "yz"]  # JSON strings come back as str
    with pytest.raises(InferenceServerException, match="sending FP16 data via JSON"):
        client.infer(
            "passthrough",
            inputs,
            outputs=[httpclient.InferRequestedOutput("OUT_FP16", binary_data=False)],
        )


def test_classification(client: httpclient.InferenceServerClient) -> None:
    inputs, _a, _b = _add_sub_inputs(binary=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=3)]
    result = client.infer("add_sub", inputs, outputs=outputs)
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "BYTES" and out["shape"] == [1, 3]
    assert result.as_numpy("OUTPUT0").tolist() == [["15.500000:15", "14.500000:14", "13.500000:13"]]


def test_raw_binary_request(server: ServerThread) -> None:
    payload = np.arange(6, dtype=np.float32)
    response = requests.post(
        f"http://{server.http_url}/v2/models/identity/infer",
        data=payload.tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/octet-stream"
    length = int(response.headers["Inference-Header-Content-Length"])
    header = json.loads(response.content[:length])
    assert header["outputs"][0]["shape"] == [6]
    assert np.array_equal(np.frombuffer(response.content[length:], dtype=np.float32), payload)


def test_compression_both_ways(client: httpclient.InferenceServerClient) -> None:
    for algorithm in ("gzip", "deflate"):
        inputs, a, b = _add_sub_inputs(binary=True)
        result = client.infer(
            "add_sub",
            inputs,
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)


def test_unsupported_compression_is_501(server: ServerThread) -> None:
    response = requests.post(
        f"http://{server.http_url}/v2/models/add_sub/infer",
        data=gzip.compress(b"{}"),
        headers={"Content-Encoding": "br"},
        timeout=30,
    )
    assert response.status_code == 501
    assert response.json() == {"error": "Unsupported compression type"}
    assert response.headers["Accept-Encoding"] == "gzip, deflate"


def test_system_shared_memory(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    key_in, key_out = "/repokit_http_in", "/repokit_http_out"
    handle_in = shm.create_shared_memory_region("in", key_in, 128)
    handle_out = shm.create_shared_memory_region("out", key_out, 128)
    try:
        shm.set_shared_memory_region(handle_in, [a, b])
        client.register_system_shared_memory("in", key_in, 128)
        client.register_system_shared_memory("out", key_out, 128)
        status = client.get_system_shared_memory_status()
        assert {r["name"] for r in status} == {"in", "out"}
        i0 = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        i0.set_shared_memory("in", 64, offset=0)
        i1 = httpclient.InferInput("INPUT1", [1, 16], "FP32")
        i1.set_shared_memory("in", 64, offset=64)
        o0 = httpclient.InferRequestedOutput("OUTPUT0")
        o0.set_shared_memory("out", 64, offset=0)
        result = client.infer("add_sub", [i0, i1], outputs=[o0])
        out = result.get_output("OUTPUT0")
        assert out is not None and "data" not in out
        got = shm.get_contents_as_numpy(handle_out, np.float32, [1, 16])
        np.testing.assert_allclose(got, a + b)
        with pytest.raises(InferenceServerException, match="Unable to find"):
            client.get_system_shared_memory_status("nope")
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle_in)
        shm.destroy_shared_memory_region(handle_out)
    assert client.get_system_shared_memory_status() == []


def test_statistics_index_load_unload(client: httpclient.InferenceServerClient) -> None:
    inputs, _a, _b = _add_sub_inputs(binary=True)
    client.infer("add_sub", inputs)
    stats = client.get_inference_statistics("add_sub")
    assert stats["model_stats"][0]["name"] == "add_sub"
    assert int(stats["model_stats"][0]["inference_stats"]["success"]["count"]) >= 1
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["identity"]["state"] == "READY"
    client.unload_model("identity")
    assert not client.is_model_ready("identity")
    assert client.is_server_ready()  # unloaded models do not count against readiness
    client.load_model("identity")
    assert client.is_model_ready("identity")


def test_logging_and_cuda_shm(client: httpclient.InferenceServerClient) -> None:
    settings = client.update_log_settings({"log_verbose_level": 1})
    assert settings["log_verbose_level"] == 1
    assert client.get_log_settings()["log_verbose_level"] == 1
    client.update_log_settings({"log_verbose_level": 0})
    assert client.get_cuda_shared_memory_status() == []


def test_errors_are_json(server: ServerThread) -> None:
    base = f"http://{server.http_url}"
    response = requests.get(f"{base}/v2/models/add_sub/infer", timeout=30)
    assert (response.status_code, response.json()) == (405, {"error": "Method Not Allowed"})
    response = requests.get(f"{base}/v2/models", timeout=30)
    assert (response.status_code, response.json()) == (404, {"error": "Not Found"})
    # Malformed JSON: Triton answers 500 (its JSON errors are INTERNAL); repokit answers 400 as
    # the KServe v2 spec asks for a malformed request.
    response = requests.post(f"{base}/v2/models/add_sub/infer", data=b"{nope", timeout=30)
    assert response.status_code == 400
    assert response.json()["error"].startswith("failed to parse the request JSON buffer")
    assert requests.get(f"{base}/v2/health/ready", timeout=30).status_code == 200


def test_metrics_port(server: ServerThread) -> None:
    assert server.handle is not None
    base = f"http://127.0.0.1:{server.handle.metrics_port}"
    response = requests.get(f"{base}/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert "nv_inference_request_success" in response.text
    assert requests.post(f"{base}/metrics", timeout=30).status_code == 405
    other = requests.get(f"{base}/elsewhere", timeout=30)
    assert (other.status_code, other.content) == (200, b"")


async def test_async_client(server: ServerThread) -> None:
    client = aiohttpclient.InferenceServerClient(server.http_url)
    try:
        assert await client.is_server_ready()
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        i0 = aiohttpclient.InferInput("INPUT0", [1, 16], "FP32")
        i0.set_data_from_numpy(a)
        i1 = aiohttpclient.InferInput("INPUT1", [1, 16], "FP32")
        i1.set_data_from_numpy(a)
        result = await client.infer("add_sub", [i0, i1])
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 2 * a)
    finally:
        await client.close()


def test_restricted_api_and_disabled_shm(tmp_path: Path) -> None:
    with running_server(tmp_path, http_restricted_api=["health,shared-memory:x-key=s3cret"]) as srv:
        base = f"http://{srv.http_url}"
        denied = requests.get(f"{base}/v2/health/live", timeout=30)
        assert (denied.status_code, denied.json()) == (
            403,
            {"error": "This API is restricted, expecting header 'x-key'"},
        )
        allowed = requests.get(f"{base}/v2/health/live", headers={"x-key": "s3cret"}, timeout=30)
        assert allowed.status_code == 200 and allowed.content == b""
        assert requests.get(f"{base}/v2", timeout=30).status_code == 200
        shm_response = requests.post(
            f"{base}/v2/systemsharedmemory/region/r/register",
            json={"key": "/k", "byte_size": 8},
            headers={"x-key": "s3cret"},
            timeout=30,
        )
        assert shm_response.status_code == 501
        assert "--allow-client-shm=true" in shm_response.json()["error"]


def test_large_binary_output_is_written_in_parts(server: ServerThread) -> None:
    """Outputs of 64 KiB and more go out as the JSON header then the tensor bytes (not joined):
    the framing must be exactly the joined one's."""
    payload = np.random.default_rng(7).random(300_000).astype(np.float32)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [payload.size],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": payload.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    with requests.Session() as session:
        for _ in range(3):  # the keep-alive connection stays usable after a streamed body
            response = session.post(
                f"http://{server.http_url}/v2/models/identity/infer",
                data=head + payload.tobytes(),
                headers={
                    "Inference-Header-Content-Length": str(len(head)),
                    "Accept-Encoding": "identity",  # requests asks for gzip by default
                },
                timeout=30,
            )
            assert response.status_code == 200
            assert "Content-Encoding" not in response.headers
            assert response.headers["Content-Type"] == "application/octet-stream"
            length = int(response.headers["Inference-Header-Content-Length"])
            assert int(response.headers["Content-Length"]) == length + payload.nbytes
            header = json.loads(response.content[:length])
            assert header["outputs"][0]["parameters"] == {"binary_data_size": payload.nbytes}
            body = np.frombuffer(response.content[length:], dtype=np.float32)
            assert np.array_equal(body, payload)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", [payload.size], "FP32")
        tensor.set_data_from_numpy(payload, binary_data=True)
        for compression in (None, "gzip"):
            result = client.infer("identity", [tensor], response_compression_algorithm=compression)
            assert np.array_equal(result.as_numpy("OUTPUT0"), payload)
    finally:
        client.close()
