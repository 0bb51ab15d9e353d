"""An ensemble with a decoupled model in its steps is decoupled, as Triton 2.51 makes it at
load time: each response of the decoupled step goes on through the steps after it and is a
response of the ensemble, streamed over gRPC (qa/L0_decoupled's simple_repeat, sequence_repeat,
fan_repeat, repeat_square and nested_square ensembles)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import ServerThread, running_server

REPEAT = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A response per element of IN (OUT = the element), then the final flag."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for value in values.reshape(-1):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))]
                ))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

DOUBLE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUT = 2 * IN; refuses 13."""

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if int(value.reshape(-1)[0]) == 13:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("13 is unlucky")
                ))
                continue
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", (value * 2).astype(np.int32))]
            ))
        return responses
'''

CONFIGS = {
    "repeat": (
        'backend: "python" max_batch_size: 0\n'
        "model_transaction_policy { decoupled: true }\n"
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    ),
    "double": (
        'backend: "python" max_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    ),
    "repeat_double": (
        'platform: "ensemble" max_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "ensemble_scheduling { step [\n"
        '  { model_name: "repeat" model_version: -1\n'
        '    input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "r" } },\n'
        '  { model_name: "double" model_version: -1\n'
        '    input_map { key: "IN" value: "r" } output_map { key: "OUT" value: "OUT" } }\n'
        "] }\n"
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = tmp_path_factory.mktemp("decoupled_ensembles")
    for name, config in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    (repo / "repeat" / "1" / "model.py").write_text(REPEAT)
    (repo / "double" / "1" / "model.py").write_text(DOUBLE)
    with running_server(Path(repo), allow_grpc=True) as srv:
        yield srv


def _stream(server: ServerThread, values: list[int]) -> list[Any]:
    """The responses (results, or errors) of one request on a gRPC stream, up to its final
    flag."""
    received: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=partial(lambda q, result, error: q.put(error or result), received))
    try:
        tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
        tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
        client.async_stream_infer(
            "repeat_double", [tensor], request_id="r", enable_empty_final_response=True
        )
        found = []
        while True:
            item = received.get(timeout=60)
            found.append(item)
            if isinstance(item, InferenceServerException):
                return found
            if item.get_response().parameters["triton_final_response"].bool_param:
                return found
    finally:
        client.stop_stream()
        client.close()


def test_each_response_of_the_decoupled_step_is_a_response_of_the_ensemble(
    server: ServerThread,
) -> None:
    found = _stream(server, [1, 2, 3])
    outputs = [r.as_numpy("OUT").tolist() for r in found if r.get_response().outputs]
    assert outputs == [[2], [4], [6]]
    assert [r.get_response().id for r in found] == ["r"] * len(found)
    assert not found[-1].get_response().outputs  # the empty final response


def test_no_response_of_the_decoupled_step_is_no_response_of_the_ensemble(
    server: ServerThread,
) -> None:
    found = _stream(server, [])
    assert len(found) == 1 and not found[0].get_response().outputs


def test_a_failing_step_ends_the_stream_with_its_error(server: ServerThread) -> None:
    found = _stream(server, [1, 13, 2])
    assert found[0].as_numpy("OUT").tolist() == [2]
    assert isinstance(found[-1], InferenceServerException)
    assert "in ensemble 'repeat_double'" in found[-1].message()
    assert "13 is unlucky" in found[-1].message()


def test_the_ensemble_is_decoupled(server: ServerThread) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("repeat_double")
    assert config["model_transaction_policy"] == {"decoupled": True}
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("repeat_double", [tensor])
    assert "decoupled" in refused.value.message()
