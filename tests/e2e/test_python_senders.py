"""Python-backend runtime behaviours on a real server (port 0) through tritonclient's gRPC
stream (models in ``python_sender_models``); the same scenarios run against Triton 2.51 in
tests/differential/test_python_senders_vs_triton.py.

- a non-decoupled model answering through its response sender before, on or after ``execute``
  returns, twice, with a returned response as well, or with only the final flag (an error);
  several requests of one batch each answered a different way; plain and ``async def``;
- a decoupled BLS stream that ends with a bare final flag yields one empty response more;
- ``async def execute`` of a decoupled model: requests (and their BLS calls) run concurrently;
- ``triton_grpc_error: true`` on a stream: a failing request ends the stream with its status;
  without it the error comes in-band and the stream goes on.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.e2e.python_sender_models import MODES, build_sender_repository
from tests.frontends.http.server_thread import running_server

FINAL_ONLY_ERROR = "Non-decoupled model cannot send complete final before sending a response"


@pytest.fixture(scope="module")
def grpc_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repo = build_sender_repository(tmp_path_factory.mktemp("senders") / "models")
    with running_server(repo, allow_grpc=True) as srv:
        yield srv.endpoints.grpc


def _mode_input(mode: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("MODE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[mode]], dtype=np.int32))
    return [tensor]


def _n_input(n: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("N", [1], "INT32")
    tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [tensor]


def stream_answers(
    url: str,
    model: str,
    inputs: list[list[grpcclient.InferInput]],
    expected: int,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> list[tuple[str, Any]]:
    """Send ``inputs`` on one stream; the first ``expected`` callbacks as ("ok", [id, OUT
    values]) or ("error", (status, message)), sorted (completion order varies)."""
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(lambda result, error: received.put((result, error)), headers=headers)
        try:
            for index, tensors in enumerate(inputs):
                client.async_stream_infer(model, tensors, request_id=str(index))
            answers = [received.get(timeout=timeout) for _ in range(expected)]
        finally:
            client.stop_stream()
    return sorted(_describe(result, error) for result, error in answers)


def _describe(result: Any, error: Any) -> tuple[str, Any]:
    if error is not None:
        return "error", (str(error.status()), error.message())
    response = result.get_response()
    names = [output.name for output in response.outputs]
    values = [result.as_numpy(name).reshape(-1).tolist() for name in names]
    return "ok", [response.id, values]


def mode_answer(url: str, model: str, mode: str) -> tuple[str, Any]:
    (answer,) = stream_answers(url, model, [_mode_input(MODES[mode][0])], 1)
    return answer


EXPECTED_VALUES = {
    "returned": 100,
    "sent_before_return": 200,
    "sent_after_return": 300,
    "sent_twice": 400,
    "sent_and_returned": 500,
    "returned_then_sent": 600,
}


@pytest.mark.parametrize("model", ["sender", "sender_async"])
@pytest.mark.parametrize("mode", sorted(EXPECTED_VALUES))
def test_non_decoupled_sender_answers(grpc_url: str, model: str, mode: str) -> None:
    assert mode_answer(grpc_url, model, mode) == ("ok", ["0", [[EXPECTED_VALUES[mode]]]])


@pytest.mark.parametrize("model", ["sender", "sender_async"])
def test_final_flag_without_a_response_fails_the_request(grpc_url: str, model: str) -> None:
    kind, (status, message) = mode_answer(grpc_url, model, "final_only")
    assert (kind, status) == ("error", "None")  # in-band on the stream
    assert FINAL_ONLY_ERROR in message
    assert f"Failed to process the request(s) for model '{model}_0_0'" in message


@pytest.mark.parametrize("model", ["sender", "sender_async"])
def test_one_batch_answered_three_ways(grpc_url: str, model: str) -> None:
    modes = [MODES[m][0] for m in ("returned", "sent_before_return", "sent_after_return")]
    answers = stream_answers(grpc_url, model, [_mode_input(m) for m in modes], 3)
    assert answers == [
        ("ok", ["0", [[100]]]),
        ("ok", ["1", [[200]]]),
        ("ok", ["2", [[300]]]),
    ]


def test_decoupled_bls_stream_counts_a_bare_final_flag(grpc_url: str) -> None:
    with grpcclient.InferenceServerClient(grpc_url) as client:
        for n in (0, 1, 3):
            counts = client.infer("bls_counts", _n_input(n)).as_numpy("COUNTS").tolist()
            # a bare final flag is one empty response more; a flagged last response is not
            assert counts == [n + 1, n or 1]


def test_async_execute_runs_requests_concurrently(grpc_url: str) -> None:
    answers = stream_answers(grpc_url, "async_peak", [_n_input(1) for _ in range(3)], 3)
    peaks = [values[0][0] for kind, (_, values) in answers if kind == "ok"]
    assert len(peaks) == 3
    assert max(peaks) == 3  # all three were in execute (awaiting their BLS calls) at once


def grpc_error_stream(url: str, headers: dict[str, str] | None) -> list[Any]:
    """A request answered, one that fails, then one more on the same stream: the callbacks
    (kind, id or status) and whether the stream still took the third request."""
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    seen: list[Any] = []
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(lambda result, error: received.put((result, error)), headers=headers)
        try:
            for request_id, mode in (("a", 0), ("b", 6)):
                client.async_stream_infer("sender", _mode_input(mode), request_id=request_id)
                kind, detail = _describe(*received.get(timeout=30))
                if kind == "ok":
                    seen.append(("ok", detail[0]))
                else:
                    seen.append(("error", detail[0], FINAL_ONLY_ERROR in detail[1]))
            try:
                client.async_stream_infer("sender", _mode_input(0), request_id="c")
            except InferenceServerException as exc:
                seen.append(("closed", "no longer in valid state" in exc.message()))
            else:
                kind, detail = _describe(*received.get(timeout=30))
                seen.append((kind, detail[0]))
        finally:
            client.stop_stream()
    return seen


def test_triton_grpc_error_ends_the_stream_with_the_status(grpc_url: str) -> None:
    assert grpc_error_stream(grpc_url, {"triton_grpc_error": "true"}) == [
        ("ok", "a"),
        ("error", "StatusCode.INTERNAL", True),
        ("closed", True),
    ]


def refused_then_answered(url: str) -> list[Any]:
    """With ``triton_grpc_error``: a request with an input of the wrong datatype (the core
    refuses it before it runs), then a good one."""
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(
            lambda result, error: received.put((result, error)),
            headers={"triton_grpc_error": "true"},
        )
        try:
            wrong = grpcclient.InferInput("MODE", [1, 1], "FP32")
            wrong.set_data_from_numpy(np.zeros([1, 1], dtype=np.float32))
            client.async_stream_infer("sender", [wrong], request_id="x")
            first = _describe(*received.get(timeout=30))
            client.async_stream_infer("sender", _mode_input(0), request_id="y")
            second = _describe(*received.get(timeout=30))
        finally:
            client.stop_stream()
    return [first[0], first[1][0], second]


def test_triton_grpc_error_keeps_refused_requests_in_band(grpc_url: str) -> None:
    assert refused_then_answered(grpc_url) == ["error", "None", ("ok", ["y", [[100]]])]


def test_without_triton_grpc_error_the_stream_goes_on(grpc_url: str) -> None:
    assert grpc_error_stream(grpc_url, None) == [
        ("ok", "a"),
        ("error", "None", True),
        ("ok", "c"),
    ]
