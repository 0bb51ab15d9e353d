"""--model-namespacing: several repositories may hold models of the same name (each repository
is a namespace), as Triton 2.51's L0_model_namespacing runs it: a name in one repository is
served as usual, a name in several is refused as ambiguous, and an ensemble runs the steps of
its own repository."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.cli.serve_process import PORT_FLAGS, ServeProcess, write_model

ENSEMBLE = """name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "composing" model_version: -1
  input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }}
}} ] }}
"""


def _repository(root: Path, own: str, body: str) -> Path:
    """A repository with ``composing`` (running ``body``) and two ensembles over it: one
    named ``own`` and one named ``ensemble`` (in both repositories)."""
    repo = root / f"{own}_repo"
    write_model(repo, "composing", body, count=1)
    for name in (own, "ensemble"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(ENSEMBLE.format(name=name))
    return repo


def _infer(client: httpclient.InferenceServerClient, model: str) -> list[float]:
    given = httpclient.InferInput("INPUT0", [2], "FP32")
    given.set_data_from_numpy(np.array([10, 20], np.float32))
    return [float(v) for v in client.infer(model, [given]).as_numpy("OUTPUT0")]


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("namespaces")
    return _repository(root, "add", "y = x + 1"), _repository(root, "sub", "y = x - 1")


@pytest.mark.parametrize("control", [[], ["--model-control-mode=explicit", "--load-model=*"]])
def test_each_repository_is_a_namespace(
    repositories: tuple[Path, Path], control: list[str]
) -> None:
    add, sub = repositories
    server = ServeProcess(
        f"--model-repository={add}",
        f"--model-repository={sub}",
        "--model-namespacing=true",
        *PORT_FLAGS,
        *control,
    )
    try:
        client = httpclient.InferenceServerClient(server.url("HTTPService"))
        assert _infer(client, "add") == [11, 21]  # its step is the composing model beside it
        assert _infer(client, "sub") == [9, 19]
        for name in ("composing", "ensemble"):
            with pytest.raises(InferenceServerException) as refused:
                _infer(client, name)
            assert refused.value.status() == "400"
            assert refused.value.message() == (
                f"There are 2 identifiers of model '{name}' in global map, model namespace must"
                " be provided to resolve ambiguity."
            )
        index = client.get_model_repository_index()
        names = sorted(entry["name"] for entry in index if entry.get("state") == "READY")
        assert names == ["add", "composing", "composing", "ensemble", "ensemble", "sub"]
        metrics = _metrics(server)
    finally:
        server.kill()
    # as Triton: each model's metrics carry its repository as the namespace label
    for repo, model in ((add, "add"), (sub, "sub"), (add, "composing"), (sub, "composing")):
        labels = f'{{model="{model}",namespace="{repo}",version="1"}}'
        assert f"nv_inference_request_success{labels}" in metrics, labels


def _metrics(server: ServeProcess) -> str:
    url = f"http://{server.url('Metrics Service')}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def test_without_namespacing_a_name_in_two_repositories_does_not_load(
    repositories: tuple[Path, Path],
) -> None:
    add, sub = repositories
    server = ServeProcess(
        f"--model-repository={add}",
        f"--model-repository={sub}",
        "--exit-on-error=false",
        "--strict-readiness=false",
        *PORT_FLAGS,
    )
    try:
        client = httpclient.InferenceServerClient(server.url("HTTPService"))
        with pytest.raises(InferenceServerException) as refused:
            _infer(client, "composing")
        assert "composing" in refused.value.message()
        reasons = {e["name"]: e.get("reason", "") for e in client.get_model_repository_index()}
        assert reasons["composing"] == "model appears in two or more repositories"
    finally:
        server.kill()


def test_loading_a_name_loads_it_from_every_repository(repositories: tuple[Path, Path]) -> None:
    """Triton's load of a name several repositories hold loads each of them (with the steps of
    its own repository); unloading the name unloads each."""
    add, sub = repositories
    server = ServeProcess(
        f"--model-repository={add}",
        f"--model-repository={sub}",
        "--model-namespacing=true",
        "--model-control-mode=explicit",
        *PORT_FLAGS,
    )
    try:
        client = httpclient.InferenceServerClient(server.url("HTTPService"))
        client.load_model("ensemble")

        def ready() -> list[str]:
            index = client.get_model_repository_index()
            return sorted(e["name"] for e in index if e.get("state") == "READY")

        assert ready() == ["composing", "composing", "ensemble", "ensemble"]
        with pytest.raises(InferenceServerException, match="2 identifiers of model 'ensemble'"):
            _infer(client, "ensemble")
        client.load_model("add")  # its step is already loaded: the one in its repository
        assert _infer(client, "add") == [11, 21]
        client.unload_model("ensemble")
        assert ready() == ["add", "composing", "composing"]
    finally:
        server.kill()
