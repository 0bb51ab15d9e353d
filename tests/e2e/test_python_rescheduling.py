"""Request rescheduling of python models on a real server (port 0), through tritonclient:
``request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`` in ``execute`` puts the
request back into its iterative sequence (models in ``python_reschedule_models``).

Checked: a decoupled countdown streams one response per execution over gRPC (auto-generated
sequence ids, or the client's id with START); a non-decoupled one answers once, after its last
execution, over gRPC, gRPC streaming and HTTP (concurrent requests each get their own
sequence); the statistics count every execution; a model that is not an iterative sequence gets
Triton's error (Triton 2.51 only logs it and never answers); a rescheduled request with a
response in the list fails the batch with Triton's text; a request rescheduled after its final
response is complete and does not run again (Triton 2.51 crashes).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.backends.python.results import NOT_ITERATIVE
from tests.e2e.python_reschedule_models import build_reschedule_repository
from tests.frontends.http.server_thread import ServerThread, running_server
from tests.settle import settled

WRONG_RETURN = (
    "Failed to process the request(s) for model 'wrong_return_0', message: Expected a None "
    "object in the execute function return list for reschduled request, found type"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_reschedule_repository(tmp_path_factory.mktemp("reschedule") / "models")
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _grpc_url(server: ServerThread) -> str:
    return server.grpc_url


def _grpc_input(value: int) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return tensor


def stream(url: str, model: str, values: list[int], **options: Any) -> dict[str, list[Any]]:
    """Send one request per value on one stream; each request's responses (OUT, final) or
    error texts, by request id, until every request got its final response or an error."""
    events: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        for index, value in enumerate(values):
            client.async_stream_infer(
                model,
                [_grpc_input(value)],
                request_id=str(index),
                enable_empty_final_response=True,
                **options,
            )
        seen: dict[str, list[Any]] = {str(i): [] for i in range(len(values))}
        open_requests = set(seen)
        errors = 0
        while open_requests and errors < len(values):
            result, error = events.get(timeout=60)
            if error is not None:
                errors += 1
                seen.setdefault("errors", []).append(str(error))
                continue
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            out = result.as_numpy("OUT")
            seen[response.id].append((None if out is None else int(out[0]), final))
            if final:
                open_requests.discard(response.id)
        return seen
    finally:
        client.stop_stream()
        client.close()


def _statistics(server: ServerThread, model: str) -> dict[str, Any]:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    doc: dict[str, Any] = requests.get(url, timeout=10).json()["model_stats"][0]
    return doc


# --- decoupled iterative model: one response per execution -------------------------------------
def test_decoupled_countdown_streams_one_response_per_execution(server: ServerThread) -> None:
    url = _grpc_url(server)
    assert stream(url, "countdown", [3]) == {"0": [(2, False), (1, False), (0, True)]}
    assert stream(url, "countdown", [1]) == {"0": [(0, True)]}
    explicit = stream(url, "countdown", [4], sequence_id=77, sequence_start=True)
    assert explicit == {"0": [(3, False), (2, False), (1, False), (0, True)]}


def test_requests_on_one_stream_are_separate_sequences(server: ServerThread) -> None:
    seen = stream(_grpc_url(server), "countdown", [2, 3, 1])
    assert seen == {
        "0": [(1, False), (0, True)],
        "1": [(2, False), (1, False), (0, True)],
        "2": [(0, True)],
    }


def test_a_sequence_id_without_start_is_refused(server: ServerThread) -> None:
    seen = stream(_grpc_url(server), "countdown", [3], sequence_id=9)
    assert seen["0"] == []
    assert "must specify the START flag on the first request of the sequence" in seen["errors"][0]


# --- non-decoupled iterative model: one answer after the last execution ------------------------
def test_plain_countdown_answers_once_over_grpc_stream_and_http(server: ServerThread) -> None:
    url = _grpc_url(server)
    client = grpcclient.InferenceServerClient(url)
    result = client.infer("countdown_plain", [_grpc_input(4)])
    assert result.as_numpy("OUT").tolist() == [4]  # answered after its 4th execution
    client.close()
    assert stream(url, "countdown_plain", [3]) == {"0": [(3, True)]}

    def over_http(value: int) -> int:
        http = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], np.int32))
        try:
            return int(http.infer("countdown_plain", [tensor]).as_numpy("OUT")[0])
        finally:
            http.close()

    with ThreadPoolExecutor(4) as pool:  # concurrent requests: a sequence each
        assert list(pool.map(over_http, [1, 2, 3, 5])) == [1, 2, 3, 5]


def test_statistics_count_every_execution(server: ServerThread) -> None:
    before = _statistics(server, "countdown_plain")
    client = grpcclient.InferenceServerClient(_grpc_url(server))
    assert client.infer("countdown_plain", [_grpc_input(3)]).as_numpy("OUT").tolist() == [3]
    client.close()
    after = _statistics(server, "countdown_plain")
    assert after["inference_count"] - before["inference_count"] == 1
    assert after["execution_count"] - before["execution_count"] == 3
    success = after["inference_stats"]["success"]["count"]
    assert success - before["inference_stats"]["success"]["count"] == 1


# --- errors -------------------------------------------------------------------------------------
def test_rescheduling_without_iterative_sequence_answers_with_the_error(
    server: ServerThread,
) -> None:
    url = _grpc_url(server)
    seen = stream(url, "countdown_not_iterative", [3], sequence_id=5, sequence_start=True)
    assert seen["0"] == [(2, False)]  # the response sent before the release failed
    assert seen["errors"] == [NOT_ITERATIVE]
    client = grpcclient.InferenceServerClient(url)
    with pytest.raises(InferenceServerException, match="not configured to handle such a flag"):
        client.infer("plain_default", [_grpc_input(3)])
    client.close()
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([3], np.int32))
    with pytest.raises(InferenceServerException, match="not configured to handle such a flag"):
        http.infer("plain_default", [tensor])
    http.close()
    # the model keeps serving: its count (left at 1 by the two failed requests, correlation
    # id 0 throughout) ends with the next request, which is answered after its 3rd execution
    client = grpcclient.InferenceServerClient(url)
    assert client.infer("plain_default", [_grpc_input(1)]).as_numpy("OUT").tolist() == [3]
    client.close()


def test_a_response_for_a_rescheduled_request_fails_the_batch(server: ServerThread) -> None:
    client = grpcclient.InferenceServerClient(_grpc_url(server))
    with pytest.raises(InferenceServerException, match="reschduled request") as caught:
        client.infer("wrong_return", [_grpc_input(1)])
    assert WRONG_RETURN in str(caught.value)
    assert "StatusCode.INTERNAL" in str(caught.value)
    client.close()
    doc = requests.post(
        f"http://{server.http_url}/v2/models/wrong_return/infer",
        json={"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]}]},
        timeout=60,
    )
    assert doc.status_code == 500 and WRONG_RETURN in doc.json()["error"]


def test_a_request_rescheduled_after_its_final_response_is_complete(
    server: ServerThread,
) -> None:
    before = _statistics(server, "final_then_reschedule")["execution_count"]
    # two requests on one stream, each its own sequence: had the first run again, that would
    # have happened before the second got the (only) slot
    seen = stream(_grpc_url(server), "final_then_reschedule", [0, 0])
    assert seen == {"0": [(1, True)], "1": [(1, True)]}
    # an execution is counted when execute returns, after the final response it sent
    stats = settled(
        lambda: _statistics(server, "final_then_reschedule"),
        lambda doc: doc["execution_count"] - before >= 2,
    )
    assert stats["execution_count"] - before == 2
    assert requests.get(f"http://{server.http_url}/v2/models/countdown/ready").status_code == 200
