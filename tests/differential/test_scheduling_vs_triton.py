"""Scheduling against real Triton 2.51: the same python-backend models (``batcher`` reports the
batch size it ran in, ``accumulate`` keeps a running sum per sequence, ``corrid_*`` return the
CORRID control they were fed, ``py_ensemble`` chains two python models) served by both, the
same requests sent to both over HTTP.

Compared: outputs, status codes and error texts exactly; batch-size distributions by their
structural facts only (every batch within max_batch_size, batching happens under concurrency on
both), since the exact batches depend on arrival timing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.differential.triton_reference import running_triton
from tests.frontends.http.server_thread import copy_models, running_server
from tests.settle import settled

pytestmark = pytest.mark.triton

MODELS = ("batcher", "accumulate")


PLUS_ONE = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)]
            )
            for r in requests
        ]
"""
CORRID_ECHO = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            c = pb_utils.get_input_tensor_by_name(r, "CORRID").as_numpy().astype(np.uint64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("CORRID_OUT", c)]))
        return out
"""
STEP_CONFIG = """
name: "%s" backend: "python" max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ENSEMBLE_CONFIG = """
name: "py_ensemble" platform: "ensemble" max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "step_a" model_version: -1
    input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "mid" } },
  { model_name: "step_b" model_version: -1
    input_map { key: "IN" value: "mid" } output_map { key: "OUT" value: "Y" } } ] }
"""
CORRID_CONFIG = """
name: "corrid_%s" backend: "python" max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] } ]
sequence_batching { control_input [
  { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_%s } ] } ] }
"""
CORRID_TYPES = ("UINT64", "INT64", "UINT32", "INT32")


def _model(repo: Path, name: str, config: str, code: str | None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    if code is not None:
        (repo / name / "1" / "model.py").write_text(code)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_models(tmp_path_factory.mktemp("sched_diff_repo"), MODELS)
    for step in ("step_a", "step_b"):
        _model(repo, step, STEP_CONFIG % step, PLUS_ONE)
    _model(repo, "py_ensemble", ENSEMBLE_CONFIG, None)
    for datatype in CORRID_TYPES:
        name = datatype.lower()
        _model(repo, f"corrid_{name}", CORRID_CONFIG % (name, datatype), CORRID_ECHO)
    return repo


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_triton(repository, tmp_path_factory.mktemp("triton"), ready=()) as server:
        yield server.url


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[str]:
    with running_server(repository) as srv:
        yield f"http://{srv.http_url}"


def _post(base: str, model: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = requests.post(f"{base}/v2/models/{model}/infer", json=body, timeout=30)
    doc: dict[str, Any] = response.json()
    return response.status_code, doc


def _batcher_body(value: float) -> dict[str, Any]:
    return {
        "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [value] * 4}]
    }


def _concurrent_batch_sizes(base: str, count: int) -> list[int]:
    barrier = threading.Barrier(count)
    session_local = threading.local()

    def one(index: int) -> int:
        session = getattr(session_local, "s", None) or requests.Session()
        session_local.s = session
        barrier.wait()
        response = session.post(
            f"{base}/v2/models/batcher/infer", json=_batcher_body(index), timeout=30
        )
        assert response.status_code == 200
        outputs = {o["name"]: o for o in response.json()["outputs"]}
        assert outputs["OUTPUT0"]["data"] == [float(index)] * 4
        return int(outputs["BATCH_SIZE"]["data"][0])

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def _batcher_counts(base: str) -> tuple[int, int, int]:
    """batcher's (inference_count, execution_count, requests in its batch statistics)."""
    stats = requests.get(f"{base}/v2/models/batcher/stats", timeout=10).json()
    entry = stats["model_stats"][0]
    batched = sum(b["batch_size"] * b["compute_infer"]["count"] for b in entry["batch_stats"])
    return int(entry["inference_count"]), int(entry["execution_count"]), batched


def test_dynamic_batches_on_both(triton: str, repokit: str) -> None:
    for base in (triton, repokit):
        before = _batcher_counts(base)[0]
        _concurrent_batch_sizes(base, 8)  # warm the connection pools up
        sizes = [size for _ in range(3) for size in _concurrent_batch_sizes(base, 32)]
        assert all(1 <= size <= 32 for size in sizes), (base, sizes)
        assert max(sizes) > 1, (base, sizes)
        # Triton counts an execution's requests, then the execution, after it has answered
        inferences, executions, batched = settled(
            lambda b=base: _batcher_counts(b),
            lambda c, start=before: c[0] - start == 104 and c[2] == c[0],
        )
        assert inferences - before == 8 + 3 * 32, base
        assert executions < inferences
        assert batched == inferences


def test_single_request_and_sequence_id_on_batcher(triton: str, repokit: str) -> None:
    body = {**_batcher_body(2.5), "parameters": {"sequence_id": 42, "sequence_start": True}}
    assert _post(triton, "batcher", body) == _post(repokit, "batcher", body)


def _acc(value: int, **parameters: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        "parameters": parameters,
    }


def test_sequence_outputs_and_errors_match(triton: str, repokit: str) -> None:
    script: list[tuple[str, dict[str, Any]]] = [
        ("missing start", _acc(1, sequence_id=501)),
        ("missing start with id", {**_acc(1, sequence_id=502), "id": "req-7"}),
        ("no correlation id", _acc(1)),
        ("zero correlation id", _acc(1, sequence_id=0, sequence_start=True)),
        (
            "batch of two",
            {
                "inputs": [{"name": "INPUT", "shape": [2, 1], "datatype": "INT32", "data": [1, 2]}],
                "parameters": {"sequence_id": 503, "sequence_start": True},
            },
        ),
        ("start", _acc(3, sequence_id=504, sequence_start=True)),
        ("middle", _acc(4, sequence_id=504)),
        ("end", _acc(5, sequence_id=504, sequence_end=True)),
        ("after end", _acc(6, sequence_id=504)),
    ]
    for name, body in script:
        assert _post(triton, "accumulate", body) == _post(repokit, "accumulate", body), name


def test_concurrent_sequences_match(triton: str, repokit: str) -> None:
    def run(base: str, corrid: int) -> list[int]:
        sums = []
        with requests.Session() as session:
            for step, value in enumerate((2, 7, 1, 8)):
                body = _acc(
                    value * corrid,
                    sequence_id=corrid,
                    sequence_start=step == 0,
                    sequence_end=step == 3,
                )
                response = session.post(f"{base}/v2/models/accumulate/infer", json=body, timeout=30)
                assert response.status_code == 200, response.text
                sums.append(response.json()["outputs"][0]["data"][0])
        return sums

    results: dict[str, list[list[int]]] = {}
    for base in (triton, repokit):
        with ThreadPoolExecutor(6) as pool:  # 6 sequences on 4 slots
            results[base] = list(pool.map(lambda c, b=base: run(b, c), range(601, 607)))
    assert results[triton] == results[repokit]
    assert results[repokit][0] == [1202, 5409, 6010, 10818]


def _phases(base: str, model: str) -> dict[str, int]:
    entry = requests.get(f"{base}/v2/models/{model}/stats", timeout=10).json()["model_stats"][0]
    stats = entry["inference_stats"]
    return {phase: int(stats[phase]["ns"]) for phase in stats} | {
        "inference_count": int(entry["inference_count"]),
        "execution_count": int(entry["execution_count"]),
    }


Grown = dict[str, dict[str, int]]


def _ensemble_counted(grew: Grown) -> bool:
    steps_ran = all(grew[step]["execution_count"] >= 1 for step in ("step_a", "step_b"))
    return steps_ran and grew["py_ensemble"]["inference_count"] >= 2


def test_ensemble_statistics_are_the_sums_of_the_steps(triton: str, repokit: str) -> None:
    body = {"inputs": [{"name": "X", "shape": [2, 4], "datatype": "FP32", "data": [1.0] * 8}]}
    for base in (triton, repokit):
        before = {m: _phases(base, m) for m in ("py_ensemble", "step_a", "step_b")}
        status, doc = _post(base, "py_ensemble", body)
        assert status == 200 and doc["outputs"][0]["data"] == [3.0] * 8

        def growth(b: str = base, start: dict[str, dict[str, int]] = before) -> Grown:
            after = {m: _phases(b, m) for m in start}
            return {m: {k: after[m][k] - start[m][k] for k in after[m]} for m in start}

        # Triton counts a step's execution (into the ensemble's phases too), and the ensemble
        # request, after the ensemble has answered: read until all three have counted
        grew = settled(growth, _ensemble_counted)
        ens = grew["py_ensemble"]
        for phase in ("compute_input", "compute_infer", "compute_output"):
            assert ens[phase] == grew["step_a"][phase] + grew["step_b"][phase], (base, phase)
        assert ens["compute_infer"] > 0
        assert ens["inference_count"] == 2 and ens["execution_count"] == 1, base
        # the ensemble's queue time is its own wait, far less than the whole request
        assert 0 <= ens["queue"] < ens["success"], base


@pytest.mark.parametrize("datatype", CORRID_TYPES)
def test_string_ids_on_integer_corrid_controls(triton: str, repokit: str, datatype: str) -> None:
    model = f"corrid_{datatype.lower()}"
    for corrid in ("abc", "12345", "18446744073709551615", "-5", "héllo"):
        body = {
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
            "parameters": {"sequence_id": corrid, "sequence_start": True, "sequence_end": True},
        }
        assert _post(triton, model, body) == _post(repokit, model, body), (model, corrid)
