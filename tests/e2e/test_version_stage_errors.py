"""Load errors Triton 2.51 finds when it loads a version (inputs and outputs, label files, ...)
are answered as Triton answers them: 400 ``load failed for model 'm': version 1 is at
UNAVAILABLE state: <status>: <reason>;`` and the repository index shows version 1
UNAVAILABLE with ``<status>: <reason>``. Errors of the config itself, which Triton finds when
it polls the repository, keep the poll failure. A loaded model whose new config fails serves
on as it was (Triton keeps the serving version READY)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import running_server

MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""


def _config(name: str, input_dims: str = "4", extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        f'input [{{ name: "IN" data_type: TYPE_FP32 dims: [ {input_dims} ] }}]\n'
        f'output [{{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ]{extra} }}]\n'
    )


def _model(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(MODEL)
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    _model(repo, "bad_dims", _config("bad_dims", input_dims="0"))
    _model(repo, "no_labels", _config("no_labels", extra=' label_filename: "labels.txt"'))
    _model(
        repo, "bad_batch", _config("bad_batch").replace("max_batch_size: 0", "max_batch_size: -1")
    )
    _model(repo, "good", _config("good"))
    return repo


def _index(client: httpclient.InferenceServerClient) -> dict[str, dict[str, str]]:
    return {entry["name"]: entry for entry in client.get_model_repository_index()}


def test_version_stage_errors_answer_as_triton(repo: Path) -> None:
    with running_server(repo, model_control_mode="explicit", load_models=["good"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            with pytest.raises(InferenceServerException) as error:
                client.load_model("bad_dims")
            assert error.value.status() == "400"
            reason = (
                "Invalid argument: model input 'IN' dimension must be integer >= 1, or -1 to "
                "indicate a variable-size dimension for bad_dims"
            )
            assert error.value.message().startswith(
                f"load failed for model 'bad_dims': version 1 is at UNAVAILABLE state: {reason}"
            )
            entry = _index(client)["bad_dims"]
            assert (entry["version"], entry["state"]) == ("1", "UNAVAILABLE")
            assert entry["reason"].startswith(reason)

            with pytest.raises(InferenceServerException) as error:
                client.load_model("no_labels")
            assert error.value.status() == "400"
            assert (
                "load failed for model 'no_labels': version 1 is at UNAVAILABLE state: "
                "Internal: failed to open text file for read"
            ) in error.value.message()

            # the config itself is wrong: Triton refuses it when it polls the repository
            with pytest.raises(InferenceServerException) as error:
                client.load_model("bad_batch")
            assert "failed to load 'bad_batch', failed to poll from model repository" in (
                error.value.message()
            )
            assert "version" not in _index(client)["bad_batch"]
        finally:
            client.close()


def test_a_loaded_model_whose_new_config_fails_per_version_serves_on(repo: Path) -> None:
    with running_server(
        repo, model_control_mode="explicit", load_models=["good"], allow_grpc=True
    ) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            config = {
                "backend": "python",
                "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-2]}],
                "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
            }
            with pytest.raises(InferenceServerException) as error:
                client.load_model("good", config=json.dumps(config))
            assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert error.value.message().startswith(
                "load failed for model 'good': version 1 is at UNAVAILABLE state: Invalid "
                "argument: model input 'IN' dimension must be integer >= 1"
            )
            assert client.is_model_ready("good")  # the loaded version serves on
            assert client.get_model_config("good").config.input[0].dims == [4]
        finally:
            client.close()


ENSEMBLE_NO_STEPS = """name: "ens"
platform: "ensemble"
max_batch_size: 0
input [{ name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { }
"""

ENSEMBLE_UNUSED_TENSOR = """name: "ens_unused"
platform: "ensemble"
max_batch_size: 0
input [{ name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { step [
  { model_name: "good" model_version: -1
    input_map { key: "IN" value: "E_IN" } output_map { key: "OUT" value: "E_OUT" } },
  { model_name: "good" model_version: -1
    input_map { key: "IN" value: "E_IN" } output_map { key: "OUT" value: "EXTRA" } }
] }
"""


def test_an_ensemble_triton_refuses_at_poll_does_not_load(repo: Path) -> None:
    """Triton's ValidateEnsembleSchedulingConfig (steps, maps, the data flow) refuses these
    when it polls; before, repokit served them (only validate checked them)."""
    for name, config in (("ens", ENSEMBLE_NO_STEPS), ("ens_unused", ENSEMBLE_UNUSED_TENSOR)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    with running_server(repo, model_control_mode="explicit", load_models=["good"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            for name, reason in (
                ("ens", "must specify 'step' for ensemble 'ens'"),
                ("ens_unused", "ensemble tensor 'EXTRA' is unused in ensemble 'ens_unused'"),
            ):
                with pytest.raises(InferenceServerException) as error:
                    client.load_model(name)
                assert error.value.message().startswith(
                    f"failed to load '{name}', failed to poll from model repository: {reason}"
                )
                assert not client.is_model_ready(name)
        finally:
            client.close()
