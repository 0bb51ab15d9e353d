"""A dynamic batch that fails outside the model's execution (joining or splitting the batch)
answers its requests INTERNAL and the model goes on serving: a real server (port 0) with the
onnxruntime backend (batches joined into one tensor and split back) and the python backend
(batches handed to the instance early), tritonclient over HTTP and gRPC.

The fault is injected into the scheduler for the batch that holds the request with the id
``FAULT``; before the guard, the worker (or the batch's task) died silently and every later
request of the model hung (with preserve_ordering, the ones released after it too).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.backends.base import BackendRequest, WireEntry
from repokit.paths import default_sample_repository
from repokit.scheduler import dynamic_driver
from tests.frontends.http.server_thread import ServerThread, running_server

FAULT = "FAULT"
WAIT_S = 20  # far beyond any answer: a hung request fails the test
pytestmark = pytest.mark.timeout(120)


def _onnx_model(repo: Path, name: str, batching: str, instances: int) -> None:
    shutil.copytree(default_sample_repository() / "add_sub_onnx", repo / name)
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace('name: "add_sub_onnx"', f'name: "{name}"')
    text = re.sub(r"dynamic_batching \{[^}]*\}", batching, text)
    text = text.replace("count: 1", f"count: {instances}")
    config.write_text(text)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = tmp_path_factory.mktemp("faults") / "models"
    repo.mkdir()
    _onnx_model(repo, "plain", "dynamic_batching { }", 1)
    # batches wait for each other (8 ms of delay) and two instances run them side by side
    _onnx_model(
        repo,
        "ordered",
        "dynamic_batching { preserve_ordering: true max_queue_delay_microseconds: 8000 }",
        2,
    )
    shutil.copytree(default_sample_repository() / "batcher", repo / "batcher")
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _has_fault(requests: Sequence[BackendRequest | WireEntry]) -> bool:
    for request in requests:
        if isinstance(request, WireEntry):
            if FAULT.encode() in request.request.raw:
                return True
        elif request.request_id == FAULT:
            return True
    return False


class Injected:
    """Records the values of the requests of the batches it failed."""

    def __init__(self) -> None:
        self.failed: list[float] = []

    def fail_if_marked(self, requests: Sequence[Any]) -> None:
        if _has_fault(requests):
            for request in requests:
                if isinstance(request, BackendRequest):
                    self.failed.append(float(np.asarray(request.inputs["INPUT0"].data).flat[0]))
            raise RuntimeError("injected fault")


@pytest.fixture
def injected_split(monkeypatch: pytest.MonkeyPatch) -> Injected:
    """split_result raises for the batch with the FAULT request (the onnx models)."""
    injected = Injected()
    real = dynamic_driver.split_result

    def split(result: Any, requests: Any, sizes: Any, rules: Any) -> Any:
        injected.fail_if_marked(requests)
        return real(result, requests, sizes, rules)

    monkeypatch.setattr(dynamic_driver, "split_result", split)
    return injected


@pytest.fixture
def injected_execute(monkeypatch: pytest.MonkeyPatch) -> Injected:
    """The batch with the FAULT request raises before it reaches the backend (the python
    model, whose batches go early to a busy instance)."""
    injected = Injected()
    real = dynamic_driver.execute_batch

    async def execute(backend: Any, instance: int, requests: Any, *args: Any) -> Any:
        injected.fail_if_marked(requests)
        return await real(backend, instance, requests, *args)

    monkeypatch.setattr(dynamic_driver, "execute_batch", execute)
    return injected


def _onnx_infer(protocol: str, server: ServerThread, model: str, value: float, rid: str) -> Any:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = server.client(protocol)
    a = np.full((1, 16), value, dtype=np.float32)
    inputs = [
        module.InferInput("INPUT0", [1, 16], "FP32"),
        module.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    try:
        result = client.infer(model, inputs, request_id=rid)
        return result.as_numpy("OUTPUT0")
    finally:
        client.close()


def _in_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls at once; each one's result or the InferenceServerException it raised.
    A call not answered within WAIT_S fails the test (its thread is left to the server's
    stop)."""
    pool = ThreadPoolExecutor(len(calls))
    try:
        futures = [pool.submit(call) for call in calls]
        out: list[Any] = []
        for index, future in enumerate(futures):
            try:
                out.append(future.result(timeout=WAIT_S))
            except InferenceServerException as exc:
                out.append(exc)
            except TimeoutError:
                raise AssertionError(f"request {index} not answered in {WAIT_S} s") from None
        return out
    finally:
        pool.shutdown(wait=False)


def _assert_injected_error(answer: Any, model: str) -> None:
    assert isinstance(answer, InferenceServerException), answer
    message = str(answer)
    assert "injected fault" in message and "failed outside the model's execution" in message
    assert f"model '{model}'" in message
    assert "INTERNAL" in str(answer.status()) or answer.status() == "500", answer.status()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_failed_join_or_split_fails_its_batch_and_the_model_serves_on(
    server: ServerThread, injected_split: Injected, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    (answer,) = _in_threads([lambda: _onnx_infer(protocol, server, "plain", 5.0, FAULT)])
    _assert_injected_error(answer, "plain")
    (logged,) = [r for r in caplog.records if "outside the model's execution" in r.getMessage()]
    assert logged.levelname == "ERROR" and logged.exc_info is not None  # the traceback
    assert str(logged.exc_info[1]) == "injected fault"
    for value in (1.0, 2.0, 3.0):
        out = _onnx_infer(protocol, server, "plain", value, "after")
        np.testing.assert_array_equal(out, np.full((1, 16), value + 1, dtype=np.float32))


def test_preserve_ordering_releases_the_batches_after_a_failed_one(
    server: ServerThread, injected_split: Injected
) -> None:
    values = [float(v) for v in range(1, 13)]
    calls: list[Callable[[], Any]] = [
        lambda: _onnx_infer("grpc", server, "ordered", 100.0, FAULT),
        *[
            (lambda v=v: _onnx_infer("grpc", server, "ordered", v, f"r{v}"))  # type: ignore[misc]
            for v in values
        ],
    ]
    answers = _in_threads(calls)
    _assert_injected_error(answers[0], "ordered")
    assert 100.0 in injected_split.failed
    for value, answer in zip(values, answers[1:], strict=True):
        if value in injected_split.failed:  # it shared the failed batch
            _assert_injected_error(answer, "ordered")
        else:
            np.testing.assert_array_equal(answer, np.full((1, 16), value + 1, dtype=np.float32))
    assert len(injected_split.failed) < len(calls)  # some batches were not the failed one
    out = _onnx_infer("http", server, "ordered", 7.0, "after")
    np.testing.assert_array_equal(out, np.full((1, 16), 8.0, dtype=np.float32))
    stats = server.client("http").get_inference_statistics("ordered")["model_stats"][0]
    assert int(stats["inference_stats"]["fail"]["count"]) >= 1


def _batcher_infer(protocol: str, server: ServerThread, value: float, rid: str) -> Any:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = server.client(protocol)
    x = np.full((1, 4), value, dtype=np.float32)
    item = module.InferInput("INPUT0", [1, 4], "FP32")
    item.set_data_from_numpy(x)
    try:
        return client.infer("batcher", [item], request_id=rid).as_numpy("OUTPUT0")
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_pipelined_batch_that_fails_before_the_instance_fails_alone(
    server: ServerThread, injected_execute: Injected, protocol: str
) -> None:
    values = [float(v) for v in range(1, 9)]
    calls: list[Callable[[], Any]] = [
        lambda: _batcher_infer(protocol, server, 100.0, FAULT),
        *[(lambda v=v: _batcher_infer(protocol, server, v, f"r{v}")) for v in values],  # type: ignore[misc]
    ]
    answers = _in_threads(calls)
    _assert_injected_error(answers[0], "batcher")
    for value, answer in zip(values, answers[1:], strict=True):
        if not isinstance(answer, InferenceServerException):
            np.testing.assert_array_equal(answer, np.full((1, 4), value, dtype=np.float32))
        else:  # it shared the failed batch
            _assert_injected_error(answer, "batcher")
    for value in (1.0, 2.0):
        out = _batcher_infer(protocol, server, value, "after")
        np.testing.assert_array_equal(out, np.full((1, 4), value, dtype=np.float32))
