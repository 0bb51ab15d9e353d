"""Python-backend parity against real Triton 2.51: the same python models (``python_parity_models``
without the onnx ones) served from one repository by both, the same requests sent to both.

Compared exactly: outputs, status codes, error texts, response parameters, the completed config
of an auto-completing model, load-failure reasons, decoupled streams (responses, final flags,
empty final responses) and the custom metric lines after the same request sequence.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tests.differential.triton_reference import running_triton
from tests.e2e.python_parity_models import build_parity_repository
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_parity_repository(tmp_path_factory.mktemp("parity_diff") / "models", onnx=False)


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    models = ("features", "bls", "bls_async", "bls_stream", "repeat", "auto")
    workdir = tmp_path_factory.mktemp("triton_parity")
    with running_triton(repository, workdir, ["--exit-on-error=false"], ready=models) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True) as srv:
        yield srv.endpoints


def _post(base: str, model: str, inputs: list[dict[str, Any]], **params: Any) -> Any:
    body: dict[str, Any] = {"inputs": inputs}
    if params:
        body["parameters"] = params
    response = requests.post(f"{base}/v2/models/{model}/infer", json=body, timeout=60)
    doc = response.json()
    doc.pop("model_version", None)
    return response.status_code, doc


def _both(triton: Endpoints, repokit: Endpoints, *args: Any, **kwargs: Any) -> Any:
    theirs = _post(triton.http, *args, **kwargs)
    ours = _post(repokit.http, *args, **kwargs)
    assert ours == theirs
    return ours


F16 = {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))}
F4 = {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}


def _count(n: int) -> list[dict[str, Any]]:
    return [{"name": "COUNT", "shape": [1], "datatype": "INT32", "data": [n]}]


def test_bls_answers(triton: Endpoints, repokit: Endpoints) -> None:
    status, doc = _both(triton, repokit, "bls", [F16], target="add_sub")
    assert status == 200 and doc["outputs"][0]["data"] == [2.0 * i for i in range(16)]
    status, doc = _both(triton, repokit, "bls", [F16], target="missing")
    assert status == 500
    _both(triton, repokit, "bls", [F16], target="repeat")
    status, _ = _both(triton, repokit, "bls_async", [F16])
    assert status == 200
    for n in (0, 1, 3):
        status, doc = _both(triton, repokit, "bls_stream", _count(n))
        assert doc["outputs"][0]["data"] == [*range(n), -1]


# modes "" and "count" answer with response parameters, which Triton 2.51's pb_utils lacks
# (InferenceResponse(parameters=...) came in a later release): compared in the e2e tests only
@pytest.mark.parametrize("mode", ["error", "raise", "wrong_count", "not_a_list"])
def test_features_answers(triton: Endpoints, repokit: Endpoints, mode: str) -> None:
    _both(triton, repokit, "features", [F4], mode=mode, tag="x")


def test_auto_complete_and_load_failures(triton: Endpoints, repokit: Endpoints) -> None:
    configs = []
    for base in (triton.http, repokit.http):
        config = requests.get(f"{base}/v2/models/auto/config", timeout=10).json()
        configs.append({k: config[k] for k in ("input", "output", "max_batch_size")})
        configs[-1]["dynamic_batching"] = "dynamic_batching" in config
    assert configs[0] == configs[1]
    _both(
        triton,
        repokit,
        "auto",
        [{"name": "X", "shape": [1, 2], "datatype": "INT64", "data": [1, 2]}],
    )
    _both(
        triton,
        repokit,
        "auto",
        [{"name": "X", "shape": [1, 3], "datatype": "INT64", "data": [1, 2, 3]}],
    )
    # both prefix a backend's load failure with its code's name ("Internal: ")
    reasons = []
    for base in (triton.http, repokit.http):
        index = requests.post(f"{base}/v2/repository/index", json={}, timeout=10).json()
        found = {e["name"]: e for e in index}
        reasons.append(
            {
                name: (
                    found[name]["state"],
                    found[name]["reason"].split("\n")[0],
                )
                for name in ("init_fail", "auto_conflict")
            }
        )
    assert reasons[0] == reasons[1]


def _stream(address: str, count: int, **kwargs: Any) -> list[Any]:
    client = grpcclient.InferenceServerClient(address)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    item = grpcclient.InferInput("COUNT", [1], "INT32")
    item.set_data_from_numpy(np.array([count], dtype=np.int32))
    got: list[Any] = []
    try:
        client.async_stream_infer("repeat", [item], request_id="r", **kwargs)
        while True:
            try:
                result, error = results.get(timeout=3 if not kwargs else 30)
            except queue.Empty:
                break
            if error is not None:
                got.append(("error", error.message()))
                break
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            out = result.as_numpy("OUT")
            got.append((response.id, None if out is None else out.tolist(), final))
            if final:
                break
    finally:
        client.stop_stream()
    return got


@pytest.mark.parametrize(
    ("count", "options"),
    [
        (2, {}),
        (0, {"enable_empty_final_response": True}),
        (2, {"enable_empty_final_response": True}),
        (2, {"enable_empty_final_response": True, "parameters": {"final_with_last": True}}),
        (1, {"parameters": {"fail": True}}),
    ],
)
def test_decoupled_streams(
    triton: Endpoints, repokit: Endpoints, count: int, options: dict[str, Any]
) -> None:
    assert _stream(repokit.grpc, count, **options) == _stream(triton.grpc, count, **options)


def test_decoupled_refused_over_http(triton: Endpoints, repokit: Endpoints) -> None:
    status, _ = _both(triton, repokit, "repeat", _count(1))
    assert status == 501


def test_custom_metric_lines(triton: Endpoints, repokit: Endpoints) -> None:
    for base in (triton.http, repokit.http):
        for value in (1.0, 50.0, 500.0):
            doc = {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [value] * 4}
            _post(base, "features", [doc], tag="m")
    lines = []
    for base in (triton.metrics, repokit.metrics):
        text = requests.get(f"{base}/metrics", timeout=10).text
        lines.append(
            sorted(
                line
                for line in text.splitlines()
                if "parity_sizes" in line or "parity_last_sum" in line or "TYPE parity" in line
            )
        )
    assert lines[0] == lines[1]
