"""The response cache against real Triton 2.51 (its pytriton build ships the local cache): the
same request sequence over HTTP (JSON and binary) and gRPC gets the same answers, the same hit
and miss counts in the statistics of every model (ensembles and their composing models
included), and the same ``nv_cache_*`` metric families; models that cannot use the cache fail
to load with Triton's status and message; a malformed ``--cache-config`` is refused as Triton
refuses it.

Where Triton 2.51 answers wrongly (inputs of the same bytes in another shape, another
requested output, a request whose twin failed) the sequence does not go: those cases are in
tests/core/test_response_cache_service.py, with why in repokit/core/response_cache.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repokit.core.response_cache import CacheSettings
from tests.differential.triton_reference import TritonReference, running_triton
from tests.frontends.http.server_thread import ServerThread, running_server
from tools.triton_reference import Installation

pytestmark = pytest.mark.triton

CACHE_SIZE = 1 << 20
FLAGS = (
    "--model-control-mode=explicit",
    f"--cache-config=local,size={CACHE_SIZE}",
    "--metrics-interval-ms=100",
)
LOADED = ("add_sub", "text", "ident", "ident_cached", "ens_top", "ens_comp", "ens_both")

ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""
IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""
DECOUPLED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            r.get_response_sender().send(pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
CACHE = "response_cache { enable: true }"


def identity(name: str, datatype: str = "TYPE_FP32", extra: str = "") -> str:
    return f"""name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: {datatype} dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: {datatype} dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}
"""


def ensemble(name: str, first: str, second: str, extra: str = "") -> str:
    return f"""name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "{first}" model_version: -1
     input_map {{ key: "IN" value: "X" }} output_map {{ key: "OUT" value: "t" }} }},
  {{ model_name: "{second}" model_version: -1
     input_map {{ key: "IN" value: "t" }} output_map {{ key: "OUT" value: "Y" }} }} ] }}
{extra}
"""


MODELS: dict[str, tuple[str, str]] = {
    "add_sub": (
        """name: "add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { }
response_cache { enable: true }
""",
        ADD_SUB_PY,
    ),
    "text": (identity("text", "TYPE_STRING", CACHE), IDENTITY_PY),
    "ident": (identity("ident"), IDENTITY_PY),
    "ident_cached": (identity("ident_cached", extra=CACHE), IDENTITY_PY),
    "dec": (identity("dec", extra="model_transaction_policy { decoupled: true }"), DECOUPLED_PY),
    "dec_cached": (
        identity("dec_cached", extra="model_transaction_policy { decoupled: true }\n" + CACHE),
        DECOUPLED_PY,
    ),
    "seq_cached": (
        identity("seq_cached", extra="sequence_batching { }\n" + CACHE).replace(
            "max_batch_size: 0", "max_batch_size: 2"
        ),
        IDENTITY_PY,
    ),
    "ens_top": (ensemble("ens_top", "ident", "ident", CACHE), ""),
    "ens_comp": (ensemble("ens_comp", "ident", "ident_cached"), ""),
    "ens_both": (ensemble("ens_both", "ident_cached", "ident", CACHE), ""),
    "ens_dec": (ensemble("ens_dec", "ident", "dec", CACHE), ""),
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("cache_repo")
    for name, (config, source) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        if source:
            (repo / name / "1" / "model.py").write_text(source)
    return repo


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonReference]:
    flags = (*FLAGS, *(f"--load-model={m}" for m in LOADED))
    with running_triton(repository, tmp_path_factory.mktemp("triton"), flags, ready=LOADED) as t:
        yield t


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[ServerThread]:
    with running_server(
        repository,
        model_control_mode="explicit",
        load_models=list(LOADED),
        response_cache=CacheSettings(CACHE_SIZE),
        allow_grpc=True,
    ) as server:
        yield server


def add_sub_inputs(
    values: list[float], client: type[httpclient.InferInput] | type[grpcclient.InferInput]
) -> list[httpclient.InferInput | grpcclient.InferInput]:
    a = np.array([values], dtype=np.float32)
    b = np.ones((1, 4), dtype=np.float32)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = client(name, [1, 4], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def run_sequence(http_url: str, grpc_url: str) -> list[object]:
    """The request sequence; every answer, as plain data."""
    answers: list[object] = []
    http = httpclient.InferenceServerClient(http_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(grpc_url)
    try:
        for values in ([1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4], [5, 6, 7, 8]):
            result = http.infer("add_sub", add_sub_inputs(values, httpclient.InferInput))
            answers.append(result.as_numpy("OUTPUT0").tolist())
        binary = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        binary.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32), binary_data=True)
        second = add_sub_inputs([1, 2, 3, 4], httpclient.InferInput)[1]
        answers.append(http.infer("add_sub", [binary, second]).as_numpy("OUTPUT1").tolist())
        for values in ([1, 2, 3, 4], [9, 9, 9, 9]):
            result = grpc.infer("add_sub", add_sub_inputs(values, grpcclient.InferInput))
            answers.append(result.as_numpy("OUTPUT0").tolist())
        for words in ([b"a", b"bc"], [b"a", b"bc"], [b"ab", b"c"]):
            text = httpclient.InferInput("IN", [2], "BYTES")
            text.set_data_from_numpy(np.array(words, dtype=object))
            answers.append(http.infer("text", [text]).as_numpy("OUT").tolist())
        for model in ("ens_top", "ens_top", "ens_comp", "ens_comp", "ens_both", "ens_both"):
            x = httpclient.InferInput("X", [3], "FP32")
            x.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
            answers.append(http.infer(model, [x]).as_numpy("Y").tolist())
    finally:
        http.close()
        grpc.close()
    return answers


COUNTED = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def statistics(http_url: str, grpc_url: str) -> dict[str, dict[str, int]]:
    """Per model: every count of the statistics extension (HTTP), and the cache counts as
    gRPC reports them."""
    found: dict[str, dict[str, int]] = {}
    stats = requests.get(f"{http_url}/v2/models/stats", timeout=30).json()["model_stats"]
    for entry in stats:
        counts = {k: v["count"] for k, v in entry["inference_stats"].items()}
        counts["inference_count"] = entry["inference_count"]
        counts["execution_count"] = entry["execution_count"]
        assert (entry["inference_stats"]["cache_hit"]["ns"] > 0) == (counts["cache_hit"] > 0)
        assert (entry["inference_stats"]["cache_miss"]["ns"] > 0) == (counts["cache_miss"] > 0)
        found[entry["name"]] = counts
    grpc = grpcclient.InferenceServerClient(grpc_url)
    try:
        for entry in grpc.get_inference_statistics().model_stats:
            found[entry.name]["grpc_cache_hit"] = entry.inference_stats.cache_hit.count
            found[entry.name]["grpc_cache_miss"] = entry.inference_stats.cache_miss.count
    finally:
        grpc.close()
    return found


SAMPLE = re.compile(r"^(nv_cache\w*)(\{[^}]*\})? (\S+)$")


def cache_metrics(metrics_url: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """The nv_cache_* families: name -> (type, help), and sample -> value."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    families: dict[str, list[str]] = {}
    samples: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(("# HELP nv_cache", "# TYPE nv_cache")):
            _, kind, name, rest = line.split(" ", 3)
            families.setdefault(name, ["", ""])[0 if kind == "TYPE" else 1] = rest
        match = SAMPLE.match(line)
        if match:
            samples[match.group(1) + (match.group(2) or "")] = match.group(3)
    return {name: (kind, text) for name, (kind, text) in families.items()}, samples


@pytest.fixture(scope="module")
def outcomes(triton: TritonReference, repokit: ServerThread) -> dict[str, list[object]]:
    """Every answer of the request sequence, per server (Triton's first)."""
    return {
        name: run_sequence(server.endpoints.http, server.endpoints.grpc)
        for name, server in (("triton", triton), ("repokit", repokit))
    }


def test_same_answers(outcomes: dict[str, list[object]]) -> None:
    assert outcomes["repokit"] == outcomes["triton"]


def test_same_hits_misses_and_counts_per_model(
    outcomes: object, triton: TritonReference, repokit: ServerThread
) -> None:
    # Triton counts a composing model's last execution after the ensemble has answered, so
    # its statistics are read again until they agree or a few seconds have passed
    deadline = time.monotonic() + 10
    while True:
        theirs = statistics(triton.endpoints.http, triton.endpoints.grpc)
        ours = statistics(repokit.endpoints.http, repokit.endpoints.grpc)
        if all(ours[m] == theirs[m] for m in LOADED) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for model in LOADED:
        assert ours[model] == theirs[model], model
    assert theirs["add_sub"]["cache_hit"] > 0 and theirs["ens_top"]["cache_hit"] > 0


def test_same_cache_metrics(
    outcomes: object, triton: TritonReference, repokit: ServerThread
) -> None:
    ours_families, ours = cache_metrics(repokit.endpoints.metrics)
    deadline = time.monotonic() + 30  # Triton refreshes its cache gauges every interval
    while True:
        theirs_families, theirs = cache_metrics(triton.endpoints.metrics)
        counted = ("nv_cache_num_entries", "nv_cache_num_hits", "nv_cache_num_lookups")
        if all(theirs.get(k) == ours.get(k) for k in counted) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ours_families == theirs_families
    assert set(ours) == set(theirs)
    for sample, value in theirs.items():
        if "duration" not in sample and sample != "nv_cache_util":
            assert ours[sample] == value, sample


def test_models_that_cannot_use_the_cache_fail_to_load_as_in_triton(
    triton: TritonReference, repokit: ServerThread
) -> None:
    for model in ("dec_cached", "seq_cached", "ens_dec"):
        theirs = triton.load(model)
        response = requests.post(
            f"{repokit.endpoints.http}/v2/repository/models/{model}/load", timeout=60
        )
        assert response.status_code == theirs.status, model
        ours = response.json()["error"].strip()
        # the poll failures: repokit adds the reason Triton only logs
        assert ours == theirs.message or ours.startswith(theirs.message + ": "), model
        if model != "ens_dec":
            assert "Response Cache does not currently support model" in ours


@pytest.mark.parametrize(
    "flag",
    ["--cache-config=local", "--cache-config=local,size", "--cache-config=,size=10"],
)
def test_malformed_cache_config_is_refused_with_tritons_message(
    flag: str, repository: Path, triton_installation: Installation
) -> None:
    empty = repository.parent / "empty_repo"
    empty.mkdir(exist_ok=True)
    triton = subprocess.run(
        [str(triton_installation.binary), f"--model-repository={empty}", flag],
        capture_output=True,
        text=True,
        timeout=60,
        env=triton_installation.environment(),
    )
    ours = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(empty), flag],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert triton.returncode != 0 and ours.returncode != 0
    said = (triton.stdout + triton.stderr).splitlines()
    message = [line for line in said if "Got " in line][-1].strip()
    assert message in re.sub(r"\s+", " ", ours.stderr + ours.stdout)
