"""The wire lane (repokit.core.wire_lane) through tritonclient.grpc and over HTTP against a
real server on port 0: plain ModelInfer requests and plain JSON infer bodies for python models
go to the instance process as their bytes, and their answers (outputs, errors, statistics) are
those of the standard path; requests the lane does not take, and models it does not serve, get
the standard path's answers.

A gRPC client cancelling a lane request cancels it at the instance: covered by
tests/e2e/test_python_cancellation.py (its ``slow`` model's requests take the lane).
"""

from __future__ import annotations

import http.client
import json
import queue
import textwrap
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.backends.base import BackendResult
from repokit.core import service as service_module
from repokit.core.dispatch import submit_wire
from repokit.frontends.runner import ServerHandle
from repokit.scheduler.default import DefaultScheduler
from tests.frontends.grpc.serving import make_repository, running_server

_wire_ended = DefaultScheduler.wire_ended

_PICKY_CONFIG = """
name: "picky"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [
  { name: "Y" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# errors for negative inputs, a BYTES output (which the instance cannot encode) when X[0] is 7
_PICKY_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            outputs = [pb_utils.Tensor("Y", x * 2)]
            if x[0, 0] == 7:
                text = np.array([[b"seven"]] * len(x), dtype=object)
                outputs.append(pb_utils.Tensor("TEXT", text))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


class Server:
    def __init__(self, handle: ServerHandle) -> None:
        self.handle = handle
        self.grpc_url = f"127.0.0.1:{handle.grpc_port}"
        self.http_url = f"127.0.0.1:{handle.http_port}"
        self.outcomes: Counter[str] = Counter()

    async def counted(self, *args: Any) -> Any:
        """The service's wire-lane dispatch (repokit.core.dispatch.submit_wire), counting
        what the instance answered: nothing (the standard path takes the request), the
        encoded response, an error, or a result the server finishes."""
        answer = await submit_wire(*args)
        ran = answer[0]
        self.count(None if ran is None else ran[0].result)
        return answer

    def count(self, result: BackendResult | None) -> None:
        if result is None:
            kind = "full"
        else:
            kind = "body" if result.encoded is not None else "result"
            if result.error is not None:
                kind = "raised"  # an error the instance answered
        self.outcomes[kind] += 1

    def stats(self, model: str) -> dict[str, Any]:
        client = httpclient.InferenceServerClient(self.http_url)
        try:
            stats: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
            return stats
        finally:
            client.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = make_repository(tmp_path_factory.mktemp("wire-lane"))
    (repo / "picky" / "1").mkdir(parents=True)
    (repo / "picky" / "config.pbtxt").write_text(textwrap.dedent(_PICKY_CONFIG))
    (repo / "picky" / "1" / "model.py").write_text(_PICKY_MODEL)
    with running_server(repo, http=True) as handle:
        server = Server(handle)
        service_module.submit_wire = server.counted  # type: ignore[assignment]

        def counted_end(scheduler: DefaultScheduler, ticket: Any, run: Any) -> Any:
            """The end of a lane request driven by callbacks (repokit.core.quick_wire: the
            HTTP frontend's), counted as ``counted`` counts the coroutines' dispatch."""
            server.count(None if run is None else run.result)
            return _wire_ended(scheduler, ticket, run)

        DefaultScheduler.wire_ended = counted_end  # type: ignore[method-assign]
        try:
            yield server
        finally:
            service_module.submit_wire = submit_wire
            DefaultScheduler.wire_ended = _wire_ended  # type: ignore[method-assign]


def _inputs(module: Any, x: np.ndarray, name: str = "X", datatype: str = "INT32") -> list[Any]:
    tensor = module.InferInput(name, list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    return [tensor]


def _add_sub(module: Any, a: np.ndarray) -> list[Any]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, list(a.shape), "FP32")
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    return inputs


def test_models_that_take_the_lane(server: Server) -> None:
    manager = server.handle.service.manager
    lanes = {name: manager.get(name, "").wire_lane is not None for name in
             ("add_sub", "identity", "picky", "batcher", "types", "accumulate")}  # fmt: skip
    # batcher: dynamic batching (tests/e2e/test_wire_lane_batches.py); types: BYTES inputs;
    # accumulate: sequence batching
    assert lanes == {"add_sub": True, "identity": True, "picky": True, "batcher": True,
                     "types": False, "accumulate": False}  # fmt: skip


def test_plain_requests_answer_as_the_full_path(server: Server) -> None:
    a = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    before = server.outcomes["body"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        lane = client.infer(
            "add_sub", _add_sub(grpcclient, a), request_id="wire-1",
            outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
        )  # fmt: skip
        every = client.infer("add_sub", _add_sub(grpcclient, a))
    assert server.outcomes["body"] == before + 2
    full = httpclient.InferenceServerClient(server.http_url).infer(
        "add_sub", _add_sub(httpclient, a), request_id="wire-1",
        outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)],
    )  # fmt: skip
    response = lane.get_response()
    assert (response.model_name, response.model_version, response.id) == (
        "add_sub", "1", "wire-1",
    )  # fmt: skip
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    assert lane.as_numpy("OUTPUT1").tolist() == full.as_numpy("OUTPUT1").tolist()
    assert lane.as_numpy("OUTPUT0") is None
    assert every.as_numpy("OUTPUT0").tolist() == (a + a).tolist()
    assert every.as_numpy("OUTPUT1").tolist() == (a - a).tolist()


def test_lane_requests_are_counted_as_the_full_path_counts_them(server: Server) -> None:
    before = server.stats("picky")
    x = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for _ in range(3):
            assert (
                client.infer("picky", _inputs(grpcclient, x)).as_numpy("Y").tolist()
                == (x * 2).tolist()
            )
    after = server.stats("picky")
    assert after["inference_count"] - before["inference_count"] == 9  # batch 3, three times
    assert after["execution_count"] - before["execution_count"] == 3
    stats, was = after["inference_stats"], before["inference_stats"]
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert stats[key]["count"] - was[key]["count"] == 3, key
    assert stats["compute_infer"]["ns"] > was["compute_infer"]["ns"]
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
    old = {b["batch_size"]: b["compute_infer"]["count"] for b in before["batch_stats"]}
    assert sizes[3] - old.get(3, 0) == 3


def _error(call: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return str(caught.value.status()), str(caught.value.message())


def test_model_errors_are_the_full_paths(server: Server) -> None:
    x = np.array([[-1, 2]], dtype=np.int32)
    before = server.outcomes["raised"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        lane = _error(lambda: client.infer("picky", _inputs(grpcclient, x)))
        # a request parameter takes the standard path
        full = _error(lambda: client.infer("picky", _inputs(grpcclient, x), parameters={"k": 1}))
    assert server.outcomes["raised"] == before + 1
    assert lane == full == ("StatusCode.INVALID_ARGUMENT", "negative input")


def test_outputs_the_instance_cannot_encode_come_back_the_usual_way(server: Server) -> None:
    x = np.array([[7, 1], [7, 2]], dtype=np.int32)
    before = server.outcomes["result"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("picky", _inputs(grpcclient, x))
    assert server.outcomes["result"] == before + 1
    assert result.as_numpy("Y").tolist() == [[14, 2], [14, 4]]
    assert result.as_numpy("TEXT").tolist() == [[b"seven"], [b"seven"]]


@pytest.mark.parametrize(
    ("x", "datatype", "message"),
    [
        (np.zeros((1, 3), np.int32), "INT32", "unexpected shape for input 'X' for model 'picky'"),
        (np.zeros((5, 2), np.int32), "INT32", "inference request batch-size must be <= 4"),
        (np.zeros((1, 2), np.int64), "INT64", "inference input 'X' data-type is 'INT64'"),
    ],
)
def test_requests_the_lane_does_not_take_get_the_full_paths_errors(
    server: Server, x: np.ndarray, datatype: str, message: str
) -> None:
    before = server.outcomes["full"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        status, text = _error(lambda: client.infer("picky", _inputs(grpcclient, x, "X", datatype)))
    assert server.outcomes["full"] == before + 1
    assert status == "StatusCode.INVALID_ARGUMENT"
    assert message in text


def test_bytes_that_are_no_request_get_tritons_answer(server: Server) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as caught:
            call(b"\xff\xff\xff", timeout=10)
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert caught.value.details() == "Unable to parse request"


def test_unknown_model_and_bad_version_are_the_full_paths(server: Server) -> None:
    a = np.zeros((1, 16), np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        unknown = _error(lambda: client.infer("nope", _add_sub(grpcclient, a)))
        version = _error(lambda: client.infer("add_sub", _add_sub(grpcclient, a), "x1"))
    assert unknown == ("StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found")
    assert version[0] == "StatusCode.INVALID_ARGUMENT"
    assert "failed to get model version from specified version string 'x1'" in version[1]


def _post(server: Server, model: str, document: Any) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        connection.request("POST", f"/v2/models/{model}/infer", body=json.dumps(document))
        reply = connection.getresponse()
        return reply.status, reply.getheader("Content-Type") or "", reply.read()
    finally:
        connection.close()


def _add_sub_json(**extra: Any) -> dict[str, Any]:
    data = [0.5 * i - 3 for i in range(32)]
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [2, 16], "data": data}
        for name in ("INPUT0", "INPUT1")
    ]
    return {"id": "json-1", "inputs": inputs, **extra}


def test_json_bodies_answer_byte_for_byte_as_the_full_path(server: Server) -> None:
    before = dict(server.outcomes)
    lane = _post(server, "add_sub", _add_sub_json(outputs=[{"name": "OUTPUT0"}]))
    # empty request parameters: the same request, which the lane leaves to the standard path
    full = _post(server, "add_sub", _add_sub_json(outputs=[{"name": "OUTPUT0"}], parameters={}))
    assert server.outcomes["body"] == before.get("body", 0) + 1
    assert server.outcomes["full"] == before.get("full", 0) + 1
    assert lane == full
    status, content_type, body = lane
    assert (status, content_type) == (200, "application/json")
    document = json.loads(body)
    assert (document["id"], document["model_name"], document["model_version"]) == (
        "json-1", "add_sub", "1",
    )  # fmt: skip
    assert [o["name"] for o in document["outputs"]] == ["OUTPUT0"]
    assert document["outputs"][0]["data"] == [2 * (0.5 * i - 3) for i in range(32)]


def test_json_model_errors_and_packed_outputs_are_the_full_paths(server: Server) -> None:
    negative = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 2], "data": [-1, 2]}]}
    seven = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 2], "data": [7, 2]}]}
    for document in (negative, seven):
        before = dict(server.outcomes)
        lane = _post(server, "picky", document)
        full = _post(server, "picky", {**document, "parameters": {}})
        assert lane == full
        assert server.outcomes != before
    assert _post(server, "picky", negative)[0] == 400
    assert json.loads(_post(server, "picky", negative)[2]) == {"error": "negative input"}
    outputs = json.loads(_post(server, "picky", seven)[2])["outputs"]
    assert outputs == [
        {"name": "Y", "datatype": "INT32", "shape": [1, 2], "data": [14, 4]},
        {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["seven"]},
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]}]},
         "unexpected shape for input 'X' for model 'picky'"),
        ({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]},
         "inference input 'X' data-type is 'FP32'"),
        ({"inputs": [{"name": "X", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]}],
          "id": 5}, "Unable to parse 'id'"),
        ({"inputs": {}}, "Unable to parse 'inputs'"),
    ],
)  # fmt: skip
def test_json_bodies_the_lane_does_not_take_get_the_full_paths_errors(
    server: Server, document: Any, message: str
) -> None:
    before = server.outcomes["full"]
    status, _, body = _post(server, "picky", document)
    assert server.outcomes["full"] == before + 1
    assert status == 400
    assert message in json.loads(body)["error"]


def test_json_lane_statistics(server: Server) -> None:
    before = server.stats("picky")
    document = {
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]}]
    }
    for _ in range(2):
        assert _post(server, "picky", document)[0] == 200
    after = server.stats("picky")
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 2


def test_stream_requests_take_the_lane_and_answer_as_the_full_path(server: Server) -> None:
    """ModelStreamInfer runs each request of a model that is not decoupled as a unary call
    does: plain ones on the lane, the others (and errors) as before; every response carries
    ``triton_final_response``."""
    a = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    x = np.array([[-1, 2]], dtype=np.int32)
    answers: queue.Queue[Any] = queue.Queue()
    before = server.outcomes["body"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer("add_sub", _add_sub(grpcclient, a), request_id="s-1")
        client.async_stream_infer("picky", _inputs(grpcclient, x), request_id="s-2")
        client.async_stream_infer("add_sub", _add_sub(grpcclient, a), parameters={"k": 1})
        got = [answers.get(timeout=60) for _ in range(3)]
        client.stop_stream()
    assert server.outcomes["body"] >= before + 1  # s-1 (the parameter takes the standard path)
    results = {r.get_response().id if r is not None else "error": (r, e) for r, e in got}
    lane, _ = results["s-1"]
    response = lane.get_response()
    assert (response.model_name, response.model_version) == ("add_sub", "1")
    assert response.parameters["triton_final_response"].bool_param is True
    assert lane.as_numpy("OUTPUT0").tolist() == (a + a).tolist()
    full, _ = results[""]
    assert full.as_numpy("OUTPUT1").tolist() == (a - a).tolist()
    _, error = results["error"]
    assert error is not None and "negative input" in str(error.message())
