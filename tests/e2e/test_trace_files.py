"""Triton trace mode end to end: requests through tritonclient (HTTP and gRPC) and raw HTTP are
sampled by rate and count, their timestamps (frontend, queue, compute) and tensors land in
Triton's JSON trace file, ensembles give their composing models child traces, and
``log_frequency`` rotates the output into ``<file>.0``, ``<file>.1``, ..."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repokit.core.tracing.options import parse_trace_flags
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

MODELS = ("add_sub", "add_sub_onnx", "add_sub_ensemble")
CORE_STAMPS = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "INFER_RESPONSE_COMPLETE",
    "REQUEST_END",
]
OFF = {"trace_level": ["OFF"], "trace_rate": None, "trace_count": None, "log_frequency": None}


@pytest.fixture(scope="module")
def trace_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("traces") / "trace.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, trace_base: Path) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("repo"), MODELS)
    # every trace goes to its own index file at once, so tests read them while it runs
    trace = parse_trace_flags([f"triton,file={trace_base}", "triton,log-frequency=1"])
    with running_server(repo, allow_grpc=True, trace=trace) as srv:
        yield srv


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    client.update_trace_settings(settings=OFF)
    for model in MODELS:
        client.update_trace_settings(model_name=model, settings=OFF | {"trace_level": None})
    client.close()


def _index_files(base: Path) -> list[Path]:
    found = [p for p in base.parent.glob(base.name + ".*") if p.suffix[1:].isdigit()]
    return sorted(found, key=lambda p: int(p.suffix[1:]))


class Traces:
    """The trace objects written since it was made, grouped by trace id."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.seen = len(_index_files(base))

    def files(self, count: int) -> list[Path]:
        """The index files written since, once there are ``count`` of them (or after 30 s).
        A trace is written when it ends, after its response's last byte was sent
        (HTTP_SEND_END), as tritonserver writes it: the client may read the file first (with
        frontend workers the trace ends in the scheduling process, a message later)."""
        deadline = time.monotonic() + 30
        while len(_index_files(self.base)) - self.seen < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return _index_files(self.base)[self.seen :]

    def objects(self, count: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in self.files(count):
            document = json.loads(path.read_text())
            assert isinstance(document, list)
            out.extend(document)
        return out

    def by_id(self, count: int) -> dict[int, dict[str, Any]]:
        """Trace id -> its header, timestamps and tensors, from ``count`` index files (each
        holds a request's trace tree)."""
        traces: dict[int, dict[str, Any]] = {}
        for item in self.objects(count):
            entry = traces.setdefault(item["id"], {"stamps": [], "tensors": []})
            if "timestamps" in item:
                entry["stamps"].extend(item["timestamps"])
            elif "tensor" in item:
                entry["tensors"].append(item)
            else:
                entry["header"] = item
        return traces


def _inputs(module: Any) -> list[Any]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    i0 = module.InferInput("INPUT0", [1, 16], "FP32")
    i0.set_data_from_numpy(a)
    i1 = module.InferInput("INPUT1", [1, 16], "FP32")
    i1.set_data_from_numpy(b)
    return [i0, i1]


def _names(entry: dict[str, Any]) -> list[str]:
    return [s["name"] for s in entry["stamps"]]


def _assert_ordered(entry: dict[str, Any]) -> None:
    times = [s["ns"] for s in entry["stamps"]]
    assert times == sorted(times), entry["stamps"]


def test_http_and_grpc_requests_are_traced(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    http.infer("add_sub", _inputs(httpclient), request_id="http-1")
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    grpc.infer("add_sub_onnx", _inputs(grpcclient), request_id="grpc-1")
    grpc.close()
    found = traces.by_id(2)
    assert len(found) == 2
    first, second = (found[k] for k in sorted(found))
    assert first["header"] == {
        "id": first["header"]["id"],
        "model_name": "add_sub",
        "model_version": 1,
        "request_id": "http-1",
    }
    assert _names(first) == ["HTTP_RECV_START", "HTTP_RECV_END", *CORE_STAMPS,
                             "HTTP_SEND_START", "HTTP_SEND_END"]  # fmt: skip
    assert second["header"]["model_name"] == "add_sub_onnx"
    assert second["header"]["request_id"] == "grpc-1"
    assert _names(second) == [
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        *CORE_STAMPS,
        "GRPC_SEND_START",
        "GRPC_SEND_END",
    ]
    for entry in (first, second):
        _assert_ordered(entry)
        assert entry["tensors"] == []
        assert "parent_id" not in entry["header"]


def test_rate_and_count(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "3"})
    for _ in range(7):
        http.infer("add_sub", _inputs(httpclient))
    assert len(traces.by_id(2)) == 2  # the 3rd and the 6th request
    traces = Traces(trace_base)
    settings = http.update_trace_settings(settings={"trace_rate": "1", "trace_count": "2"})
    assert settings["trace_count"] == "2"
    for _ in range(4):
        http.infer("add_sub", _inputs(httpclient))
    assert len(traces.by_id(2)) == 2
    assert http.get_trace_settings()["trace_count"] == "0"  # counted down


def test_model_setting_traces_only_that_model(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(
        model_name="add_sub_onnx", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    )
    http.infer("add_sub", _inputs(httpclient))
    http.infer("add_sub_onnx", _inputs(httpclient))
    found = traces.by_id(1)
    assert [entry["header"]["model_name"] for entry in found.values()] == ["add_sub_onnx"]


def test_tensors_level(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(settings={"trace_level": ["TENSORS"], "trace_rate": "1"})
    http.infer("add_sub_onnx", _inputs(httpclient))
    (entry,) = traces.by_id(1).values()
    assert entry["stamps"] == []  # TENSORS alone records no timestamps
    tensors = {(t["activity"], t["tensor"]["name"]): t["tensor"] for t in entry["tensors"]}
    assert sorted(tensors) == [
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
        ("TENSOR_QUEUE_INPUT", "INPUT0"),
        ("TENSOR_QUEUE_INPUT", "INPUT1"),
    ]
    assert tensors["TENSOR_QUEUE_INPUT", "INPUT0"] == {
        "name": "INPUT0",
        "data": ",".join(str(i) for i in range(16)),
        "shape": "1,16",
        "dtype": "FP32",
    }
    assert tensors["TENSOR_BACKEND_OUTPUT", "OUTPUT0"]["data"].startswith("0.5,1.5,2.5,")


def test_ensemble_composing_models_get_child_traces(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    a = httpclient.InferInput("A", [1, 16], "FP32")
    a.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    b = httpclient.InferInput("B", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    http.infer("add_sub_ensemble", [a, b], request_id="ens")
    found = traces.by_id(1)  # the ensemble's trace and its children's, in one file
    assert len(found) == 3
    parent = next(e for e in found.values() if e["header"]["model_name"] == "add_sub_ensemble")
    parent_id = parent["header"]["id"]
    children = [e for e in found.values() if e["header"].get("parent_id") == parent_id]
    assert sorted(e["header"]["model_name"] for e in children) == ["add_sub", "add_sub_onnx"]
    for child in children:
        assert child["header"]["request_id"] == "ens"
        assert _names(child) == [n for n in CORE_STAMPS if n != "INFER_RESPONSE_COMPLETE"]
        _assert_ordered(child)
    assert _names(parent)[0] == "HTTP_RECV_START"
    _assert_ordered(parent)


def test_log_frequency_rotates(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "2"}
    )
    for _ in range(5):
        http.infer("add_sub", _inputs(httpclient))
    files = traces.files(2)
    assert len(files) == 2  # two full files of two traces; the fifth waits for its pair
    for path in files:
        assert len({item["id"] for item in json.loads(path.read_text())}) == 2
    # replacing the setting writes what it holds (the fifth trace, in a file of its own)
    http.update_trace_settings(settings={"log_frequency": "1"})
    assert len(traces.files(3)) == 3


def test_raw_http_with_compression_and_failed_requests(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1] * 16},
        ]
    }
    url = f"http://{server.http_url}/v2/models/add_sub/infer"
    answer = requests.post(url, json=body, headers={"Accept-Encoding": "gzip"}, timeout=30)
    assert answer.status_code == 200
    assert answer.headers["Content-Encoding"] == "gzip"
    assert answer.json()["outputs"][0]["data"][:2] == [1.0, 2.0]
    bad = requests.post(url, json={"inputs": []}, timeout=30)
    assert bad.status_code == 400  # answered as usual; refused before a model: no trace
    (entry,) = traces.by_id(1).values()
    assert entry["header"]["model_name"] == "add_sub"
    assert _names(entry)[-2:] == ["HTTP_SEND_START", "HTTP_SEND_END"]


def test_trace_file_without_log_frequency(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "repo", ("add_sub",))
    base = tmp_path / "all.json"
    trace = parse_trace_flags([f"triton,file={base}", "level=TIMESTAMPS", "rate=1"])
    with running_server(repo, trace=trace) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        for _ in range(3):
            client.infer("add_sub", _inputs(httpclient))
        client.close()
    document = json.loads(base.read_text())  # closed when the server stopped
    assert len({item["id"] for item in document}) == 3
    assert not _index_files(base)
