"""Conformance: the same assertions over tritonclient.http and tritonclient.grpc against ONE real
repokit server (HTTP and gRPC on port 0, one loop, one InferenceService).

A small adapter per protocol hides the clients' differences (gRPC's JSON has int64 as strings
and omits zero fields; HTTP returns plain JSON); each test is written once and parametrised over
``http`` and ``grpc``. Error codes are checked per protocol with Triton's mapping (server
``docs/protocol/README.md``): the same Triton code, the same message. The last tests send
requests over both protocols and check that they land in one model instance and one set of
statistics.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from repokit.frontends.runner import ServerHandle
from tests.frontends.grpc.serving import make_repository, running_server

# Triton code -> (HTTP status, gRPC status) as tritonclient reports them
STATUS: dict[str, dict[str, str]] = {
    "INVALID_ARG": {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"},
    "NOT_FOUND": {"http": "404", "grpc": "StatusCode.NOT_FOUND"},
    "INTERNAL": {"http": "500", "grpc": "StatusCode.INTERNAL"},
    "UNAVAILABLE": {"http": "503", "grpc": "StatusCode.UNAVAILABLE"},
}

COUNTER_CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "CALLS" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

COUNTER_MODEL = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        responses = []
        for _ in requests:
            self.calls += 1
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("CALLS", np.array([self.calls], dtype=np.int64)),
                pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
            ]))
        return responses
"""


@dataclass
class Protocol:
    """One protocol's client behind the calls the tests make, with results normalised."""

    name: str  # "http" | "grpc"
    client: Any
    module: Any  # tritonclient.http or tritonclient.grpc

    def json(self, value: Any) -> Any:
        return value if self.name == "http" else _ints(value)

    def model_metadata(self, model: str) -> dict[str, Any]:
        meta = dict(self.json(self.client.get_model_metadata(model, **self._as_json())))
        meta["versions"] = [str(v) for v in meta.get("versions", [])]  # strings in both
        return meta

    def model_config(self, model: str) -> dict[str, Any]:
        config = self.json(self.client.get_model_config(model, **self._as_json()))
        return dict(config if self.name == "http" else config["config"])

    def statistics(self, model: str) -> dict[str, int]:
        raw = self.json(self.client.get_inference_statistics(model, **self._as_json()))
        stats = raw["model_stats"][0]
        infer = stats.get("inference_stats", {})
        return {
            "inference_count": int(stats.get("inference_count", 0)),
            "execution_count": int(stats.get("execution_count", 0)),
            "success": int(infer.get("success", {}).get("count", 0)),
            "queue": int(infer.get("queue", {}).get("count", 0)),
            "fail": int(infer.get("fail", {}).get("count", 0)),
        }

    def index(self) -> set[tuple[str, str, str]]:
        raw = self.json(self.client.get_model_repository_index(**self._as_json()))
        models = raw if self.name == "http" else raw.get("models", [])
        return {(m["name"], str(m.get("version", "")), m.get("state", "")) for m in models}

    def shm_regions(self) -> dict[str, dict[str, Any]]:
        raw = self.json(self.client.get_system_shared_memory_status(**self._as_json()))
        if self.name == "http":
            return {r["name"]: r for r in raw}
        return dict(raw.get("regions", {}))

    def input(self, name: str, data: np.ndarray, datatype: str, encoding: str) -> Any:
        tensor = self.module.InferInput(name, list(data.shape), datatype)
        if self.name == "http":
            tensor.set_data_from_numpy(data, binary_data=encoding == "binary")
        else:
            tensor.set_data_from_numpy(data)
        return tensor

    def output(self, name: str, **kw: Any) -> Any:
        return self.module.InferRequestedOutput(name, **kw)

    def _as_json(self) -> dict[str, Any]:
        return {} if self.name == "http" else {"as_json": True}


def _ints(value: Any) -> Any:
    """gRPC JSON (MessageToJson) prints int64/uint64 as strings: turn digit strings into ints."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repo = make_repository(tmp_path_factory.mktemp("conformance"))
    (repo / "counter" / "1").mkdir(parents=True)
    (repo / "counter" / "config.pbtxt").write_text(textwrap.dedent(COUNTER_CONFIG))
    (repo / "counter" / "1" / "model.py").write_text(textwrap.dedent(COUNTER_MODEL))
    with running_server(
        repo, http=True, model_control_mode="explicit", load_models=["*"], allow_client_shm=True
    ) as handle:
        yield handle


def _make(name: str, server: ServerHandle) -> Protocol:
    if name == "http":
        return Protocol("http", httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}"),
                        httpclient)  # fmt: skip
    return Protocol("grpc", grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"),
                    grpcclient)  # fmt: skip


@pytest.fixture(params=["http", "grpc"])
def proto(request: pytest.FixtureRequest, server: ServerHandle) -> Iterator[Protocol]:
    p = _make(request.param, server)
    yield p
    p.client.close()


@pytest.fixture
def both(server: ServerHandle) -> Iterator[tuple[Protocol, Protocol]]:
    h, g = _make("http", server), _make("grpc", server)
    yield h, g
    h.client.close()
    g.client.close()


def _encodings(proto: Protocol) -> list[str]:
    return ["binary", "json"] if proto.name == "http" else ["raw"]


def _expect_error(proto: Protocol, code: str, message: str, call: Any) -> None:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == STATUS[code][proto.name]
    assert info.value.message() == message


# --- health and metadata -------------------------------------------------------------------
def test_health(proto: Protocol) -> None:
    assert proto.client.is_server_live() is True
    assert proto.client.is_server_ready() is True
    assert proto.client.is_model_ready("add_sub") is True
    assert proto.client.is_model_ready("add_sub", "1") is True
    assert proto.client.is_model_ready("add_sub", "3") is False
    assert proto.client.is_model_ready("nope") is False


def test_server_metadata(proto: Protocol) -> None:
    meta = proto.json(proto.client.get_server_metadata(**proto._as_json()))
    assert meta["name"] == "triton"
    assert "system_shared_memory" in meta["extensions"]
    assert "cuda_shared_memory" not in meta["extensions"]


def test_model_metadata(proto: Protocol) -> None:
    meta = proto.model_metadata("add_sub")
    assert meta["name"] == "add_sub" and meta["versions"] == ["1"] and meta["platform"] == "python"
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ]
    assert [o["name"] for o in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    types = proto.model_metadata("types")
    assert [(t["name"], t["datatype"]) for t in types["inputs"]] == [
        ("B", "BYTES"), ("Z", "BOOL"), ("H", "FP16"), ("I", "INT8"),
    ]  # fmt: skip
    _expect_error(
        proto, "NOT_FOUND", "Request for unknown model: 'nope' is not found",
        lambda: proto.client.get_model_metadata("nope"),
    )  # fmt: skip


def test_model_config(proto: Protocol) -> None:
    config = proto.model_config("add_sub")
    assert config["name"] == "add_sub" and config["backend"] == "python"
    assert config["max_batch_size"] == 8
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [16]), ("INPUT1", "TYPE_FP32", [16]),
    ]  # fmt: skip
    _expect_error(
        proto, "NOT_FOUND", "Request for unknown model: 'add_sub' version 4 is not found",
        lambda: proto.client.get_model_config("add_sub", "4"),
    )  # fmt: skip


# --- inference -----------------------------------------------------------------------------
def test_infer_fp32_every_encoding(proto: Protocol) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    for encoding in _encodings(proto):
        inputs = [proto.input("INPUT0", a, "FP32", encoding),
                  proto.input("INPUT1", b, "FP32", encoding)]  # fmt: skip
        kw = {"binary_data": encoding == "binary"} if proto.name == "http" else {}
        outputs = [proto.output("OUTPUT0", **kw), proto.output("OUTPUT1", **kw)]
        result = proto.client.infer("add_sub", inputs, outputs=outputs, request_id=encoding)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        response = result.get_response()
        rid = response["id"] if proto.name == "http" else response.id
        assert rid == encoding


def test_infer_bytes_bool_fp16_int8(proto: Protocol) -> None:
    values = {
        "B": (np.array([b"a", b"", "\u00e9".encode(), b"\x00\xff"], dtype=object), "BYTES"),
        "Z": (np.array([True, False, True, True]), "BOOL"),
        "H": (np.array([1.5, -0.25, 65504.0, 0.0], dtype=np.float16), "FP16"),
        "I": (np.array([-128, 5, 127, 0], dtype=np.int8), "INT8"),
    }
    # FP16 cannot travel as JSON over HTTP, so the typed model goes binary / raw
    encoding = "binary" if proto.name == "http" else "raw"
    inputs = [proto.input(name, arr, dt, encoding) for name, (arr, dt) in values.items()]
    result = proto.client.infer("types", inputs)
    assert list(result.as_numpy("B_OUT")) == list(values["B"][0])
    for name in ("Z", "H", "I"):
        out = result.as_numpy(f"{name}_OUT")
        assert out.dtype == values[name][0].dtype
        np.testing.assert_array_equal(out, values[name][0])


def test_infer_bytes_and_bool_as_json(server: ServerHandle) -> None:
    """The HTTP JSON encoding of BYTES and BOOL (gRPC has only raw) through the same model."""
    p = _make("http", server)
    try:
        b = np.array([b"x", b"yz"], dtype=object)
        z = np.array([False, True])
        h = np.array([1.0, 2.0], dtype=np.float16)
        i = np.array([1, -1], dtype=np.int8)
        inputs = [p.input("B", b, "BYTES", "json"), p.input("Z", z, "BOOL", "json"),
                  p.input("H", h, "FP16", "binary"), p.input("I", i, "INT8", "json")]  # fmt: skip
        result = p.client.infer("types", inputs)
        assert list(result.as_numpy("B_OUT")) == [b"x", b"yz"]
        np.testing.assert_array_equal(result.as_numpy("Z_OUT"), z)
    finally:
        p.client.close()


def test_classification(proto: Protocol) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [proto.input("INPUT0", a, "FP32", _encodings(proto)[0]),
              proto.input("INPUT1", a, "FP32", _encodings(proto)[0])]  # fmt: skip
    result = proto.client.infer("add_sub", inputs, outputs=[proto.output("OUTPUT0", class_count=2)])
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (1, 2)
    assert [s.decode() for s in top[0]] == ["30.000000:15", "28.000000:14"]


def test_infer_errors_and_their_codes(proto: Protocol) -> None:
    a = np.zeros((1, 15), dtype=np.float32)
    enc = _encodings(proto)[0]
    _expect_error(
        proto, "INVALID_ARG",
        "[request id: <id_unknown>] unexpected shape for input 'INPUT1' for model 'add_sub'. "
        "Expected [-1,16], got [1,15]. NOTE: Setting a non-zero max_batch_size in the model "
        "config requires a batch dimension to be prepended to each input shape. If you want to "
        "specify the full shape including the batch dim in your input dims config, try setting "
        "max_batch_size to zero. See the model configuration docs for more info on "
        "max_batch_size.",
        lambda: proto.client.infer(
            "add_sub",
            [proto.input("INPUT0", a, "FP32", enc), proto.input("INPUT1", a, "FP32", enc)],
        ),
    )  # fmt: skip
    good = np.zeros((1, 16), dtype=np.float32)
    _expect_error(
        proto, "NOT_FOUND", "Request for unknown model: 'missing' is not found",
        lambda: proto.client.infer("missing", [proto.input("INPUT0", good, "FP32", enc)]),
    )  # fmt: skip
    wrong = np.zeros((1, 16), dtype=np.float64)
    _expect_error(
        proto, "INVALID_ARG",
        "[request id: r9] inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' "
        "expects 'FP32'",
        lambda: proto.client.infer(
            "add_sub",
            [proto.input("INPUT0", wrong, "FP64", enc), proto.input("INPUT1", good, "FP32", enc)],
            request_id="r9",
        ),
    )  # fmt: skip
    _expect_error(
        proto, "INVALID_ARG", "unexpected inference output 'NOPE' for model 'add_sub'",
        lambda: proto.client.infer(
            "add_sub",
            [proto.input("INPUT0", good, "FP32", enc), proto.input("INPUT1", good, "FP32", enc)],
            outputs=[proto.output("NOPE")],
        ),
    )  # fmt: skip


# --- statistics, repository, shared memory -------------------------------------------------
def test_statistics_count_a_request(proto: Protocol) -> None:
    before = proto.statistics("identity")
    x = np.array([1.0, 2.0], dtype=np.float32)
    proto.client.infer("identity", [proto.input("INPUT0", x, "FP32", _encodings(proto)[0])])
    after = proto.statistics("identity")
    for key in ("inference_count", "execution_count", "success", "queue"):
        assert after[key] == before[key] + 1, key
    _expect_error(
        proto, "INVALID_ARG", "requested model 'nope' is not available",
        lambda: proto.client.get_inference_statistics("nope"),
    )  # fmt: skip


def test_repository_index_and_control(proto: Protocol) -> None:
    assert ("add_sub", "1", "READY") in proto.index()
    assert ("counter", "1", "READY") in proto.index()
    _expect_error(
        proto, "INTERNAL", "failed to load 'nope', failed to poll from model repository",
        lambda: proto.client.load_model("nope"),
    )  # fmt: skip
    proto.client.unload_model("batcher")
    try:
        assert ("batcher", "1", "UNAVAILABLE") in proto.index()
        assert proto.client.is_model_ready("batcher") is False
    finally:
        proto.client.load_model("batcher")
    assert proto.client.is_model_ready("batcher") is True


def test_system_shared_memory(proto: Protocol) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    size = a.nbytes
    name = f"conf_{proto.name}"
    key = f"/repokit_conformance_{proto.name}_{os.getpid()}"
    region = shm.create_shared_memory_region(name, key, size * 3)
    try:
        shm.set_shared_memory_region(region, [a, 2 * a])
        proto.client.register_system_shared_memory(name, key, size * 3)
        status = proto.shm_regions()[name]
        assert status["key"] == key and int(status["byte_size"]) == size * 3
        inputs = [proto.module.InferInput("INPUT0", [1, 16], "FP32"),
                  proto.module.InferInput("INPUT1", [1, 16], "FP32")]  # fmt: skip
        inputs[0].set_shared_memory(name, size, 0)
        inputs[1].set_shared_memory(name, size, size)
        out = proto.output("OUTPUT1")
        out.set_shared_memory(name, size, size * 2)
        proto.client.infer("add_sub", inputs, outputs=[out])
        written = shm.get_contents_as_numpy(region, np.float32, [1, 16], offset=size * 2)
        np.testing.assert_array_equal(written, a - 2 * a)
        _expect_error(
            proto, "NOT_FOUND", "Unable to find system shared memory region: 'absent'",
            lambda: proto.client.get_system_shared_memory_status("absent"),
        )  # fmt: skip
    finally:
        proto.client.unregister_system_shared_memory(name)
        shm.destroy_shared_memory_region(region)
    assert name not in proto.shm_regions()


# --- one service behind both protocols ------------------------------------------------------
def test_both_protocols_share_one_model_instance(both: tuple[Protocol, Protocol]) -> None:
    """Alternating protocols, the one python instance of ``counter`` counts every call."""
    one = np.array([1], dtype=np.int32)
    calls, pids = [], set()
    for proto in (*both, *both):
        result = proto.client.infer("counter", [proto.input("IN", one, "INT32", "binary")])
        calls.append(int(result.as_numpy("CALLS")[0]))
        pids.add(int(result.as_numpy("PID")[0]))
    assert calls == list(range(calls[0], calls[0] + 4))
    assert len(pids) == 1


def test_both_protocols_share_one_queue_and_statistics(both: tuple[Protocol, Protocol]) -> None:
    http, grpc = both
    before_http, before_grpc = http.statistics("add_sub"), grpc.statistics("add_sub")
    assert before_http == before_grpc
    a = np.ones((1, 16), dtype=np.float32)
    for proto in both:
        enc = _encodings(proto)[0]
        proto.client.infer("add_sub", [proto.input("INPUT0", a, "FP32", enc),
                                       proto.input("INPUT1", a, "FP32", enc)])  # fmt: skip
    bad = np.ones((1, 16), dtype=np.float64)
    for proto in both:  # rejected by the core's checks: counted nowhere, as in Triton
        with pytest.raises(InferenceServerException):
            proto.client.infer("add_sub", [proto.input("INPUT0", bad, "FP64", "binary"),
                                           proto.input("INPUT1", a, "FP32", "binary")])  # fmt: skip
    after_http, after_grpc = http.statistics("add_sub"), grpc.statistics("add_sub")
    assert after_http == after_grpc
    for key in ("inference_count", "execution_count", "success", "queue"):
        assert after_http[key] == before_http[key] + 2, key
    assert after_http["fail"] == before_http["fail"]
