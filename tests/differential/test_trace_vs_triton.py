"""Differential: real Triton 2.51 and repokit, started with the same ``--trace-config`` on the
same repository, answer the same trace setting requests (HTTP and gRPC) alike and write the same
traces (headers, timestamp names, tensors) for the same inference requests. Run with
``-m triton``.

Deliberate differences, and how the comparison handles them:
- a setting value of the wrong JSON type: Triton 500, repokit 400 (same message);
- an unknown level name, a negative rate, a number followed by other characters and a body that
  is not a JSON object: Triton ignores, wraps or truncates them (200); repokit refuses them (400)
  (``test_refusals_where_triton_accepts``);
- timestamps are compared by name, not value; the order of the objects in a file is not
  compared (Triton writes them as its threads report them).
"""

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
from google.protobuf import json_format

from repokit.core.tracing.options import parse_trace_flags
from tests.differential.triton_reference import TritonReference, running_triton
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

pytestmark = pytest.mark.triton

ENSEMBLE = """
name: "twice"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [ { name: "SUM2" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "add_sub"
      model_version: -1
      input_map { key: "INPUT0" value: "A" }
      input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" }
      output_map { key: "OUTPUT1" value: "diff" }
    },
    {
      model_name: "add_sub"
      model_version: -1
      input_map { key: "INPUT0" value: "sum" }
      input_map { key: "INPUT1" value: "diff" }
      output_map { key: "OUTPUT0" value: "SUM2" }
    }
  ]
}
"""


# calls the model MODEL names with its inputs (A/B for the ensemble), passing its trace
BLS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()
            target = target.reshape(-1)[0].decode()
            names = ("A", "B") if target == "twice" else ("INPUT0", "INPUT1")
            inputs = [
                pb_utils.Tensor(name, pb_utils.get_input_tensor_by_name(request, given).as_numpy())
                for name, given in zip(names, ("INPUT0", "INPUT1"))
            ]
            output = "SUM2" if target == "twice" else "OUTPUT0"
            answer = pb_utils.InferenceRequest(
                model_name=target, inputs=inputs, requested_output_names=[output],
                trace=request.trace(),
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = answer.output_tensors()[0].as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""
BLS_CONFIG = """
name: "bls"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "MODEL" data_type: TYPE_STRING dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _specs(base: Path) -> list[str]:
    return [
        f"triton,file={base}",
        "triton,log-frequency=1",
        "level=TIMESTAMPS",
        "level=TENSORS",
        "rate=1",
    ]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_models(tmp_path_factory.mktemp("trace_repo"), ("add_sub",))
    (repo / "twice" / "1").mkdir(parents=True)
    (repo / "twice" / "config.pbtxt").write_text(ENSEMBLE)
    (repo / "bls" / "1").mkdir(parents=True)
    (repo / "bls" / "1" / "model.py").write_text(BLS)
    (repo / "bls" / "config.pbtxt").write_text(BLS_CONFIG)
    return repo


@pytest.fixture(scope="module")
def triton_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("triton_traces") / "trace.json"


@pytest.fixture(scope="module")
def repokit_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("repokit_traces") / "trace.json"


@pytest.fixture(scope="module")
def triton(
    repository: Path, triton_base: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonReference]:
    flags = [f"--trace-config={spec}" for spec in _specs(triton_base)]
    with running_triton(repository, tmp_path_factory.mktemp("triton"), flags, ready=()) as srv:
        yield srv


@pytest.fixture(scope="module")
def repokit(repository: Path, repokit_base: Path) -> Iterator[ServerThread]:
    trace = parse_trace_flags(_specs(repokit_base))
    with running_server(repository, allow_grpc=True, trace=trace) as srv:
        yield srv


def _normal(answer: requests.Response) -> tuple[int, Any]:
    body = answer.json()
    if isinstance(body, dict) and "trace_file" in body:
        body["trace_file"] = "<file>"
    return answer.status_code, body


# (method, path, body): run in this order on both servers, every answer compared
SETTING_CASES: list[tuple[str, str, bytes | None]] = [
    ("GET", "/v2/trace/setting", None),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("GET", "/v2/models/nope/trace/setting", None),
    ("POST", "/v2/models/nope/trace/setting", b'{"trace_rate": "3"}'),
    ("POST", "/v2/models/add_sub/trace/setting", b'{"trace_rate": "12", "log_frequency": "34"}'),
    ("POST", "/v2/trace/setting", b'{"trace_rate": "56", "trace_count": "78"}'),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("POST", "/v2/trace/setting", b'{"trace_level": ["OFF"]}'),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("POST", "/v2/trace/setting", b'{"trace_rate": null, "trace_count": null}'),
    ("POST", "/v2/models/add_sub/trace/setting", b'{"trace_rate": null, "trace_level": null}'),
    ("POST", "/v2/models/add_sub/trace/setting", b'{"log_frequency": null}'),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("POST", "/v2/trace/setting", b'{"trace_level": null}'),
    ("POST", "/v2/trace/setting", b'{"trace_level": []}'),
    ("POST", "/v2/trace/setting", b'{"foo": "bar"}'),
    ("POST", "/v2/trace/setting", b'{"trace_file": "x"}'),
    ("POST", "/v2/trace/setting", b'{"trace_file": null}'),
    ("POST", "/v2/trace/setting", b'{"trace_level": ["OFF", "TIMESTAMPS"]}'),
    ("POST", "/v2/trace/setting", b'{"trace_rate": "abc"}'),
    ("POST", "/v2/trace/setting", b'{"trace_rate": "0"}'),
    ("POST", "/v2/trace/setting", b'{"trace_rate": "99999999999"}'),
    ("POST", "/v2/trace/setting", b'{"trace_count": "-2"}'),
    ("POST", "/v2/trace/setting", b'{"trace_count": "99999999999"}'),
    ("POST", "/v2/trace/setting", b'{"log_frequency": "x"}'),
    ("PUT", "/v2/trace/setting", b"{}"),
    ("GET", "/v2/models/add_sub/versions/1/trace/setting", None),
    ("POST", "/v2/trace/setting", b'{"trace_level": ["TIMESTAMPS"], "trace_count": "-1"}'),
    ("GET", "/v2/trace/setting", None),
]
# Triton 500 (a TritonJson type error), repokit 400 with the same message
TYPE_ERRORS: list[bytes] = [
    b'{"trace_level": "TIMESTAMPS"}',
    b'{"trace_level": [1]}',
    b'{"trace_rate": 5}',
]


def _send(base: str, method: str, path: str, body: bytes | None) -> requests.Response:
    return requests.request(method, base + path, data=body, timeout=30)


def test_same_setting_answers(triton: TritonReference, repokit: ServerThread) -> None:
    mismatches = []
    for method, path, body in SETTING_CASES:
        ours = _normal(_send(repokit.endpoints.http, method, path, body))
        theirs = _normal(_send(triton.endpoints.http, method, path, body))
        if ours != theirs:
            mismatches.append(f"{method} {path} {body!r}: triton {theirs}, repokit {ours}")
    assert not mismatches, "\n".join(mismatches)


def test_type_errors_same_message(triton: TritonReference, repokit: ServerThread) -> None:
    for body in TYPE_ERRORS:
        ours = _normal(_send(repokit.endpoints.http, "POST", "/v2/trace/setting", body))
        theirs = _normal(_send(triton.endpoints.http, "POST", "/v2/trace/setting", body))
        assert (theirs[0], ours[0]) == (500, 400)
        assert ours[1] == theirs[1]


def test_same_grpc_answers(triton: TritonReference, repokit: ServerThread) -> None:
    def settings(url: str, model: str = "", **changes: Any) -> Any:
        client = grpcclient.InferenceServerClient(url)
        try:
            if changes:
                answer = client.update_trace_settings(model_name=model or None, settings=changes)
            else:
                answer = client.get_trace_settings(model_name=model or None)
            found = json_format.MessageToDict(answer)["settings"]
            found["trace_file"] = "<file>"
            return found
        except Exception as exc:  # the client's exception: compare status and message
            return (str(getattr(exc, "status", lambda: "")()), str(exc))
        finally:
            client.close()

    steps: list[tuple[str, dict[str, Any]]] = [
        ("", {}),
        ("add_sub", {"trace_count": "5"}),
        ("add_sub", {}),
        ("", {"trace_rate": "9"}),
        ("add_sub", {}),
        ("add_sub", {"trace_count": None}),
        ("", {"trace_rate": None}),
        ("nope", {}),
        ("", {"trace_rate": "x"}),
        ("", {"trace_file": "y"}),
    ]
    for model, changes in steps:
        ours = settings(repokit.endpoints.grpc, model, **changes)
        theirs = settings(triton.endpoints.grpc, model, **changes)
        assert ours == theirs, (model, changes)


def _reset(base: str) -> None:
    for path in ("/v2/trace/setting", "/v2/models/add_sub/trace/setting"):
        body = b'{"trace_level": null, "trace_rate": null, "trace_count": null}'
        assert _send(base, "POST", path, body).status_code == 200


def test_refusals_where_triton_accepts(triton: TritonReference, repokit: ServerThread) -> None:
    try:
        for body in (
            b'{"trace_level": ["LOUD"]}',
            b'{"trace_rate": "-1"}',
            b'{"trace_rate": "12abc"}',
            b"[1]",
        ):
            assert _send(triton.endpoints.http, "POST", "/v2/trace/setting", body).ok
            ours = _send(repokit.endpoints.http, "POST", "/v2/trace/setting", body)
            assert ours.status_code == 400, body
    finally:
        _reset(triton.endpoints.http)
        _reset(repokit.endpoints.http)


# --- the traces ------------------------------------------------------------------------------


def _index_files(base: Path) -> list[Path]:
    found = [p for p in base.parent.glob(base.name + ".*") if p.suffix[1:].isdigit()]
    return sorted(found, key=lambda p: int(p.suffix[1:]))


def _written(files: list[Path]) -> dict[int, str]:
    """The traces whose headers are in ``files``, id: request id (none while one of the files
    is still being written)."""
    found = {}
    for path in files:
        try:
            items = json.loads(path.read_text())
        except ValueError:
            return {}
        found |= {i["id"]: str(i.get("request_id", "")) for i in items if "model_name" in i}
    return found


def _wait_for_traces(
    base: Path, skip: int, count: int, last: str | None = None, timeout: float = 30.0
) -> None:
    """Wait until the files after the first ``skip`` hold ``count`` traces (the one of the
    request id ``last``, sent last, among them): a server writes a trace when it releases it,
    several traces to one file at times."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = _written(_index_files(base)[skip:])
        if len(written) >= count and (last is None or last in written.values()):
            return
        time.sleep(0.05)


def _summary(files: list[Path]) -> list[dict[str, Any]]:
    """Each trace as its header (ids replaced by whether it has a parent), its timestamp
    names in time order, its tensors; sorted so that the file order does not matter."""
    traces: dict[int, dict[str, Any]] = {}
    for path in files:
        for item in json.loads(path.read_text()):
            entry = traces.setdefault(item["id"], {"stamps": [], "tensors": []})
            if "timestamps" in item:
                entry["stamps"].extend(item["timestamps"])
            elif "tensor" in item:
                entry["tensors"].append((item["activity"], json.dumps(item["tensor"])))
            else:
                header = dict(item)
                header.pop("id")
                header["parent_id"] = "parent_id" in header
                entry["header"] = header
    out = []
    for entry in traces.values():
        out.append(
            {
                "header": entry["header"],
                "stamps": sorted(s["name"] for s in entry["stamps"]),
                "tensors": sorted(entry["tensors"]),
            }
        )
    return sorted(out, key=json.dumps)


def _requests(http_base: str, grpc_url: str) -> None:
    data = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))}
    half = {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}
    body = {"id": "one", "inputs": [data, half]}
    assert requests.post(f"{http_base}/v2/models/add_sub/infer", json=body, timeout=60).ok
    ens = {
        "id": "ens",
        "inputs": [{**data, "name": "A"}, {**half, "name": "B"}],
    }
    assert requests.post(f"{http_base}/v2/models/twice/infer", json=ens, timeout=60).ok
    refused = {"inputs": []}  # no trace: it never reaches the model
    assert (
        requests.post(f"{http_base}/v2/models/add_sub/infer", json=refused, timeout=60).status_code
        == 400
    )
    client = grpcclient.InferenceServerClient(grpc_url)
    inputs = []
    for name, values in (("INPUT0", np.arange(16)), ("INPUT1", np.full(16, 0.5))):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(values.astype(np.float32).reshape(1, 16))
        inputs.append(tensor)
    client.infer("add_sub", inputs, request_id="over-grpc")
    client.close()


def test_same_traces(
    triton: TritonReference, repokit: ServerThread, triton_base: Path, repokit_base: Path
) -> None:
    _reset(triton.endpoints.http)
    _reset(repokit.endpoints.http)
    seen = (len(_index_files(triton_base)), len(_index_files(repokit_base)))
    _requests(triton.endpoints.http, triton.endpoints.grpc)
    _requests(repokit.endpoints.http, repokit.endpoints.grpc)
    _wait_for_traces(triton_base, seen[0], 5, "over-grpc")
    _wait_for_traces(repokit_base, seen[1], 5, "over-grpc")
    theirs = _summary(_index_files(triton_base)[seen[0] :])
    ours = _summary(_index_files(repokit_base)[seen[1] :])
    assert len(theirs) == 5  # add_sub, the ensemble and its two steps, gRPC add_sub
    diffs = [
        f"{t['header']}: triton {t['stamps']} {t['tensors']}\nrepokit {o['stamps']} {o['tensors']}"
        for t, o in zip(theirs, ours, strict=False)
        if t != o
    ]
    assert ours == theirs, "\n".join(diffs)


def _bls_requests(http_base: str) -> None:
    for target in ("add_sub", "twice"):
        body = {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16},
                {"name": "MODEL", "datatype": "BYTES", "shape": [1, 1], "data": [target]},
            ]
        }
        answer = requests.post(f"{http_base}/v2/models/bls/infer", json=body, timeout=60)
        assert answer.ok, answer.text


def test_same_bls_traces(
    triton: TritonReference, repokit: ServerThread, triton_base: Path, repokit_base: Path
) -> None:
    """A BLS request made with ``trace=request.trace()``: the called model (and an ensemble's
    steps under it) traced as children, with the same timestamps and tensors."""
    _reset(triton.endpoints.http)
    _reset(repokit.endpoints.http)
    seen = (len(_index_files(triton_base)), len(_index_files(repokit_base)))
    _bls_requests(triton.endpoints.http)
    _bls_requests(repokit.endpoints.http)
    _wait_for_traces(triton_base, seen[0], 6)
    _wait_for_traces(repokit_base, seen[1], 6)
    theirs = _summary(_index_files(triton_base)[seen[0] :])
    ours = _summary(_index_files(repokit_base)[seen[1] :])
    # bls -> add_sub; bls -> twice -> add_sub twice
    assert len(theirs) == 6
    assert sum(t["header"]["parent_id"] for t in theirs) == 4
    diffs = [
        f"{t['header']}: triton {t['stamps']} {t['tensors']}\nrepokit {o['stamps']} {o['tensors']}"
        for t, o in zip(theirs, ours, strict=False)
        if t != o
    ]
    assert ours == theirs, "\n".join(diffs)
