"""``InferenceRequest.exec(decoupled=True)`` / ``async_exec(decoupled=True)`` on a model that is
not decoupled yields its one response and stops, as in Triton (Triton's qa ``bls_memory`` with
BLS_KIND=decoupled calls the non-decoupled ``identity_fp32`` this way). It used to wait forever:
the server waited for streamed responses such a model never sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.frontends.http.server_thread import running_server

CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils


def _values(responses):
    found = []
    for response in responses:
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        found.extend(pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy().tolist())
    return found


class TritonPythonModel:
    async def execute(self, requests):
        answers = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()

            def call():
                return pb_utils.InferenceRequest(
                    model_name="double", inputs=[pb_utils.Tensor("INPUT0", data)],
                    requested_output_names=["OUTPUT0"])

            found = _values(call().exec(decoupled=True))
            found += _values(await call().async_exec(decoupled=True))
            answers.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", np.array(found, dtype=np.float32))]))
        return answers
"""

DOUBLE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", 2 * pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

CONFIGS = {
    "caller": """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
""",
    "double": """
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
""",
}


@pytest.fixture(scope="module")
def grpc_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repo = tmp_path_factory.mktemp("bls_decoupled_call")
    for name, code in (("caller", CALLER), ("double", DOUBLE)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (Path(repo / name) / "config.pbtxt").write_text(f'name: "{name}"\n{CONFIGS[name]}')
    with running_server(repo, allow_grpc=True) as server:
        yield server.grpc_url


def test_a_decoupled_call_to_a_plain_model_yields_its_one_response(grpc_url: str) -> None:
    with grpcclient.InferenceServerClient(grpc_url) as client:
        x = grpcclient.InferInput("X", [2], "FP32")
        x.set_data_from_numpy(np.array([1.5, -2.0], dtype=np.float32))
        result = client.infer("caller", [x], client_timeout=60)
    y = result.as_numpy("Y")
    assert y is not None
    # exec and async_exec: one response each, then the iterator stops
    assert y.tolist() == [3.0, -4.0, 3.0, -4.0]
