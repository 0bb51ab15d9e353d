"""pb_utils argument checks against real Triton 2.51: one python model makes the same bad
calls (the cases of Triton's qa argument_validation model and a few more) on both servers and
answers with what each call raised. Exception classes must match; for TritonModelException
and accepted calls the texts too (TypeError texts name Triton's C++ types, so only their
first line's form is compared)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.differential.triton_reference import running_triton
from tests.frontends.http.server_thread import running_server

pytestmark = pytest.mark.triton

CONFIG = """
name: "probe"
backend: "python"
input [{ name: "IN", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "OUT", data_type: TYPE_STRING, dims: [1] }]
"""

MODEL = textwrap.dedent("""
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils


    def attempt(call):
        try:
            call()
            return ["ok", ""]
        except BaseException as exc:
            return [type(exc).__name__, str(exc)]


    class TritonPythonModel:
        def execute(self, requests):
            array = np.asarray([1, 2], dtype=np.int32)
            inputs = [pb_utils.Tensor("INPUT0", array)]
            R = pb_utils.InferenceRequest
            base = {"inputs": inputs, "model_name": "m", "requested_output_names": ["o"]}

            def req(**changes):
                return R(**{**base, **changes})

            cases = {
                "inputs [None]": lambda: req(inputs=[None]),
                "inputs None": lambda: req(inputs=None),
                "inputs str": lambda: req(inputs="abc"),
                "inputs tuple": lambda: req(inputs=tuple(inputs)),
                "model_name None": lambda: req(model_name=None),
                "names [None]": lambda: req(requested_output_names=[None]),
                "names None": lambda: req(requested_output_names=None),
                "names set": lambda: req(requested_output_names={"o"}),
                "correlation_id None": lambda: req(correlation_id=None),
                "correlation_id float": lambda: req(correlation_id=1.5),
                "correlation_id str": lambda: req(correlation_id="id-5"),
                "request_id None": lambda: req(request_id=None),
                "model_version None": lambda: req(model_version=None),
                "flags None": lambda: req(flags=None),
                "timeout None": lambda: req(timeout=None),
                "empty lists": lambda: R(requested_output_names=[], inputs=[], model_name="m"),
                "no arguments": lambda: R(),
                "response [None]": lambda: pb_utils.InferenceResponse(output_tensors=[None]),
                "response None": lambda: pb_utils.InferenceResponse(output_tensors=None),
                "response [1]": lambda: pb_utils.InferenceResponse(output_tensors=[1]),
                "response error str": lambda: pb_utils.InferenceResponse([], error="boom"),
                "response []": lambda: pb_utils.InferenceResponse(output_tensors=[]),
                "tensor name None": lambda: pb_utils.Tensor(None, array),
                "tensor data None": lambda: pb_utils.Tensor("OUTPUT0", None),
                "tensor data list": lambda: pb_utils.Tensor("OUTPUT0", [1, 2]),
                "tensor name int": lambda: pb_utils.Tensor(5, array),
                "tensor empty name": lambda: pb_utils.Tensor("", array),
                "tensor empty name, None": lambda: pb_utils.Tensor("", None),
                "dlpack None": lambda: pb_utils.Tensor.from_dlpack("OUTPUT0", None),
                "dlpack empty name": lambda: pb_utils.Tensor.from_dlpack("", None),
                "dlpack name None": lambda: pb_utils.Tensor.from_dlpack(None, array),
                "log level None": lambda: pb_utils.Logger.log("Invalid Level", None),
                "log level int": lambda: pb_utils.Logger.log("Invalid Level", 1),
                "log_info None": lambda: pb_utils.Logger.log_info(None),
                "log_warn None": lambda: pb_utils.Logger.log_warn(None),
                "log_error None": lambda: pb_utils.Logger.log_error(None),
                "log_verbose None": lambda: pb_utils.Logger.log_verbose(None),
                "log_info int": lambda: pb_utils.Logger.log_info(5),
                "log plain": lambda: pb_utils.Logger.log("Level unspecified"),
                "error message None": lambda: pb_utils.TritonError(None),
                "error code str": lambda: pb_utils.TritonError("x", "y"),
            }
            found = json.dumps({name: attempt(call) for name, call in cases.items()})
            out = pb_utils.Tensor("OUT", np.array([found.encode()], dtype=np.object_))
            return [pb_utils.InferenceResponse([out]) for _ in requests]
""")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pb_arguments") / "models"
    (root / "probe" / "1").mkdir(parents=True)
    (root / "probe" / "config.pbtxt").write_text(CONFIG)
    (root / "probe" / "1" / "model.py").write_text(MODEL)
    return root


def _observed(base: str) -> dict[str, list[str]]:
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1]}]}
    response = requests.post(f"{base}/v2/models/probe/infer", json=body, timeout=60)
    assert response.status_code == 200, response.text
    found: dict[str, list[str]] = json.loads(response.json()["outputs"][0]["data"][0])
    return found


@pytest.fixture(scope="module")
def triton_observed(
    repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[str]]]:
    workdir = tmp_path_factory.mktemp("triton_pb_arguments")
    with running_triton(repository, workdir, ready=("probe",)) as server:
        yield _observed(server.endpoints.http)


@pytest.fixture(scope="module")
def repokit_observed(repository: Path) -> Iterator[dict[str, list[str]]]:
    with running_server(repository, allow_grpc=True) as server:
        yield _observed(server.endpoints.http)


def _form(kind: str, text: str) -> Any:
    if kind == "TypeError":  # "__init__(): incompatible constructor arguments. ..."
        return text.split(" The following")[0]
    return text


def test_every_call_raises_what_triton_raises(
    triton_observed: dict[str, list[str]], repokit_observed: dict[str, list[str]]
) -> None:
    assert set(repokit_observed) == set(triton_observed)
    theirs = {name: (k, _form(k, t)) for name, (k, t) in triton_observed.items()}
    ours = {name: (k, _form(k, t)) for name, (k, t) in repokit_observed.items()}
    assert ours == theirs
    assert theirs["inputs [None]"][0] == "TritonModelException"  # the test sees both kinds
    assert theirs["names None"][0] == "TypeError"
