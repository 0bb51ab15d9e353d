"""The legacy v1 API end to end: a real repokit server (HTTP + gRPC on port 0), a small v1
client built from repokit's generated v1 protos (``tests/frontends/v1/client.py``), and
tritonclient for the v2 side of the comparisons.

Covered: health, status in every format, raw and classification outputs, batches, variable-size
and STRING inputs, sequences with correlation ids (also continued over v2), system shared
memory, model control, the repository index, v2 statistics counting v1 requests, the gRPC
service (every RPC, streaming) and every error path with its RequestStatus code.
"""

from __future__ import annotations

import struct
import textwrap
from collections.abc import Iterator
from multiprocessing import shared_memory
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format

from repokit.frontends.runner import ServerHandle
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.generated.v1 import grpc_service_pb2 as pb
from repokit.protocol.generated.v1 import request_status_pb2 as rs
from repokit.protocol.generated.v1 import server_status_pb2 as ss
from tests.frontends.grpc.serving import make_repository, running_server
from tests.frontends.v1.client import (
    ResponseHeader,
    V1GrpcClient,
    V1HttpClient,
    request_header,
)

LABELS = ["cat", "dog", "bird", "fish", "frog"]

CLASSIFIER_CONFIG = """
name: "classifier"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 5 ] } ]
output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 5 ] label_filename: "labels.txt" } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

CLASSIFIER_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "PROBS", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy())])
            for r in requests
        ]
"""

ADD_SUB_HEADER = (
    'input { name: "INPUT0" } input { name: "INPUT1" } '
    'output { name: "OUTPUT0" } output { name: "OUTPUT1" }'
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repo = make_repository(tmp_path_factory.mktemp("v1"))
    model = repo / "classifier"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(textwrap.dedent(CLASSIFIER_CONFIG))
    (model / "1" / "model.py").write_text(CLASSIFIER_MODEL)
    (model / "labels.txt").write_text("\n".join(LABELS) + "\n")
    with running_server(
        repo, http=True, allow_client_shm=True, model_control_mode="explicit", load_models=["*"]
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def http(server: ServerHandle) -> V1HttpClient:
    return V1HttpClient(f"http://127.0.0.1:{server.http_port}")


@pytest.fixture(scope="module")
def grpc_client(server: ServerHandle) -> Iterator[V1GrpcClient]:
    client = V1GrpcClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.close()


@pytest.fixture(scope="module")
def v2(server: ServerHandle) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def add_sub_inputs(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    return a, b


def f32(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(data, dtype=np.float32).reshape(shape)


# --- health, status, repository ------
def test_health_carries_nv_status_with_unique_request_ids(http: V1HttpClient) -> None:
    live, ready = http.health("live"), http.health("ready")
    assert live.http_status == 200 and ready.http_status == 200
    assert live.body == b""
    for reply in (live, ready):
        assert reply.status.code == rs.SUCCESS
        assert reply.status.server_id == "inference:0"
    assert ready.status.request_id > live.status.request_id > 0
    bad = http.health("sleepy")
    assert bad.http_status == 404 and bad.code == "NOT_FOUND"


def test_status_in_text_json_and_binary(http: V1HttpClient) -> None:
    text_reply = http.request("GET", "/api/status")
    assert text_reply.ok and text_reply.headers["Content-Type"].startswith("text/plain")
    from_text = text_format.Parse(text_reply.body.decode(), ss.ServerStatus())
    assert from_text.id == "inference:0"
    assert from_text.ready_state == ss.SERVER_READY
    assert {"add_sub", "classifier", "accumulate"} <= set(from_text.model_status)
    add_sub = from_text.model_status["add_sub"]
    assert add_sub.config.max_batch_size == 8
    assert add_sub.version_status[1].ready_state == ss.MODEL_READY

    for reply in (
        http.request("GET", "/api/status/add_sub", params={"format": "json"}),
        http.request("GET", "/api/status/add_sub", headers={"Accept": "application/json"}),
    ):
        assert reply.ok and reply.headers["Content-Type"] == "application/json"
        parsed = json_format.Parse(reply.body, ss.ServerStatus())
        assert list(parsed.model_status) == ["add_sub"]
        assert parsed.model_status["add_sub"].config.name == "add_sub"

    reply, binary = http.status("classifier")
    assert reply.ok and reply.headers["Content-Type"] == "application/octet-stream"
    assert list(binary.model_status) == ["classifier"]
    assert binary.model_status["classifier"].config.output[0].label_filename == "labels.txt"
    assert binary.uptime_ns > 0 and binary.status_stats.success.count >= 1


def test_status_errors(http: V1HttpClient) -> None:
    unknown, _ = http.status("no_such_model")
    assert unknown.http_status == 400 and unknown.code == "NOT_FOUND"
    assert "no_such_model" in unknown.status.msg
    bad_format = http.request("GET", "/api/status", params={"format": "yaml"})
    assert bad_format.http_status == 400 and bad_format.code == "INVALID_ARG"
    assert "yaml" in bad_format.status.msg
    wrong_method = http.request("POST", "/api/status")
    assert wrong_method.http_status == 405 and wrong_method.code == "UNSUPPORTED"
    unknown_api = http.request("GET", "/api/nothing")
    assert unknown_api.http_status == 404 and unknown_api.code == "NOT_FOUND"


def test_repository_index(http: V1HttpClient) -> None:
    reply = http.request("GET", "/api/repository/index", params={"format": "binary"})
    assert reply.ok
    index = ss.ModelRepositoryIndex.FromString(reply.body)
    names = [m.name for m in index.models]
    assert names == sorted(names)
    assert {"add_sub", "identity", "accumulate", "batcher", "types", "classifier"} == set(names)
    assert http.request("GET", "/api/repository/models").http_status == 404


# --- inference ------
def test_raw_outputs_for_a_batch_match_v2(
    http: V1HttpClient, v2: httpclient.InferenceServerClient
) -> None:
    a, b = add_sub_inputs(3)
    header = request_header(f"id: 42 batch_size: 3 {ADD_SUB_HEADER}")
    result = http.infer("add_sub", header, a.tobytes() + b.tobytes())
    assert result.reply.ok, result.reply.status
    assert result.reply.headers["Content-Type"] == "application/octet-stream"
    head = result.header
    assert (head.id, head.model_name, head.model_version, head.batch_size) == (
        42, "add_sub", 1, 3,
    )  # fmt: skip
    assert [o.name for o in head.output] == ["OUTPUT0", "OUTPUT1"]
    for out in head.output:
        assert list(out.raw.dims) == [16] and out.raw.batch_byte_size == 3 * 16 * 4
        assert out.data_type == mc.TYPE_FP32
    np.testing.assert_array_equal(f32(result.outputs["OUTPUT0"], (3, 16)), a + b)
    np.testing.assert_array_equal(f32(result.outputs["OUTPUT1"], (3, 16)), a - b)
    # the body ends with the text header, equal to NV-InferResponse
    assert text_format.Parse(result.trailer.decode(), ResponseHeader()) == head

    inputs = [httpclient.InferInput("INPUT0", [3, 16], "FP32"),
              httpclient.InferInput("INPUT1", [3, 16], "FP32")]  # fmt: skip
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    answer = v2.infer("add_sub", inputs)
    np.testing.assert_array_equal(
        answer.as_numpy("OUTPUT0"), f32(result.outputs["OUTPUT0"], (3, 16))
    )
    np.testing.assert_array_equal(
        answer.as_numpy("OUTPUT1"), f32(result.outputs["OUTPUT1"], (3, 16))
    )


def test_binary_trailer_explicit_version_and_all_outputs_by_default(http: V1HttpClient) -> None:
    a, b = add_sub_inputs(1, seed=3)
    header = 'batch_size: 1 input { name: "INPUT0" } input { name: "INPUT1" }'
    result = http.infer("add_sub", header, a.tobytes() + b.tobytes(), version="1", fmt="binary")
    assert result.reply.ok, result.reply.status
    assert [o.name for o in result.header.output] == ["OUTPUT0", "OUTPUT1"]
    assert ResponseHeader.FromString(result.trailer) == result.header
    latest = http.infer("add_sub", header, a.tobytes() + b.tobytes(), version="-1")
    assert latest.reply.ok and latest.outputs == result.outputs


def test_classification_gives_structured_classes_with_labels(http: V1HttpClient) -> None:
    probs = np.array([[0.1, 0.5, 0.05, 0.3, 0.05], [0.7, 0.0, 0.2, 0.04, 0.06]], dtype=np.float32)
    header = 'batch_size: 2 input { name: "INPUT" } output { name: "PROBS" cls { count: 3 } }'
    result = http.infer("classifier", header, probs.tobytes())
    assert result.reply.ok, result.reply.status
    (out,) = result.header.output
    assert not out.HasField("raw") and result.outputs == {}
    assert len(out.batch_classes) == 2
    got = [[(c.idx, round(c.value, 6), c.label) for c in b.cls] for b in out.batch_classes]
    assert got == [
        [(1, 0.5, "dog"), (3, 0.3, "fish"), (0, 0.1, "cat")],
        [(0, 0.7, "cat"), (2, 0.2, "bird"), (4, 0.06, "frog")],
    ]
    # k larger than the output: every class, still sorted
    wide = http.infer("classifier", header.replace("count: 3", "count: 9"), probs.tobytes())
    assert [len(b.cls) for b in wide.header.output[0].batch_classes] == [5, 5]


def test_classification_next_to_raw_output(http: V1HttpClient) -> None:
    a, b = add_sub_inputs(1, seed=5)
    header = (
        'batch_size: 1 input { name: "INPUT0" } input { name: "INPUT1" } '
        'output { name: "OUTPUT0" cls { count: 1 } } output { name: "OUTPUT1" }'
    )
    result = http.infer("add_sub", header, a.tobytes() + b.tobytes())
    assert result.reply.ok, result.reply.status
    top = result.header.output[0].batch_classes[0].cls[0]
    total = (a + b)[0]
    assert top.idx == int(np.argmax(total)) and top.value == pytest.approx(float(total.max()))
    assert top.label == ""  # add_sub has no label file
    assert list(result.outputs) == ["OUTPUT1"]
    np.testing.assert_array_equal(f32(result.outputs["OUTPUT1"], (1, 16)), a - b)


def test_variable_size_input_needs_dims(http: V1HttpClient) -> None:
    data = np.arange(7, dtype=np.float32)
    result = http.infer(
        "identity", 'batch_size: 1 input { name: "INPUT0" dims: 7 }', data.tobytes()
    )
    assert result.reply.ok, result.reply.status
    assert list(result.header.output[0].raw.dims) == [7]
    np.testing.assert_array_equal(f32(result.outputs["OUTPUT0"], (7,)), data)
    missing = http.infer("identity", 'batch_size: 1 input { name: "INPUT0" }', data.tobytes())
    assert missing.reply.http_status == 400 and missing.reply.code == "INVALID_ARG"
    assert "must give its dims" in missing.reply.status.msg


def _strings(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def test_string_inputs_are_length_prefixed(http: V1HttpClient) -> None:
    strings = _strings(b"hello", b"", b"v1 \xe2\x9c\x93")
    flags = np.array([True, False], dtype=bool)
    halves = np.array([1.5, -2.0], dtype=np.float16)
    ints = np.array([-3, 7, 9], dtype=np.int8)
    header = (
        f'batch_size: 1 input {{ name: "B" dims: 3 batch_byte_size: {len(strings)} }} '
        'input { name: "Z" dims: 2 } input { name: "H" dims: 2 } input { name: "I" dims: 3 } '
        'output { name: "B_OUT" } output { name: "I_OUT" }'
    )
    body = strings + flags.tobytes() + halves.tobytes() + ints.tobytes()
    result = http.infer("types", header, body)
    assert result.reply.ok, result.reply.status
    b_out = result.header.output[0]
    assert b_out.data_type == mc.TYPE_STRING and list(b_out.raw.dims) == [3]
    assert result.outputs["B_OUT"] == strings
    assert np.frombuffer(result.outputs["I_OUT"], np.int8).tolist() == [-3, 7, 9]

    no_size = header.replace(f" batch_byte_size: {len(strings)}", "")
    missing = http.infer("types", no_size, body)
    assert missing.reply.code == "INVALID_ARG" and "batch_byte_size" in missing.reply.status.msg
    unsupported = http.infer(
        "types",
        header.replace('output { name: "I_OUT" }', 'output { name: "Z_OUT" cls { count: 1 } }'),
        body,
    )
    assert unsupported.reply.code == "INVALID_ARG"
    assert "unsupported type 'BOOL'" in unsupported.reply.status.msg


def test_dynamic_batching_model(http: V1HttpClient) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    header = (
        'batch_size: 3 input { name: "INPUT0" } '
        'output { name: "OUTPUT0" } output { name: "BATCH_SIZE" }'
    )
    result = http.infer("batcher", header, data.tobytes())
    assert result.reply.ok, result.reply.status
    np.testing.assert_array_equal(f32(result.outputs["OUTPUT0"], (3, 4)), data)
    sizes = np.frombuffer(result.outputs["BATCH_SIZE"], np.int32)
    assert sizes.shape == (3,) and (sizes >= 3).all()


def _accumulate(http: V1HttpClient, corrid: int, value: int, flags: str = "") -> Any:
    header = (
        f"batch_size: 1 correlation_id: {corrid} {flags} "
        'input { name: "INPUT" } output { name: "OUTPUT" }'
    )
    return http.infer("accumulate", header, np.array([value], np.int32).tobytes())


def _value(result: Any) -> int:
    assert result.reply.ok, result.reply.status
    return int(np.frombuffer(result.outputs["OUTPUT"], np.int32)[0])


def test_sequences_with_correlation_ids(http: V1HttpClient, grpc_client: V1GrpcClient) -> None:
    start, end = "flags: 1", "flags: 2"
    assert _value(_accumulate(http, 7001, 1, start)) == 1
    assert _value(_accumulate(http, 7002, 10, start)) == 10
    assert _value(_accumulate(http, 7001, 2)) == 3
    grpc_header = request_header(
        'batch_size: 1 correlation_id: 7002 input { name: "INPUT" } output { name: "OUTPUT" }'
    )
    response, outputs = grpc_client.infer("accumulate", grpc_header, [np.int32(5).tobytes()])
    assert response.request_status.code == rs.SUCCESS, response.request_status
    assert np.frombuffer(outputs["OUTPUT"], np.int32)[0] == 15
    assert _value(_accumulate(http, 7001, 3, end)) == 6
    assert _value(_accumulate(http, 7002, 1, "flags: 3")) == 1  # START|END: a new sequence
    no_corrid = http.infer(
        "accumulate", 'batch_size: 1 input { name: "INPUT" }', np.int32(1).tobytes()
    )
    assert no_corrid.reply.http_status == 400 and no_corrid.reply.code == "INVALID_ARG"
    assert "correlation" in no_corrid.reply.status.msg.lower()


def test_sequence_started_over_v1_continues_over_v2(
    http: V1HttpClient, v2: httpclient.InferenceServerClient
) -> None:
    assert _value(_accumulate(http, 7100, 4, "flags: 1")) == 4
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[6]], np.int32))
    answer = v2.infer("accumulate", [inp], sequence_id=7100, sequence_end=True)
    assert answer.as_numpy("OUTPUT").tolist() == [[10]]


def test_v2_statistics_count_v1_requests(
    http: V1HttpClient, grpc_client: V1GrpcClient, v2: httpclient.InferenceServerClient
) -> None:
    def counts() -> tuple[int, int]:
        (stats,) = v2.get_inference_statistics("classifier")["model_stats"]
        return int(stats["inference_count"]), int(stats["inference_stats"]["success"]["count"])

    before = counts()
    probs = np.ones((2, 5), np.float32)
    header = 'batch_size: 2 input { name: "INPUT" } output { name: "PROBS" }'
    assert http.infer("classifier", header, probs.tobytes()).reply.ok
    response, _ = grpc_client.infer("classifier", request_header(header), [probs.tobytes()])
    assert response.request_status.code == rs.SUCCESS
    assert counts() == (before[0] + 4, before[1] + 2)
    _, status = http.status("classifier")
    version = status.model_status["classifier"].version_status[1]
    assert version.model_inference_count == before[0] + 4
    assert sum(s.success.count for s in version.infer_stats.values()) >= 2


# --- shared memory, model control ------
@pytest.fixture
def region() -> Iterator[shared_memory.SharedMemory]:
    block = shared_memory.SharedMemory(create=True, size=1024)
    try:
        yield block
    finally:
        block.close()
        block.unlink()


def test_shared_memory_inputs_and_outputs(
    http: V1HttpClient, region: shared_memory.SharedMemory
) -> None:
    key = "/" + region.name
    reg = http.request("POST", f"/api/sharedmemorycontrol/register/v1_region/{key[1:]}/0/1024")
    assert reg.ok, reg.status
    a, b = add_sub_inputs(2, seed=9)
    buf = np.ndarray((1024,), dtype=np.uint8, buffer=region.buf)
    buf[:128] = np.frombuffer(a.tobytes(), np.uint8)
    buf[128:256] = np.frombuffer(b.tobytes(), np.uint8)
    header = (
        "batch_size: 2 "
        'input { name: "INPUT0" shared_memory { name: "v1_region" offset: 0 byte_size: 128 } } '
        'input { name: "INPUT1" shared_memory { name: "v1_region" offset: 128 byte_size: 128 } } '
        'output { name: "OUTPUT0" shared_memory { name: "v1_region" offset: 256 byte_size: 128 } } '
        'output { name: "OUTPUT1" }'
    )
    result = http.infer("add_sub", header, b"")
    assert result.reply.ok, result.reply.status
    assert result.header.output[0].raw.batch_byte_size == 128
    assert list(result.outputs) == ["OUTPUT1"]
    in_shm = np.frombuffer(bytes(region.buf[256:384]), np.float32).reshape(2, 16)
    np.testing.assert_array_equal(in_shm, a + b)
    np.testing.assert_array_equal(f32(result.outputs["OUTPUT1"], (2, 16)), a - b)

    status = http.request("GET", "/api/sharedmemorycontrol/status", params={"format": "binary"})
    regions = ss.SharedMemoryStatus.FromString(status.body).shared_memory_region
    assert [(r.name, r.key, r.offset, r.byte_size) for r in regions] == [
        ("v1_region", region.name, 0, 1024)
    ]
    again = http.request("POST", f"/api/sharedmemorycontrol/register/v1_region/{region.name}/0/64")
    assert again.http_status == 400 and again.code == "ALREADY_EXISTS"
    assert http.request("POST", "/api/sharedmemorycontrol/unregister/v1_region").ok
    gone = http.infer("add_sub", header, b"")
    assert gone.reply.code == "NOT_FOUND" and "v1_region" in gone.reply.status.msg
    assert http.request("POST", f"/api/sharedmemorycontrol/register/r2/{region.name}/0/16").ok
    assert http.request("POST", "/api/sharedmemorycontrol/unregister/all").ok
    empty = http.request("GET", "/api/sharedmemorycontrol/status")
    assert empty.ok and empty.body == b""


def test_shared_memory_errors(http: V1HttpClient) -> None:
    missing = http.request("POST", "/api/sharedmemorycontrol/register/x/no_such_key_v1/0/16")
    assert missing.http_status == 400 and missing.code == "INTERNAL"
    assert "no_such_key_v1" in missing.status.msg
    cuda = http.request("POST", "/api/sharedmemorycontrol/cudaregister/c/0/16", data=b"h" * 64)
    assert cuda.http_status == 400 and cuda.code == "UNSUPPORTED"
    assert http.request("GET", "/api/sharedmemorycontrol/register/x/k/0/1").http_status == 405
    assert http.request("POST", "/api/sharedmemorycontrol/flush").http_status == 404
    a, b = add_sub_inputs(1)
    both = http.infer(
        "add_sub",
        'batch_size: 1 input { name: "INPUT0" } input { name: "INPUT1" } '
        'output { name: "OUTPUT0" cls { count: 1 } shared_memory { name: "r" byte_size: 8 } }',
        a.tobytes() + b.tobytes(),
    )
    assert both.reply.code == "INVALID_ARG" and "shared memory" in both.reply.status.msg


def test_model_control_unload_and_load(http: V1HttpClient) -> None:
    assert http.request("POST", "/api/modelcontrol/unload/identity").ok
    _, status = http.status("identity")
    assert status.model_status["identity"].version_status[1].ready_state == ss.MODEL_UNAVAILABLE
    data = np.arange(3, dtype=np.float32).tobytes()
    header = 'batch_size: 1 input { name: "INPUT0" dims: 3 }'
    unloaded = http.infer("identity", header, data)
    assert unloaded.reply.http_status == 400
    assert unloaded.reply.code in ("NOT_FOUND", "UNAVAILABLE")
    assert http.request("POST", "/api/modelcontrol/load/identity").ok
    assert http.infer("identity", header, data).reply.ok
    missing = http.request("POST", "/api/modelcontrol/load/no_such_model")
    assert missing.http_status == 400 and missing.status.code != rs.SUCCESS
    assert http.request("GET", "/api/modelcontrol/load/identity").http_status == 405


# --- error paths of /api/infer ------
def _add_sub_body(batch: int = 1) -> bytes:
    a, b = add_sub_inputs(batch)
    return a.tobytes() + b.tobytes()


@pytest.mark.parametrize(
    ("model", "header", "body", "code", "fragment"),
    [
        ("add_sub", None, _add_sub_body(), "INVALID_ARG", "missing NV-InferRequest"),
        ("add_sub", "batch_size: one", _add_sub_body(), "INVALID_ARG", "failed to parse"),
        ("add_sub", "nonsense_field: 1", _add_sub_body(), "INVALID_ARG", "failed to parse"),
        ("no_model", f"batch_size: 1 {ADD_SUB_HEADER}", b"", "NOT_FOUND", "no_model"),
        ("add_sub", f"batch_size: 1 {ADD_SUB_HEADER}", _add_sub_body()[:-4], "INVALID_ARG",
         "needs 64 bytes"),
        ("add_sub", f"batch_size: 1 {ADD_SUB_HEADER}", _add_sub_body() + b"x", "INVALID_ARG",
         "account for 128 bytes"),
        ("add_sub", 'batch_size: 1 input { name: "INPUT0" } input { name: "INPUT1" } '
         'output { name: "NOPE" }', _add_sub_body(), "INVALID_ARG",
         "unexpected inference output 'NOPE'"),
        ("add_sub", 'batch_size: 1 input { name: "INPUT0" } input { name: "EXTRA" }',
         _add_sub_body(), "INVALID_ARG", "unexpected inference input 'EXTRA'"),
        ("add_sub", 'batch_size: 1 input { name: "INPUT0" }', _add_sub_body()[:64],
         "INVALID_ARG", "expected 2 inputs"),
        ("add_sub", ADD_SUB_HEADER, b"", "INVALID_ARG", "batch-size must be >= 1"),
        ("add_sub", f"batch_size: 9 {ADD_SUB_HEADER}", _add_sub_body(9), "INVALID_ARG",
         "batch-size must be <= 8"),
        ("identity", 'batch_size: 2 input { name: "INPUT0" dims: 1 }', b"\0" * 8, "INVALID_ARG",
         "does not support batching"),
        ("add_sub", 'batch_size: 1 input { name: "INPUT0" dims: 15 batch_byte_size: 60 } '
         'input { name: "INPUT1" dims: 15 batch_byte_size: 60 }', b"\0" * 120, "INVALID_ARG",
         "unexpected shape for input 'INPUT1'"),
        ("add_sub", 'batch_size: 1 input { name: "INPUT0" batch_byte_size: 60 } '
         'input { name: "INPUT1" batch_byte_size: 60 }', b"\0" * 120, "INVALID_ARG",
         "byte size mismatch"),
        ("classifier", 'batch_size: 1 input { name: "INPUT" } output { name: "PROBS" cls { } }',
         b"\0" * 20, "INVALID_ARG", "count for output 'PROBS' must be >= 1"),
    ],
)  # fmt: skip
def test_infer_errors(
    http: V1HttpClient, model: str, header: str | None, body: bytes, code: str, fragment: str
) -> None:
    if header is None:
        reply = http.request("POST", f"/api/infer/{model}", data=body)
    else:
        reply = http.infer(model, header, body).reply
    assert reply.http_status == 400
    assert reply.code == code, reply.status
    assert fragment in reply.status.msg, reply.status.msg
    assert reply.status.server_id == "inference:0" and reply.status.request_id > 0
    assert fragment in reply.body.decode()


def test_infer_url_errors(http: V1HttpClient) -> None:
    header = f"batch_size: 1 {ADD_SUB_HEADER}"
    unknown_version = http.infer("add_sub", header, _add_sub_body(), version="7")
    assert unknown_version.reply.code == "NOT_FOUND"
    assert http.request("POST", "/api/infer/add_sub/v1").http_status == 404
    assert http.request("POST", "/api/infer").http_status == 404
    assert http.request("GET", "/api/infer/add_sub").http_status == 405
    # the v2 API is untouched next to it
    assert http.session.get(http.base + "/v2/health/ready").status_code == 200


# --- gRPC ------
def test_grpc_health_status_and_repository(grpc_client: V1GrpcClient) -> None:
    stub = grpc_client.stub
    live = stub.Health(pb.HealthRequest(mode="live"))
    assert live.health and live.request_status.code == rs.SUCCESS
    assert live.request_status.server_id == "inference:0"
    bad = stub.Health(pb.HealthRequest(mode="nap"))
    assert bad.request_status.code == rs.INVALID_ARG and "nap" in bad.request_status.msg
    status = stub.Status(pb.StatusRequest(model_name="add_sub"))
    assert status.request_status.code == rs.SUCCESS
    assert list(status.server_status.model_status) == ["add_sub"]
    assert status.server_status.health_stats.success.count >= 1
    missing = stub.Status(pb.StatusRequest(model_name="nope"))
    assert missing.request_status.code == rs.NOT_FOUND
    index = stub.Repository(pb.RepositoryRequest(index=pb.RepositoryRequest.Index()))
    assert "classifier" in [m.name for m in index.index.models]
    empty = stub.Repository(pb.RepositoryRequest())
    assert empty.request_status.code == rs.INVALID_ARG


def test_grpc_infer_raw_classification_and_errors(grpc_client: V1GrpcClient) -> None:
    a, b = add_sub_inputs(2, seed=11)
    header = request_header(f"batch_size: 2 {ADD_SUB_HEADER}")
    response, outputs = grpc_client.infer("add_sub", header, [a.tobytes(), b.tobytes()], version=1)
    assert response.request_status.code == rs.SUCCESS, response.request_status
    assert response.meta_data.model_version == 1 and response.meta_data.batch_size == 2
    np.testing.assert_array_equal(f32(outputs["OUTPUT0"], (2, 16)), a + b)
    np.testing.assert_array_equal(f32(outputs["OUTPUT1"], (2, 16)), a - b)

    probs = np.array([[0.2, 0.1, 0.6, 0.05, 0.05]], np.float32)
    cls_header = request_header(
        'batch_size: 1 input { name: "INPUT" } output { name: "PROBS" cls { count: 2 } }'
    )
    response, outputs = grpc_client.infer("classifier", cls_header, [probs.tobytes()])
    assert outputs == {} and len(response.raw_output) == 0
    top = response.meta_data.output[0].batch_classes[0].cls
    assert [(c.idx, c.label) for c in top] == [(2, "bird"), (0, "cat")]

    one_input, _ = grpc_client.infer("add_sub", header, [a.tobytes()])
    assert one_input.request_status.code == rs.INVALID_ARG
    assert "no raw_input for input 'INPUT1'" in one_input.request_status.msg
    extra, _ = grpc_client.infer("add_sub", header, [a.tobytes(), b.tobytes(), b"x"])
    assert extra.request_status.code == rs.INVALID_ARG
    short, _ = grpc_client.infer(
        "add_sub",
        request_header(
            'batch_size: 2 input { name: "INPUT0" batch_byte_size: 256 } input { name: "INPUT1" }'
        ),
        [a.tobytes()[:-4], b.tobytes()],
    )
    assert (
        short.request_status.code == rs.INVALID_ARG
        and "batch_byte_size" in short.request_status.msg
    )
    unknown, _ = grpc_client.infer("nope", header, [])
    assert unknown.request_status.code == rs.NOT_FOUND


def test_grpc_stream_infer_keeps_order_and_survives_errors(grpc_client: V1GrpcClient) -> None:
    def request(corrid: int, value: int, flags: int) -> Any:
        return pb.InferRequest(
            model_name="accumulate",
            meta_data=request_header(
                f"batch_size: 1 correlation_id: {corrid} flags: {flags} "
                'input { name: "INPUT" } output { name: "OUTPUT" }'
            ),
            raw_input=[np.int32(value).tobytes()],
        )

    requests = [request(7300, 1, 1), request(7300, 2, 0), pb.InferRequest(model_name="nope"),
                request(7300, 3, 2)]  # fmt: skip
    responses = list(grpc_client.stub.StreamInfer(iter(requests)))
    codes = [r.request_status.code for r in responses]
    assert codes == [rs.SUCCESS, rs.SUCCESS, rs.NOT_FOUND, rs.SUCCESS]
    values = [np.frombuffer(r.raw_output[0], np.int32)[0] for r in responses if r.raw_output]
    assert values == [1, 3, 6]
    ids = [r.request_status.request_id for r in responses]
    assert ids == sorted(ids) and len(set(ids)) == 4


def test_grpc_shared_memory_and_model_control(
    grpc_client: V1GrpcClient, region: shared_memory.SharedMemory
) -> None:
    stub = grpc_client.stub
    Shm = pb.SharedMemoryControlRequest
    register = Shm(register=Shm.Register(
        name="g1", byte_size=512,
        system_shared_memory=Shm.SystemSharedMemoryIdentifier(shared_memory_key=region.name),
    ))  # fmt: skip
    assert stub.SharedMemoryControl(register).request_status.code == rs.SUCCESS
    data = np.arange(5, dtype=np.float32)
    region.buf[:20] = data.tobytes()
    header = request_header(
        'batch_size: 1 input { name: "INPUT0" dims: 5 '
        'shared_memory { name: "g1" offset: 0 byte_size: 20 } } output { name: "OUTPUT0" }'
    )
    response, outputs = grpc_client.infer("identity", header, [])
    assert response.request_status.code == rs.SUCCESS, response.request_status
    np.testing.assert_array_equal(f32(outputs["OUTPUT0"], (5,)), data)
    status = stub.SharedMemoryControl(Shm(status=Shm.Status()))
    assert "g1" in [r.name for r in status.shared_memory_status.shared_memory_region]
    cuda = stub.SharedMemoryControl(Shm(register=Shm.Register(
        name="c", byte_size=4, cuda_shared_memory=Shm.CudaSharedMemoryIdentifier(device_id=0),
    )))  # fmt: skip
    assert cuda.request_status.code == rs.UNSUPPORTED
    nameless = stub.SharedMemoryControl(Shm(unregister=Shm.Unregister()))
    assert nameless.request_status.code == rs.INVALID_ARG
    assert stub.SharedMemoryControl(Shm()).request_status.code == rs.INVALID_ARG
    assert (
        stub.SharedMemoryControl(Shm(unregister=Shm.Unregister(name="g1"))).request_status.code
        == rs.SUCCESS
    )
    assert (
        stub.SharedMemoryControl(Shm(unregister_all=Shm.UnregisterAll())).request_status.code
        == rs.SUCCESS
    )

    unload = stub.ModelControl(pb.ModelControlRequest(model_name="classifier", type=0))
    assert unload.request_status.code == rs.SUCCESS
    load = stub.ModelControl(pb.ModelControlRequest(model_name="classifier", type=1))
    assert load.request_status.code == rs.SUCCESS
    ready = stub.Status(pb.StatusRequest(model_name="classifier")).server_status
    assert ready.model_status["classifier"].version_status[1].ready_state == ss.MODEL_READY


def test_grpc_v1_and_v2_share_the_port(server: ServerHandle) -> None:
    from tritonclient.grpc import InferenceServerClient

    client = InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    assert client.is_server_ready()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        from repokit.protocol.generated.v1 import grpc_service_pb2_grpc as pb_grpc

        health = pb_grpc.GRPCServiceStub(channel).Health(pb.HealthRequest(mode="ready"))
        assert health.health
