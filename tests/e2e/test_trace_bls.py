"""BLS requests in Triton trace mode, as Triton 2.51 traces them: a python model that passes
``trace=request.trace()`` to a BLS request gets the called model traced as a child of its own
request's trace (``parent_id``; the core's timestamps only, no ``INFER_RESPONSE_COMPLETE``),
written with it as one trace; nested BLS calls and an ensemble called by BLS nest further.
A BLS request without the trace, or made for an untraced request, is not traced, and a child
takes nothing from ``trace_rate`` or ``trace_count``. Real server on port 0, tritonclient."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from repokit.core.tracing.options import parse_trace_flags
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

# MODE: 0 BLS without the trace, 1 exec with it, 2 async_exec with it, 3 exec(decoupled=True)
# with it. MODEL names the model to call; "bls" is called with MODEL "add_sub" (nested BLS).
# INFO answers the trace's class, its context and what trace=None raises.
BLS_MODEL = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            target = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy().reshape(-1)[0]
            target = target.decode()
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0][0])
            inputs = [a, b]
            output = {"bls": "OUT", "add_sub_ensemble": "TWICE_A"}.get(target, "OUTPUT0")
            if target == "add_sub_ensemble":
                inputs = [pb_utils.Tensor("A", a.as_numpy()), pb_utils.Tensor("B", b.as_numpy())]
            if target == "bls":
                inputs = [a, b,
                          pb_utils.Tensor("MODEL", np.array([[b"add_sub"]], dtype=np.object_)),
                          pb_utils.Tensor("MODE", np.array([[mode]], dtype=np.int32))]
            kwargs = {"trace": request.trace()} if mode else {}
            call = pb_utils.InferenceRequest(
                model_name=target, inputs=inputs,
                requested_output_names=[output], **kwargs
            )
            if mode == 2:
                answer = await call.async_exec()
            elif mode == 3:
                answer = next(iter(call.exec(decoupled=True)))
            else:
                answer = call.exec()
            if answer.has_error():
                out = np.zeros((1, 16), dtype=np.float32)
            else:
                out = answer.output_tensors()[0].as_numpy()
            try:
                pb_utils.InferenceRequest(
                    model_name=target, inputs=inputs, requested_output_names=[], trace=None
                )
                refused = "accepted"
            except TypeError as exc:
                refused = str(exc).splitlines()[0]
            trace = request.trace()
            info = f"{type(trace).__name__}|{trace.get_context()}|{refused}"
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", out),
                pb_utils.Tensor("INFO", np.array([[info.encode()]], dtype=np.object_)),
            ]))
        return responses
"""
BLS_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "MODEL" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }}
]
output [
  {{ name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "INFO" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
CHILD_STAMPS = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]
OFF = {"trace_level": ["OFF"], "trace_rate": None, "trace_count": None, "log_frequency": None}
MODELS = ("bls", "bls_outer", "add_sub", "add_sub_onnx", "add_sub_ensemble")


def write_bls_model(repo: Path, name: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(BLS_MODEL)
    (repo / name / "config.pbtxt").write_text(BLS_CONFIG.format(name=name))


@pytest.fixture(scope="module")
def trace_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bls_traces") / "trace.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, trace_base: Path) -> Iterator[ServerThread]:
    repo = copy_models(
        tmp_path_factory.mktemp("repo"), ("add_sub", "add_sub_onnx", "add_sub_ensemble")
    )
    write_bls_model(repo, "bls")
    write_bls_model(repo, "bls_outer")
    # every trace goes to an index file of its own as soon as it is collected
    trace = parse_trace_flags([f"triton,file={trace_base}", "triton,log-frequency=1"])
    with running_server(repo, trace=trace) as srv:
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
    """The index files written since it was made; each holds one trace tree."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.seen = len(_index_files(base))

    def files(self) -> list[Path]:
        return _index_files(self.base)[self.seen :]

    def trees(self, count: int) -> list[dict[int, dict[str, Any]]]:
        """Per file: trace id -> header and timestamp names (in time order). Waits until
        ``count`` files are there: the response may reach the client before its trace is
        written (with frontend workers the trace ends in another process)."""
        deadline = time.monotonic() + 30
        while len(self.files()) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        out = []
        for path in self.files():
            traces: dict[int, dict[str, Any]] = {}
            for item in json.loads(path.read_text()):
                entry = traces.setdefault(item["id"], {"stamps": []})
                if "timestamps" in item:
                    entry["stamps"].extend(item["timestamps"])
                else:
                    entry["header"] = item
            for entry in traces.values():
                entry["stamps"].sort(key=lambda s: s["ns"])
                entry["names"] = [s["name"] for s in entry["stamps"]]
            out.append(traces)
        return out


def _call(
    client: httpclient.InferenceServerClient, model: str, target: str, mode: int
) -> tuple[np.ndarray[Any, Any], str]:
    values = {
        "INPUT0": np.arange(16, dtype=np.float32).reshape(1, 16),
        "INPUT1": np.ones((1, 16), dtype=np.float32),
        "MODEL": np.array([[target.encode()]], dtype=np.object_),
        "MODE": np.array([[mode]], dtype=np.int32),
    }
    datatypes = {"INPUT0": "FP32", "INPUT1": "FP32", "MODEL": "BYTES", "MODE": "INT32"}
    inputs = []
    for name, array in values.items():
        tensor = httpclient.InferInput(name, list(array.shape), datatypes[name])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, request_id=f"{model}-{target}-{mode}")
    info = result.as_numpy("INFO")
    assert info is not None
    out = result.as_numpy("OUT")
    assert out is not None
    return out, info[0][0].decode()


def _trace_on(client: httpclient.InferenceServerClient, **settings: str) -> None:
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    if settings:
        client.update_trace_settings(settings=settings)


def _root(tree: dict[int, dict[str, Any]]) -> dict[str, Any]:
    (root,) = (e for e in tree.values() if "parent_id" not in e["header"])
    return root


def _children(tree: dict[int, dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    parent_id = parent["header"]["id"]
    return [e for e in tree.values() if e["header"].get("parent_id") == parent_id]


@pytest.mark.parametrize("mode", [1, 2, 3], ids=["exec", "async_exec", "exec_decoupled"])
def test_bls_request_with_the_trace_is_a_child(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path, mode: int
) -> None:
    traces = Traces(trace_base)
    _trace_on(http)
    out, info = _call(http, "bls", "add_sub", mode)
    assert out.tolist() == [[float(i + 1) for i in range(16)]]
    assert info.split("|")[:2] == ["InferenceTrace", "None"]  # triton mode: no context
    (tree,) = traces.trees(1)  # the BLS request is written with its caller, as one trace
    assert len(tree) == 2
    root = _root(tree)
    assert root["header"]["model_name"] == "bls"
    assert root["names"][-1] == "HTTP_SEND_END"
    (child,) = _children(tree, root)
    assert child["header"] == {
        "id": child["header"]["id"],
        "model_name": "add_sub",
        "model_version": 1,
        "parent_id": root["header"]["id"],
    }
    assert child["header"]["id"] > root["header"]["id"]
    assert child["names"] == CHILD_STAMPS
    # the child ran inside its caller's execution
    compute = {s["name"]: s["ns"] for s in root["stamps"]}
    assert compute["COMPUTE_START"] <= child["stamps"][0]["ns"]
    assert child["stamps"][-1]["ns"] <= compute["COMPUTE_END"]


def test_bls_request_without_the_trace_is_not_traced(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    _trace_on(http)
    _call(http, "bls", "add_sub", 0)
    (tree,) = traces.trees(1)
    assert [e["header"]["model_name"] for e in tree.values()] == ["bls"]


def test_bls_request_of_an_untraced_request_is_not_traced(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    # add_sub is traced on its own requests; a BLS request is not sampled
    http.update_trace_settings(
        model_name="add_sub", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    )
    out, info = _call(http, "bls", "add_sub", 1)
    assert out[0][0] == 1.0
    assert info.split("|")[:2] == ["InferenceTrace", "None"]
    _trace_on(http)  # then a traced request: its trace is the first one written
    _call(http, "bls", "add_sub", 0)
    (tree,) = traces.trees(1)
    assert [e["header"]["model_name"] for e in tree.values()] == ["bls"]
    assert next(iter(tree.values()))["header"]["request_id"] == "bls-add_sub-0"


def test_trace_none_is_refused_as_triton_refuses_it(
    server: ServerThread, http: httpclient.InferenceServerClient
) -> None:
    _, info = _call(http, "bls", "add_sub", 0)
    assert info.split("|")[2] == (
        "__init__(): incompatible constructor arguments. The following argument types are "
        "supported:"
    )


def test_nested_bls_and_ensemble_children(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    _trace_on(http)
    out, _ = _call(http, "bls_outer", "bls", 1)  # bls_outer -> bls -> add_sub
    assert out[0][1] == 2.0
    out, _ = _call(http, "bls", "add_sub_ensemble", 1)  # bls -> the ensemble -> its two steps
    assert out[0][1] == 2.0
    nested, ensemble = traces.trees(2)

    outer = _root(nested)
    (middle,) = _children(nested, outer)
    (inner,) = _children(nested, middle)
    assert [e["header"]["model_name"] for e in (outer, middle, inner)] == [
        "bls_outer",
        "bls",
        "add_sub",
    ]
    assert middle["names"] == CHILD_STAMPS
    assert inner["names"] == CHILD_STAMPS

    root = _root(ensemble)
    (step_parent,) = _children(ensemble, root)
    assert step_parent["header"]["model_name"] == "add_sub_ensemble"
    assert step_parent["names"] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    steps = _children(ensemble, step_parent)
    assert sorted(e["header"]["model_name"] for e in steps) == ["add_sub", "add_sub_onnx"]
    assert len(ensemble) == 4


def test_refused_bls_request_leaves_no_child(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    _trace_on(http)
    out, _ = _call(http, "bls", "no_such_model", 1)  # the BLS answer is an error
    assert not out.any()
    _call(http, "bls", "add_sub", 1)
    refused, ran = traces.trees(2)
    assert [e["header"]["model_name"] for e in refused.values()] == ["bls"]
    # the refused request took no trace id: the next trees' ids follow on
    (refused_id,) = refused
    assert sorted(ran) == [refused_id + 1, refused_id + 2]


def test_children_take_nothing_from_rate_and_count(
    server: ServerThread, http: httpclient.InferenceServerClient, trace_base: Path
) -> None:
    traces = Traces(trace_base)
    _trace_on(http, trace_rate="2", trace_count="2")
    # the child model's own setting does not apply to children (it samples its own requests)
    http.update_trace_settings(model_name="add_sub", settings={"trace_level": ["OFF"]})
    for _ in range(6):
        _call(http, "bls", "add_sub", 1)
    assert http.get_trace_settings()["trace_count"] == "0"
    trees = traces.trees(2)
    assert len(trees) == 2  # the 2nd and 4th requests, each with its child
    for tree in trees:
        assert sorted(e["header"]["model_name"] for e in tree.values()) == ["add_sub", "bls"]
