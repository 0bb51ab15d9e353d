"""The dynamic batcher's wire lane through the real tritonclient against a server on port 0:
plain JSON bodies and plain ModelInfer requests for a dynamically batched python model queue
as their bytes, batch together with requests of the standard path, and get the standard path's
answers; what the instance does not take runs on the standard path; statistics count what ran.

The model holds its instance while the file ``gate`` is missing in the model directory and a
request's INPUT0 is negative, so a test queues requests behind a running one and then lets
them go as one batch: no timing involved.
"""

from __future__ import annotations

import json
import queue
import socket
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.core import service as service_module
from repokit.core.dispatch import submit_wire
from repokit.core.loaded_model import LoadedVersion
from tests.frontends.http.server_thread import ServerThread, running_server

_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "BATCH_SIZE" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "ORDER" data_type: TYPE_INT32 dims: [ 1 ] }}
]
dynamic_batching {{ {batching} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

# OUTPUT0 = INPUT0 * 2, BATCH_SIZE = the batch the request ran in, ORDER = the executions so
# far; a negative input waits for the gate, or until the request is cancelled (then it writes
# the file ``cancelled``)
_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.gate = os.path.join(args["model_repository"], "gate")
        self.marker = os.path.join(args["model_repository"], "cancelled")
        self.count = 0

    def execute(self, requests):
        self.count += 1
        xs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        batch = sum(x.shape[0] for x in xs)
        responses = []
        for request, x in zip(requests, xs):
            if (x < 0).any():
                deadline = time.monotonic() + 60
                while not os.path.exists(self.gate) and time.monotonic() < deadline:
                    if request.is_cancelled():
                        open(self.marker, "w").close()
                        break
                    time.sleep(0.002)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", x * 2),
                        pb_utils.Tensor("BATCH_SIZE", np.full((x.shape[0], 1), batch, np.int32)),
                        pb_utils.Tensor("ORDER", np.full((x.shape[0], 1), self.count, np.int32)),
                    ]
                )
            )
        return responses
"""

# name -> (max_batch_size, dynamic_batching settings)
MODELS = {
    "gated_batch": (16, ""),
    # priority levels, one request per batch: a request with a priority (a request parameter,
    # never on the lane) must not queue at the default level
    "gated_prio": (1, "priority_levels: 2 default_priority_level: 2"),
}


class Counted:
    """The service's wire-lane dispatch, counting what became of each lane request."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()

    async def __call__(self, *args: Any) -> Any:
        answer = await submit_wire(*args)
        ran = answer[0]
        if ran is None:
            self.outcomes["standard"] += 1
        elif ran[0].result.encoded is not None:
            self.outcomes["encoded"] += 1
        else:
            self.outcomes["finished"] += 1
        return answer


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("wire-lane-batches")
    for name, (mbs, batching) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            textwrap.dedent(_CONFIG.format(name=name, mbs=mbs, batching=batching))
        )
        (repo / name / "1" / "model.py").write_text(_MODEL)
    return repo


@pytest.fixture(scope="module")
def counted() -> Iterator[Counted]:
    counter = Counted()
    service_module.submit_wire = counter  # type: ignore[assignment]
    try:
        yield counter
    finally:
        service_module.submit_wire = submit_wire


@pytest.fixture(scope="module")
def server(repo: Path, counted: Counted) -> Iterator[ServerThread]:
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _version(server: ServerThread, model: str) -> LoadedVersion:
    assert server.handle is not None
    return server.handle.service.manager.get(model)


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _http(server: ServerThread) -> httpclient.InferenceServerClient:
    assert server.handle is not None
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.handle.http_port}")


def _grpc(server: ServerThread) -> grpcclient.InferenceServerClient:
    assert server.handle is not None
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.handle.grpc_port}")


def _inputs(module: Any, x: np.ndarray, binary: bool = False) -> list[Any]:
    tensor = module.InferInput("INPUT0", list(x.shape), "FP32")
    if module is httpclient:
        tensor.set_data_from_numpy(x, binary_data=binary)
    else:
        tensor.set_data_from_numpy(x)
    return [tensor]


def _json_outputs(module: Any) -> list[Any]:
    if module is httpclient:  # JSON outputs: what the lane's instance encodes itself
        return [httpclient.InferRequestedOutput(n, binary_data=False) for n in
                ("OUTPUT0", "BATCH_SIZE", "ORDER")]  # fmt: skip
    return [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "BATCH_SIZE", "ORDER")]


def _stats(server: ServerThread, model: str) -> dict[str, Any]:
    client = _http(server)
    try:
        stats: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
        return stats
    finally:
        client.close()


@contextmanager
def _held(server: ServerThread, repo: Path, model: str) -> Iterator[Future[Any]]:
    """The model's instance busy with a lane request until the block ends."""
    gate = repo / model / "gate"
    gate.unlink(missing_ok=True)
    version = _version(server, model)
    pool = ThreadPoolExecutor(1)
    client = _http(server)
    x = -np.ones((1, 4), np.float32)
    blocker = pool.submit(
        client.infer, model, _inputs(httpclient, x), outputs=_json_outputs(httpclient)
    )
    _until(lambda: version.inflight == 1 and _pending(version) == 0, "the blocker to run")
    try:
        yield blocker
    finally:
        gate.touch()
        blocker.result(timeout=60)
        pool.shutdown()
        client.close()


def _pending(version: LoadedVersion) -> int:
    scheduler = version.scheduler
    assert scheduler is not None
    return scheduler.pending_count


def test_the_batcher_takes_the_lane(server: ServerThread) -> None:
    version = _version(server, "gated_batch")
    assert version.wire_lane is not None


def test_lane_and_standard_requests_run_in_one_batch(
    server: ServerThread, repo: Path, counted: Counted
) -> None:
    """JSON and gRPC lane requests, a binary HTTP request and a gRPC request with a parameter
    (both on the standard path) and one that the instance hands back: those that run, run
    together in one batch with the answers of the standard path."""
    model = "gated_batch"
    version = _version(server, model)
    before = _stats(server, model)
    lane_before = counted.outcomes.copy()
    sizes = {"json": (2, 1.0), "grpc": (1, 2.0), "binary": (3, 3.0), "param": (1, 4.0)}
    rows = {name: np.full((size, 4), value, np.float32) for name, (size, value) in sizes.items()}
    with ThreadPoolExecutor(6) as pool:
        with _held(server, repo, model):
            http, grpc = _http(server), _grpc(server)
            calls = {
                "json": pool.submit(http.infer, model, _inputs(httpclient, rows["json"]),
                                    outputs=_json_outputs(httpclient)),
                "grpc": pool.submit(_grpc(server).infer, model, _inputs(grpcclient, rows["grpc"]),
                                    outputs=_json_outputs(grpcclient)),
                "binary": pool.submit(_http(server).infer, model,
                                      _inputs(httpclient, rows["binary"], binary=True)),
                "param": pool.submit(grpc.infer, model, _inputs(grpcclient, rows["param"]),
                                     parameters={"custom": 1}),
            }  # fmt: skip
            _until(lambda: _pending(version) == 4, "4 requests queued")
            # the server reads batch size 1 from it; the instance refuses its shape [1, 3]
            bad = pool.submit(_raw_json, server, model, [1, 3], [1.0, 2.0, 3.0])
            _until(lambda: _pending(version) == 5, "5 queued")
        refused = bad.result(timeout=30)
        results = {name: call.result(timeout=30) for name, call in calls.items()}
    total = sum(len(x) for x in rows.values())
    for name, x in rows.items():
        assert results[name].as_numpy("OUTPUT0").tolist() == (x * 2).tolist(), name
        assert results[name].as_numpy("BATCH_SIZE").ravel().tolist() == [total] * len(x), name
    status, body = refused
    assert status == 400
    assert "unexpected shape for input 'INPUT0' for model 'gated_batch'" in body["error"]
    after = _stats(server, model)
    # the blocker and one batch of 7 ran; the refused request ran nowhere
    assert after["execution_count"] - before["execution_count"] == 2
    assert after["inference_count"] - before["inference_count"] == 1 + total
    success = (
        after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    )
    assert success == 5  # the blocker and the four requests
    lane = counted.outcomes - lane_before
    # encoded by the instance: the blocker, the JSON and the gRPC request; the standard path's:
    # the request with a parameter (refused before it queued) and the one the instance handed
    # back (the binary request never comes to the lane)
    assert lane == Counter({"encoded": 3, "standard": 2})


def _raw_json(
    server: ServerThread, model: str, shape: list[int], data: list[float]
) -> tuple[int, Any]:
    assert server.handle is not None
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": data}]}
    ).encode()
    sock = socket.create_connection(("127.0.0.1", server.handle.http_port), timeout=30)
    try:
        sock.sendall(
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}"
            f"\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    finally:
        sock.close()
    head, _, payload = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


def test_a_request_with_a_priority_queues_at_its_level(server: ServerThread, repo: Path) -> None:
    """A priority is a request parameter: such a request takes the standard path and queues at
    its own level, ahead of the plain requests (default level 2, on the lane) queued before it.
    """
    model = "gated_prio"
    version = _version(server, model)
    one = np.full((1, 4), 1.0, np.float32)
    with ThreadPoolExecutor(4) as pool:
        with _held(server, repo, model) as blocker:
            low = [pool.submit(_grpc(server).infer, model, _inputs(grpcclient, one)) for _ in "ab"]
            _until(lambda: _pending(version) == 2, "2 queued")
            high = pool.submit(_grpc(server).infer, model, _inputs(grpcclient, one), priority=1)
            _until(lambda: _pending(version) == 3, "3 queued")
        first = int(blocker.result().as_numpy("ORDER")[0, 0])
        assert int(high.result().as_numpy("ORDER")[0, 0]) == first + 1
        assert sorted(int(f.result().as_numpy("ORDER")[0, 0]) for f in low) == [
            first + 2,
            first + 3,
        ]


def test_cancelling_a_running_lane_request_reaches_the_model(
    server: ServerThread, repo: Path
) -> None:
    """A gRPC client cancelling a lane request whose batch is running: the model sees
    ``is_cancelled()``."""
    model = "gated_batch"
    marker = repo / model / "cancelled"
    marker.unlink(missing_ok=True)
    (repo / model / "gate").unlink(missing_ok=True)
    version = _version(server, model)
    results: queue.Queue[Any] = queue.Queue()
    client = _grpc(server)
    try:
        call = client.async_infer(
            model, _inputs(grpcclient, -np.ones((1, 4), np.float32)),
            callback=lambda r, e: results.put((r, e)),
        )  # fmt: skip
        _until(lambda: version.inflight == 1 and _pending(version) == 0, "the request to run")
        call.cancel()
        _until(marker.exists, "the model to see is_cancelled()")
    finally:
        (repo / model / "gate").touch()
        client.close()
    _until(lambda: version.inflight == 0, "the execution to end")


def test_plain_requests_through_the_lane_are_correct_under_load(server: ServerThread) -> None:
    """Many concurrent lane requests of different batch sizes: each gets its own rows back."""
    model = "gated_batch"

    def one(i: int) -> bool:
        rows = 1 + i % 3
        x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) + i
        client = _http(server) if i % 2 else _grpc(server)
        module = httpclient if i % 2 else grpcclient
        try:
            result = client.infer(model, _inputs(module, x), outputs=_json_outputs(module))
        finally:
            client.close()
        return bool(result.as_numpy("OUTPUT0").tolist() == (x * 2).tolist())

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(one, range(96)))


def test_a_full_lane_batch_error_fails_every_request(server: ServerThread) -> None:
    """An input the lane takes but the model cannot run: the error of the standard path."""
    with pytest.raises(InferenceServerException) as caught:
        _http(server).infer("gated_batch", _inputs(httpclient, np.ones((17, 4), np.float32)))
    assert "batch-size must be <= 16" in str(caught.value)
