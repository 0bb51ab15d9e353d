"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: matching headers reach
the model as string request parameters, as tritonserver 2.51 forwards them (Triton's qa
``L0_parameters`` runs the same checks on its own model, see ``tools/triton_qa_suites.py``)."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.frontends.header_forwarding import compile_pattern, forwarding
from tests.frontends.http.server_thread import ServerThread, running_server

# answers the request's parameters as JSON in one BYTES element
ECHO_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("PARAMS", np.array([r.parameters().encode()], dtype=object))]
            )
            for r in requests
        ]
"""

ECHO_CONFIG = """
name: "echo"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

ENSEMBLE_CONFIG = """
name: "echo_ensemble"
platform: "ensemble"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "echo" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" }
  output_map { key: "PARAMS" value: "PARAMS" }
} ] }
"""

# HTTP header names in any case (this server reads them in lower case); gRPC's are lower case
HEADERS = {"my_header_1": "one", "My_Header_2": 'a "quoted" value\\ ', "other": "no"}
GRPC_HEADERS = {name.lower(): value for name, value in HEADERS.items()}
FORWARDED = {"my_header_1": "one", "my_header_2": 'a "quoted" value\\ '}


def _repository(root: Path) -> Path:
    repo = root / "models"
    (repo / "echo" / "1").mkdir(parents=True)
    (repo / "echo" / "1" / "model.py").write_text(ECHO_MODEL)
    (repo / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    (repo / "echo_ensemble" / "1").mkdir(parents=True)
    (repo / "echo_ensemble" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = _repository(tmp_path_factory.mktemp("forward"))
    with running_server(
        repo,
        allow_grpc=True,
        http_header_forward_pattern="MY_HEADER.*",
        grpc_header_forward_pattern="my_header.*",
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = _repository(tmp_path_factory.mktemp("plain"))
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _inputs(module: Any) -> list[Any]:
    given = module.InferInput("INPUT0", [1], "FP32")
    given.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    return [given]


def _params(result: Any) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(result.as_numpy("PARAMS")[0])
    return found


@pytest.mark.parametrize("model", ["echo", "echo_ensemble"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_matching_headers_become_parameters(
    server: ServerThread, protocol: str, model: str
) -> None:
    module = httpclient if protocol == "http" else grpcclient
    headers = HEADERS if protocol == "http" else GRPC_HEADERS
    with server.client(protocol) as client:
        result = client.infer(
            model, _inputs(module), parameters={"key1": "value1", "key2": 2}, headers=headers
        )
    assert _params(result) == {"key1": "value1", "key2": 2, **FORWARDED}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_without_matching_headers_keep_their_parameters(
    server: ServerThread, protocol: str
) -> None:
    module = httpclient if protocol == "http" else grpcclient
    with server.client(protocol) as client:
        result = client.infer("echo", _inputs(module), parameters={"k": "v"}, headers={"x": "y"})
    assert _params(result) == {"k": "v"}


def test_a_streams_headers_go_with_each_request(server: ServerThread) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with server.client("grpc") as client:
        client.start_stream(
            callback=lambda result, error: answers.put(error or result), headers=GRPC_HEADERS
        )
        for value in ("a", "b"):
            client.async_stream_infer("echo", _inputs(grpcclient), parameters={"k": value})
        found = [answers.get(timeout=30) for _ in range(2)]
        client.stop_stream()
    assert [_params(r) for r in found] == [{"k": "a", **FORWARDED}, {"k": "b", **FORWARDED}]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_a_pattern_nothing_is_forwarded(plain_server: ServerThread, protocol: str) -> None:
    module = httpclient if protocol == "http" else grpcclient
    headers = HEADERS if protocol == "http" else GRPC_HEADERS
    with plain_server.client(protocol) as client:
        result = client.infer("echo", _inputs(module), headers=headers)
    assert _params(result) == {}


def test_a_reserved_parameter_name_is_still_refused(server: ServerThread) -> None:
    with server.client("http") as client, pytest.raises(InferenceServerException):
        client.infer("echo", _inputs(httpclient), parameters={"triton_x": 1}, headers=HEADERS)


def test_patterns_match_anywhere_and_ignore_case_unless_told() -> None:
    found = forwarding("HEADER", "http-header-forward-pattern")
    assert found is not None
    assert found.parameters([("my_header", "1"), ("x-Header-y", "2"), ("other", "3")]) == {
        "my_header": "1",
        "x-Header-y": "2",
    }
    sensitive = forwarding("(?-i)MY_HEADER.*", "grpc-header-forward-pattern")
    assert sensitive is not None
    assert sensitive.parameters([("my_header", "1")]) is None
    assert sensitive.parameters([("MY_HEADER_1", "1")]) == {"MY_HEADER_1": "1"}
    assert forwarding("", "http-header-forward-pattern") is None


def test_an_invalid_pattern_names_its_flag() -> None:
    with pytest.raises(ValueError, match="--grpc-header-forward-pattern: invalid regular"):
        compile_pattern("my_(header", "grpc-header-forward-pattern")
