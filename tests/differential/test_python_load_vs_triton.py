"""Python-model loading against real Triton 2.51: a config whose outputs lack dims or a data
type that the model's ``auto_complete_config`` fills in loads, and serves the same config on
both; one that nothing completes is refused on both. A model failing at startup with
``--exit-on-error`` (the default) stops both servers before any port opens, with the model's
error in the server's output."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import tritonclient.grpc as grpcclient

from tests.differential.triton_reference import TritonReference, running_triton
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton

INCOMPLETE = """
name: "incomplete"
backend: "python"
output [
  { name: "OUTPUT0", data_type: TYPE_FP32 },
  { name: "OUTPUT1", dims: [ 4 ] }
]
"""
COMPLETING = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
            config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
            config.add_output({"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]})
            return config

        def execute(self, requests):
            answers = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                outputs = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("OUTPUT1", x)]
                answers.append(pb_utils.InferenceResponse(outputs))
            return answers
""")
UNCOMPLETED = """
name: "uncompleted"
backend: "python"
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32 } ]
"""
PIPELINE = """
name: "pipeline"
platform: "ensemble"
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
ensemble_scheduling {
  step [ {
    model_name: "incomplete"
    model_version: -1
    input_map { key: "INPUT0", value: "IN" }
    output_map { key: "OUTPUT0", value: "OUT" }
  } ]
}
"""
PLAIN = textwrap.dedent("""
    class TritonPythonModel:
        def execute(self, requests):
            return []
""")
INIT_ERROR = textwrap.dedent("""
    class TritonPythonModel:
        def initialize(self, args):
            raise RuntimeError("initialize refused: no_such_resource")

        def execute(self, requests):
            return []
""")


def _model(root: Path, name: str, config: str | None, source: str) -> None:
    (root / name / "1").mkdir(parents=True)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_load") / "models"
    _model(root, "incomplete", INCOMPLETE, COMPLETING)
    _model(root, "uncompleted", UNCOMPLETED, PLAIN)
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(PIPELINE)
    return root


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    workdir = tmp_path_factory.mktemp("triton_python_load")
    flags = ["--exit-on-error=false", "--strict-model-config=false"]
    with running_triton(repository, workdir, flags, ready=("incomplete", "pipeline")) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True) as server:
        yield server.endpoints


def _config(base: str, name: str) -> dict[str, Any]:
    config: dict[str, Any] = requests.get(f"{base}/v2/models/{name}/config", timeout=10).json()
    return config


def _state(base: str, name: str) -> str:
    index = requests.post(f"{base}/v2/repository/index", json={}, timeout=10).json()
    return str(next(e for e in index if e["name"] == name).get("state", ""))


def test_outputs_completed_by_the_model_load_with_the_same_config(
    triton: Endpoints, repokit: Endpoints
) -> None:
    theirs, ours = _config(triton.http, "incomplete"), _config(repokit.http, "incomplete")
    keys = ("input", "output", "max_batch_size", "instance_group", "backend", "name")
    assert {k: ours.get(k) for k in keys} == {k: theirs.get(k) for k in keys}
    assert [o["dims"] for o in ours["output"]] == [[4], [4]]
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
    for base in (triton.http, repokit.http):
        answer = requests.post(f"{base}/v2/models/incomplete/infer", json=body, timeout=30)
        assert answer.status_code == 200, answer.text


def test_an_ensemble_serves_triton_s_config(triton: Endpoints, repokit: Endpoints) -> None:
    """As Triton, with the empty model_transaction_policy it gives every ensemble."""
    configs = [
        grpcclient.InferenceServerClient(e.grpc).get_model_config("pipeline").config
        for e in (triton, repokit)
    ]
    assert configs[1] == configs[0]
    assert configs[1].HasField("model_transaction_policy")
    assert (
        _config(repokit.http, "pipeline")["model_transaction_policy"]
        == (_config(triton.http, "pipeline")["model_transaction_policy"])
    )


def test_outputs_nothing_completes_are_refused(triton: Endpoints, repokit: Endpoints) -> None:
    assert _state(triton.http, "uncompleted") == "UNAVAILABLE"
    assert _state(repokit.http, "uncompleted") == "UNAVAILABLE"


def _held_ports(count: int) -> list[socket.socket]:
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
    return held


def test_a_model_failing_at_startup_stops_the_server_before_it_opens_a_port(
    tmp_path: Path,
) -> None:
    root = tmp_path / "models"
    _model(root, "init_error", None, INIT_ERROR)
    (root / "init_error" / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n')
    triton = TritonReference(root, tmp_path / "triton")
    with pytest.raises(RuntimeError, match="exited while waiting"):
        triton.start()
    triton.stop()
    assert "initialize refused: no_such_resource" in triton.log_path.read_text()
    # repokit, on ports that are taken: binding any of them would fail with its own error
    held = _held_ports(3)
    try:
        ports = [str(s.getsockname()[1]) for s in held]
        result = subprocess.run(
            [sys.executable, "-m", "repokit", "serve", str(root), "--http-port", ports[0],
             "--grpc-port", ports[1], "--metrics-port", ports[2]],
            capture_output=True, text=True, timeout=120, env={"COLUMNS": "200", "PATH": ""},
        )  # fmt: skip
    finally:
        for sock in held:
            sock.close()
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "initialize refused: no_such_resource" in output
    assert "failed to load all models" in output
    assert "Started" not in output and "Errno" not in output
