"""A model some of whose versions fail to load, against real Triton 2.51 (explicit model
control, loads through the repository API over HTTP and gRPC with the real tritonclient):

* the load error: ``load failed for model 'm': `` then ``version N is at UNAVAILABLE state:
  <reason>;`` for each failed version, then one newline; each reason as Triton's status text
  (``Internal: RuntimeError: ...``);
* the versions that did load are unloaded again (UNAVAILABLE, "unloaded"; Triton does so
  after it has answered, so the index is read once no version is UNLOADING), and a second
  load tries (and fails) again;
* the repository index (HTTP and gRPC) lists every version with that state and reason.

Triton joins the versions in the order their loads finish (they load in parallel, so it
varies from run to run): the failed versions are compared as a set.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.differential.triton_reference import running_triton
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
version_policy: {{ all {{ }} }}
"""
FAILING = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("version {version} broke")

    def execute(self, requests):
        return []
"""
WORKING = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""
# model -> which of its versions load
MODELS = {"all_fail": (False, False, False), "two_fail": (True, False, False)}
Row = tuple[str, str, str, str]
SEGMENT = re.compile(r"(?:^|;)(?=version \d+ is at )")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("version_failures") / "models"
    for name, working in MODELS.items():
        (root / name).mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        for version, ok in enumerate(working, start=1):
            (root / name / str(version)).mkdir()
            source = WORKING if ok else FAILING.format(version=version)
            (root / name / str(version) / "model.py").write_text(source)
    return root


FLAGS = ["--model-control-mode=explicit"]


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    workdir = tmp_path_factory.mktemp("triton_version_failures")
    with running_triton(repository, workdir, FLAGS) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True, model_control_mode="explicit") as server:
        yield server.endpoints


def _parts(message: str, model: str) -> tuple[str, frozenset[str]]:
    """The message's frame and the set of its version segments (each ending in ``;``)."""
    head = f"load failed for model '{model}': "
    assert message.startswith(head) and message.endswith(";\n"), message
    body = message[len(head) : -1]
    segments = [s for s in SEGMENT.split(body) if s]
    assert "".join(f"{s};" for s in segments[:-1]) + segments[-1] == body
    return head, frozenset(s.removesuffix(";") for s in segments)


def _http_load(base: str, model: str) -> tuple[int, Any]:
    response = requests.post(f"{base}/v2/repository/models/{model}/load", timeout=120)
    return response.status_code, response.json().get("error")


def _grpc_load(address: str, model: str) -> tuple[str, str]:
    client = grpcclient.InferenceServerClient(address)
    try:
        client.load_model(model, client_timeout=120)
    except InferenceServerException as exc:
        return str(exc.status()), str(exc.message())
    finally:
        client.close()
    return "OK", ""


def _index(endpoints: Endpoints) -> tuple[list[Row], list[Row]]:
    """The repository index as HTTP and as gRPC give it (two reads, one after the other)."""
    response = requests.post(f"{endpoints.http}/v2/repository/index", json={}, timeout=30)
    http = sorted(
        (e["name"], e.get("version", ""), e.get("state", ""), e.get("reason", ""))
        for e in response.json()
    )
    client = grpcclient.InferenceServerClient(endpoints.grpc)
    try:
        index = client.get_model_repository_index()
    finally:
        client.close()
    return http, sorted((m.name, m.version, m.state, m.reason) for m in index.models)


def _settled_rows(endpoints: Endpoints, model: str) -> list[Row]:
    """The model's index rows once no version is UNLOADING (Triton unloads the versions of an
    aborted load after it has answered). Both protocols must then list the same rows; while a
    version is still UNLOADING an unload may finish between the HTTP and the gRPC read."""
    deadline = time.monotonic() + 60
    while True:
        http, grpc_rows = ([row for row in rows if row[0] == model] for rows in _index(endpoints))
        settled = all(row[2] != "UNLOADING" for row in http + grpc_rows)
        if settled or time.monotonic() > deadline:
            assert http == grpc_rows
            return http
        time.sleep(0.1)


@pytest.mark.parametrize("model", list(MODELS))
def test_load_errors_and_index(triton: Endpoints, repokit: Endpoints, model: str) -> None:
    answers = []
    for endpoints in (triton, repokit):
        status, message = _http_load(endpoints.http, model)
        assert status == 400
        # a second load, over gRPC, tries every version again (none stayed loaded)
        code, grpc_message = _grpc_load(endpoints.grpc, model)
        assert code == "StatusCode.INVALID_ARGUMENT"
        rows = _settled_rows(endpoints, model)
        answers.append((_parts(message, model), _parts(grpc_message, model), rows))
    assert answers[1] == answers[0]
    (_head, segments), _grpc, rows = answers[1]
    working = MODELS[model]
    assert len(segments) == working.count(False)
    for version, ok in enumerate(working, start=1):
        state, reason = rows[version - 1][2:]
        assert state == "UNAVAILABLE"
        if ok:
            assert reason == "unloaded"
        else:
            assert reason.startswith(f"Internal: RuntimeError: version {version} broke\n")
            assert f"version {version} is at UNAVAILABLE state: {reason}" in segments
