"""`repokit serve` schedules each model as its config says: tritonclient over HTTP and gRPC
against a real server (port 0) running the real python and onnxruntime backends.

Nothing here asserts on elapsed time. Batching is observed through the batch size the model
reports; queue states are reached by holding an instance busy (``gated`` models, see
``scheduling_models``) and waiting until the scheduler reports the expected queue length.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from repokit.core.loaded_model import LoadedVersion
from repokit.core.server_log import VERBOSE
from repokit.scheduler.sequence_batch import SequenceBatchScheduler
from tests.e2e.scheduling_models import build_scheduling_repository, idle_accumulate
from tests.frontends.http.server_thread import ServerThread, running_server
from tests.serve_workers import serve_workers

PROTOCOLS = ("http", "grpc")
STATUS = {
    ("http", "INVALID_ARG"): "400",
    ("http", "UNAVAILABLE"): "503",
    ("grpc", "INVALID_ARG"): "StatusCode.INVALID_ARGUMENT",
    ("grpc", "UNAVAILABLE"): "StatusCode.UNAVAILABLE",
}
IDLE_US = 200_000


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = build_scheduling_repository(tmp_path_factory.mktemp("scheduling") / "models")
    idle_accumulate(repo, IDLE_US)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerThread]:
    with running_server(
        repo, allow_grpc=True, model_control_mode="explicit", load_models=["*"]
    ) as srv:
        yield srv


class Client:
    """The same calls over tritonclient.http or tritonclient.grpc."""

    def __init__(self, protocol: str, server: ServerThread) -> None:
        self.protocol = protocol
        self.module: Any = httpclient if protocol == "http" else grpcclient
        self.client = server.client(protocol)

    def infer(self, model: str, **kwargs: Any) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = kwargs.pop("inputs")
        inputs = []
        for name, array in arrays.items():
            item = self.module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_data_from_numpy(array)
            inputs.append(item)
        result = self.client.infer(model, inputs, **kwargs)
        response = result.get_response()
        names = (
            [o["name"] for o in response["outputs"]]
            if self.protocol == "http"
            else [o.name for o in response.outputs]
        )
        return {name: result.as_numpy(name) for name in names}

    def stats(self, model: str) -> dict[str, Any]:
        if self.protocol == "grpc":  # with its zero counts, which as_json=True leaves out
            doc = json_format.MessageToDict(
                self.client.get_inference_statistics(model),
                always_print_fields_with_no_presence=True,
                preserving_proto_field_name=True,
            )
        else:
            doc = self.client.get_inference_statistics(model)
        stats: dict[str, Any] = _numbers(doc["model_stats"][0])
        return stats

    def close(self) -> None:
        self.client.close()


def _numbers(value: Any) -> Any:
    """gRPC's JSON renders uint64 counters as strings; make every counter an int."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def connect(server: ServerThread, protocol: str) -> Iterator[Callable[[], Client]]:
    made: list[Client] = []
    lock = threading.Lock()

    def new() -> Client:
        client = Client(protocol, server)
        with lock:
            made.append(client)
        return client

    yield new
    for client in made:
        client.close()


def loaded(server: ServerThread, model: str) -> LoadedVersion:
    assert server.handle is not None
    return server.handle.service.manager.get(model)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.002)


def _count(stats: dict[str, Any], key: str) -> int:
    if key in stats:
        return int(stats[key])
    return int(stats["inference_stats"].get(key, {}).get("count", 0))  # gRPC omits zeros


@contextmanager
def held(server: ServerThread, repo: Path, model: str, client: Client) -> Iterator[Any]:
    """Keep the model's (first free) instance busy until the block ends."""
    gate = repo / model / "gate"
    gate.unlink(missing_ok=True)
    version = loaded(server, model)
    assert version.scheduler is not None
    pool = ThreadPoolExecutor(1)
    blocker = pool.submit(client.infer, model, inputs={"INPUT0": -np.ones((1, 4), np.float32)})
    until(lambda: version.inflight == 1 and version.scheduler.pending_count == 0, "blocker runs")
    try:
        yield blocker
    finally:
        gate.touch()
        blocker.result(timeout=60)
        pool.shutdown()


def row(value: float) -> dict[str, np.ndarray]:
    return {"INPUT0": np.full((1, 4), value, np.float32)}


# --- dynamic batching ------------------------------------------------------------------------
def test_concurrent_requests_are_batched(connect: Callable[[], Client]) -> None:
    client = connect()
    before = client.stats("batcher")
    clients = [connect() for _ in range(32)]
    barrier = threading.Barrier(len(clients))

    def one(index: int) -> tuple[np.ndarray, int]:
        barrier.wait()
        out = clients[index].infer("batcher", inputs=row(index))
        return out["OUTPUT0"], int(out["BATCH_SIZE"][0, 0])

    with ThreadPoolExecutor(len(clients)) as pool:
        results = list(pool.map(one, range(len(clients))))
    for index, (output, _size) in enumerate(results):
        np.testing.assert_array_equal(output, np.full((1, 4), index, np.float32))
    sizes = [size for _, size in results]
    assert max(sizes) > 1 and max(sizes) <= 32
    after = client.stats("batcher")
    requests_done = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert requests_done == 32 and executions < 32
    batched = sum(b["batch_size"] * b["compute_infer"]["count"] for b in after["batch_stats"])
    assert batched == after["inference_count"]


def test_preferred_size_is_sent_at_once(connect: Callable[[], Client]) -> None:
    # the queue delay is 60 s: only reaching the preferred size (4) can send these batches
    clients = [connect() for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        sizes = list(
            pool.map(
                lambda c: int(c.infer("preferred", inputs=row(1))["BATCH_SIZE"][0, 0]), clients
            )
        )
    assert sizes == [4] * 8


@pytest.mark.parametrize(("model", "low_priority"), [("prio", 2), ("prio_max", 0)])
def test_priority_level_1_runs_before_queued_level_2(
    server: ServerThread, repo: Path, connect: Callable[[], Client], model: str, low_priority: int
) -> None:
    """prio_max: priority_levels 2**64 - 1, the default level 2**32 (priority 0)."""
    version = loaded(server, model)
    with ThreadPoolExecutor(4) as pool, held(server, repo, model, connect()) as blocker:
        low = [
            pool.submit(connect().infer, model, inputs=row(i), priority=low_priority)
            for i in range(3)
        ]
        until(
            lambda: version.scheduler is not None and version.scheduler.pending_count == 3,
            "3 queued",
        )
        high = pool.submit(connect().infer, model, inputs=row(9), priority=1)
        until(
            lambda: version.scheduler is not None and version.scheduler.pending_count == 4,
            "4 queued",
        )
    first = int(blocker.result()["ORDER"][0, 0])
    assert int(high.result()["ORDER"][0, 0]) == first + 1
    assert sorted(int(f.result()["ORDER"][0, 0]) for f in low) == [first + 2, first + 3, first + 4]


def test_full_queue_is_refused_at_once(
    server: ServerThread, repo: Path, connect: Callable[[], Client], protocol: str
) -> None:
    version = loaded(server, "qfull")
    assert server.handle is not None and server.handle.metrics_port is not None
    metrics = f"http://127.0.0.1:{server.handle.metrics_port}/metrics"
    fails_before = _count(connect().stats("qfull"), "fail")
    found = re.search(
        r'nv_inference_request_failure\{model="qfull",reason="REJECTED",version="1"\} (\d+)',
        requests.get(metrics, timeout=10).text,
    )
    rejected_before = int(found.group(1)) if found else 0
    with ThreadPoolExecutor(2) as pool, held(server, repo, "qfull", connect()):
        queued = [pool.submit(connect().infer, "qfull", inputs=row(i)) for i in range(2)]
        until(
            lambda: version.scheduler is not None and version.scheduler.pending_count == 2,
            "2 queued",
        )
        text = requests.get(metrics, timeout=10).text
        assert re.search(r'nv_inference_pending_request_count\{model="qfull",version="1"\} 2', text)
        with pytest.raises(InferenceServerException) as refused:
            connect().infer("qfull", inputs=row(5), request_id="third")
    assert refused.value.status() == STATUS[protocol, "UNAVAILABLE"]
    assert refused.value.message() == "[request id: third] Exceeds maximum queue size"
    # the two queued requests then ran together in one batch
    assert [int(f.result()["BATCH_SIZE"][0, 0]) for f in queued] == [2, 2]
    # counted as a REJECTED failure (Triton 2.51 counts it nowhere: a deliberate difference)
    assert _count(connect().stats("qfull"), "fail") == fails_before + 1
    text = requests.get(metrics, timeout=10).text
    rejected = re.search(
        r'nv_inference_request_failure\{model="qfull",reason="REJECTED",version="1"\} (\d+)', text
    )
    assert rejected is not None and int(rejected.group(1)) == rejected_before + 1


def _pending_metric(server: ServerThread, model: str) -> int:
    assert server.handle is not None and server.handle.metrics_port is not None
    text = requests.get(f"http://127.0.0.1:{server.handle.metrics_port}/metrics", timeout=10).text
    found = re.search(
        rf'nv_inference_pending_request_count\{{model="{model}",version="1"\}} (\d+)', text
    )
    assert found is not None, text
    return int(found.group(1))


def test_requests_sent_early_to_a_busy_instance_still_count_as_pending(
    server: ServerThread, repo: Path, connect: Callable[[], Client]
) -> None:
    """Triton's pending gauge counts a request until it executes, prefetched or not
    (L0_metrics' queue-size test: 10 requests, batches of 4, one busy instance: 6 pending)."""
    version = loaded(server, "pairs")
    with ThreadPoolExecutor(3) as pool, held(server, repo, "pairs", connect()):
        waiting = [pool.submit(connect().infer, "pairs", inputs=row(i)) for i in range(3)]
        until(lambda: version.scheduler is not None and version.scheduler.pending_count == 3, "3")
        assert _pending_metric(server, "pairs") == 3
    assert sorted(int(f.result()["BATCH_SIZE"][0, 0]) for f in waiting) == [1, 2, 2]
    until(lambda: version.scheduler is not None and version.scheduler.pending_count == 0, "0")


def test_a_bounded_queue_keeps_full_batches_until_the_instance_is_free(
    server: ServerThread, repo: Path, connect: Callable[[], Client], protocol: str
) -> None:
    """With max_queue_size Triton does not prefetch: a full batch waits in the queue, so the
    queue is full with 2 and the next request is refused (repokit used to send the pair to the
    busy instance and queue 2 more)."""
    version = loaded(server, "pairs_bounded")
    with ThreadPoolExecutor(2) as pool, held(server, repo, "pairs_bounded", connect()):
        queued = [pool.submit(connect().infer, "pairs_bounded", inputs=row(i)) for i in range(2)]
        until(lambda: version.scheduler is not None and version.scheduler.pending_count == 2, "2")
        with pytest.raises(InferenceServerException) as refused:
            connect().infer("pairs_bounded", inputs=row(5))
        assert _pending_metric(server, "pairs_bounded") == 2
    assert refused.value.status() == STATUS[protocol, "UNAVAILABLE"]
    assert [int(f.result()["BATCH_SIZE"][0, 0]) for f in queued] == [2, 2]


def test_queue_timeout_rejects(
    server: ServerThread, repo: Path, connect: Callable[[], Client], protocol: str
) -> None:
    fails_before = _count(connect().stats("timeouts"), "fail")
    with held(server, repo, "timeouts", connect()):
        for kwargs in ({"timeout": 1000}, {}):  # the request's own (shorter) one, the default
            with pytest.raises(InferenceServerException) as rejected:
                connect().infer("timeouts", inputs=row(1), **kwargs)
            assert rejected.value.status() == STATUS[protocol, "UNAVAILABLE"]
            assert rejected.value.message() == "Request timeout expired"
    assert _count(connect().stats("timeouts"), "fail") == fails_before + 2
    assert int(connect().infer("timeouts", inputs=row(1))["BATCH_SIZE"][0, 0]) == 1


# --- instances -------------------------------------------------------------------------------
def test_two_instances_run_in_parallel(
    server: ServerThread, repo: Path, connect: Callable[[], Client]
) -> None:
    # one instance held: a second request completes on the other instance meanwhile
    with held(server, repo, "two_instances", connect()) as blocker:
        out = connect().infer("two_instances", inputs=row(3))
        np.testing.assert_array_equal(out["OUTPUT0"], np.full((1, 4), 3, np.float32))
        assert not blocker.done()
    # with one instance the second request waits behind the held one
    version = loaded(server, "one_instance")
    with ThreadPoolExecutor(1) as pool, held(server, repo, "one_instance", connect()) as blocker:
        waiting = pool.submit(connect().infer, "one_instance", inputs=row(3))
        until(
            lambda: version.scheduler is not None and version.scheduler.pending_count == 1, "queued"
        )
        assert not waiting.done() and not blocker.done()
    assert waiting.result()["OUTPUT0"][0, 0] == 3


def test_onnx_model_with_two_instances(connect: Callable[[], Client]) -> None:
    clients = [connect() for _ in range(8)]

    def one(index: int) -> None:
        a = np.full((1, 16), index, np.float32)
        b = np.ones((1, 16), np.float32)
        out = clients[index].infer("add_sub_onnx2", inputs={"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(8)))


# --- warmup ----------------------------------------------------------------------------------
def test_warmup_ran_on_every_instance_before_ready(
    server: ServerThread, connect: Callable[[], Client]
) -> None:
    version = loaded(server, "warm")
    assert version.backend is not None and version.backend.instance_count == 2
    # 3 warmup executions per instance happened before the model took requests
    clients = [connect() for _ in range(2)]
    first = int(clients[0].infer("warm", inputs=row(1))["ORDER"][0, 0])
    assert first >= 4


def test_failing_warmup_fails_the_load(server: ServerThread) -> None:
    assert server.handle is not None
    index = {e["name"]: e for e in server.handle.service.repository_index()}
    entry = index["warm_fail"]
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"].startswith("Invalid argument: failed to run warmup sample 'zeros': ")
    assert "zeros are refused" in entry["reason"]


# --- sequences -------------------------------------------------------------------------------
def test_concurrent_sequences_keep_their_sums(connect: Callable[[], Client], protocol: str) -> None:
    base = 1000 if protocol == "http" else 2000
    steps = [3, 1, 4, 1, 5]
    clients = [connect() for _ in range(6)]  # 6 sequences on 4 slots: 2 wait in the backlog

    def sequence(index: int) -> list[int]:
        sums = []
        for step, value in enumerate(steps):
            out = clients[index].infer(
                "accumulate",
                inputs={"INPUT": np.array([[value * (index + 1)]], np.int32)},
                sequence_id=base + index,
                sequence_start=step == 0,
                sequence_end=step == len(steps) - 1,
            )
            sums.append(int(out["OUTPUT"][0, 0]))
        return sums

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(sequence, range(6)))
    for index, sums in enumerate(results):
        assert sums == list(np.cumsum(steps) * (index + 1))


def test_sequence_request_errors(connect: Callable[[], Client], protocol: str) -> None:
    client = connect()
    value = {"INPUT": np.array([[1]], np.int32)}
    cases = [
        (
            {"inputs": value, "sequence_id": 777, "request_id": "r1"},
            "inference request for sequence 777 to model 'accumulate' must specify the START "
            "flag on the first request of the sequence",
        ),
        (
            {"inputs": value},
            "inference request to model 'accumulate' must specify a non-zero or non-empty "
            "correlation ID",
        ),
        (
            {
                "inputs": {"INPUT": np.array([[1], [2]], np.int32)},
                "sequence_id": 5,
                "sequence_start": True,
            },
            "inference request to model 'accumulate' must specify batch-size 1 due to "
            "requirements of sequence batcher",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(InferenceServerException) as error:
            client.infer("accumulate", **kwargs)
        assert error.value.status() == STATUS[protocol, "INVALID_ARG"]
        assert error.value.message() == message
    # sequence ids on a model without sequence batching are accepted and ignored (as 2.51)
    out = client.infer("batcher", inputs=row(2), sequence_id=9, sequence_start=True)
    assert int(out["BATCH_SIZE"][0, 0]) == 1


def test_idle_sequence_expires(
    server: ServerThread, connect: Callable[[], Client], protocol: str
) -> None:
    client = connect()
    corrid = 31 if protocol == "http" else 32
    one = {"INPUT": np.array([[2]], np.int32)}
    out = client.infer("accumulate_idle", inputs=one, sequence_id=corrid, sequence_start=True)
    assert int(out["OUTPUT"][0, 0]) == 2
    scheduler = loaded(server, "accumulate_idle").scheduler
    assert isinstance(scheduler, SequenceBatchScheduler)
    slots = scheduler.slots

    def freed() -> bool:
        return all(
            slots.slot_owner(instance, index) != corrid
            for instance in slots.instances
            for index in range(slots.slots_per_instance)
        )

    until(freed, "the idle sequence was reaped")
    with pytest.raises(InferenceServerException) as error:
        client.infer("accumulate_idle", inputs=one, sequence_id=corrid)
    assert error.value.status() == STATUS[protocol, "INVALID_ARG"]
    assert "must specify the START flag on the first request of the sequence" in (
        error.value.message()
    )


def test_cancelling_a_queued_sequence_request_cancels_the_sequence(
    server: ServerThread, repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton 2.51 (L0_request_cancellation scheduler_test): a client cancels one of three
    requests queued behind its sequence's running request; all are answered CANCELLED, with
    Triton's empty message (gRPC CANCELLED, HTTP 400 ``{"error":""}``), and counted as
    failures with reason CANCELED; the running request still completes. The cancellation is
    logged at --log-verbose 1 as Triton's gRPC frontend and sequence batcher log it."""
    model = "gated_sequence"
    gate = repo / model / "gate"
    gate.unlink(missing_ok=True)
    version = loaded(server, model)
    client = server.client("grpc")
    before = _failures(server, model, "CANCELED")

    def inputs(value: float) -> list[grpcclient.InferInput]:
        given = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        given.set_data_from_numpy(np.full((1, 4), value, np.float32))
        return [given]

    answers: list[dict[str, Any]] = [{}, {}]

    def keep(answer: dict[str, Any]) -> Callable[[Any, Any], None]:
        return lambda result, error: answer.update(result=result, error=error)

    def over_http() -> requests.Response:
        body = {
            "parameters": {"sequence_id": 7},
            "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [2] * 4}],
        }
        url = f"http://{server.http_url}/v2/models/{model}/infer"
        return requests.post(url, json=body, timeout=60)

    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(client.infer, model, inputs(-1), sequence_id=7, sequence_start=True)
        until(lambda: version.inflight == 1, "the sequence's first request runs")
        queued = [
            client.async_infer(model, inputs(i), keep(answers[i]), sequence_id=7) for i in range(2)
        ]
        until(
            lambda: version.scheduler is not None and version.scheduler.pending_count == 2,
            "2 queued",
        )
        http_answer = pool.submit(over_http)
        until(lambda: version.scheduler.pending_count == 3, "3 queued")  # type: ignore[union-attr]
        with (
            caplog.at_level(VERBOSE, logger="repokit.frontends.grpc.servicer"),
            caplog.at_level(VERBOSE, logger="repokit.scheduler.sequence_batch"),
        ):
            queued[0].cancel()
            until(lambda: "error" in answers[1], "the other queued request is answered")
            answered = http_answer.result(timeout=60)
        if serve_workers() == 1:  # with frontend workers the gRPC line is a worker's log
            assert "Cancellation notification received for ModelInferHandler" in caplog.text
        assert "Releasing canceled sequence CORRID 7" in caplog.text
        assert answers[1]["error"].status() == "StatusCode.CANCELLED"
        assert answers[1]["error"].message() == ""
        assert answers[1]["result"] is None
        assert (answered.status_code, answered.json()) == (400, {"error": ""})
        until(lambda: _failures(server, model, "CANCELED") == before + 3, "3 CANCELED")
        gate.touch()
        assert running.result(timeout=60).as_numpy("OUTPUT0").tolist() == [[-1.0] * 4]
    with pytest.raises(InferenceServerException, match="START flag"):
        client.infer(model, inputs(1), sequence_id=7)  # the sequence was cancelled
    client.close()


# --- ensembles -------------------------------------------------------------------------------
def test_python_and_onnx_ensemble(connect: Callable[[], Client]) -> None:
    client = connect()
    before = {m: client.stats(m) for m in ("add_sub_ensemble", "add_sub", "add_sub_onnx")}
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.25, np.float32)
    out = client.infer("add_sub_ensemble", inputs={"A": a, "B": b})
    np.testing.assert_allclose(out["TWICE_A"], 2 * a)
    np.testing.assert_allclose(out["TWICE_B"], 2 * b)
    after = {m: client.stats(m) for m in before}
    for model in before:  # each counts its own request of batch 2 and one execution
        assert after[model]["inference_count"] - before[model]["inference_count"] == 2
        assert after[model]["execution_count"] - before[model]["execution_count"] == 1

    def grew(model: str, phase: str) -> int:
        now, then = after[model]["inference_stats"], before[model]["inference_stats"]
        return int(now[phase]["ns"] - then[phase]["ns"])

    # Triton 2.51: the ensemble's compute durations are its composing requests' sums
    for phase in ("compute_input", "compute_infer", "compute_output"):
        steps = grew("add_sub", phase) + grew("add_sub_onnx", phase)
        assert grew("add_sub_ensemble", phase) == steps, phase
    assert grew("add_sub_ensemble", "compute_infer") > 0
    batch = {b["batch_size"]: b for b in after["add_sub_ensemble"]["batch_stats"]}
    assert batch[2]["compute_infer"]["ns"] > 0


def _failures(server: ServerThread, model: str, reason: str) -> int:
    assert server.handle is not None and server.handle.metrics_port is not None
    text = requests.get(f"http://127.0.0.1:{server.handle.metrics_port}/metrics", timeout=10).text
    found = re.search(
        rf'nv_inference_request_failure\{{model="{model}",reason="{reason}",version="1"\}} (\d+)',
        text,
    )
    assert found is not None, f"no {reason} failures of {model} in the metrics"
    return int(found.group(1))


def test_failed_ensemble_request_counts_twice_with_reason_other(
    server: ServerThread, connect: Callable[[], Client], protocol: str
) -> None:
    """Triton 2.51 (L0_model_queue test_policy_reject): an ensemble whose step fails counts
    the request as failed twice, reason OTHER, in the metrics and the statistics; the
    composing model counts its own failure once (BACKEND)."""
    client = connect()
    cases = (("refusing_ensemble", "OTHER"), ("refusing", "BACKEND"))
    before = {m: (_failures(server, m, r), _count(client.stats(m), "fail")) for m, r in cases}
    for _ in range(3):
        with pytest.raises(InferenceServerException, match="zeros are refused"):
            client.infer("refusing_ensemble", inputs={"IN": np.zeros((1, 4), np.float32)})
    after = {m: (_failures(server, m, r), _count(client.stats(m), "fail")) for m, r in cases}
    assert after["refusing_ensemble"] == (
        before["refusing_ensemble"][0] + 6,
        before["refusing_ensemble"][1] + 6,
    )
    assert after["refusing"] == (before["refusing"][0] + 3, before["refusing"][1] + 3)
    assert _failures(server, "refusing_ensemble", "BACKEND") == 0


def test_ensemble_of_ensembles(connect: Callable[[], Client]) -> None:
    client = connect()
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    y = np.full((1, 16), -1.5, np.float32)
    out = client.infer("nested_ensemble", inputs={"X": x, "Y": y})
    np.testing.assert_allclose(out["FOUR_X"], 4 * x)
    np.testing.assert_allclose(out["FOUR_Y"], 4 * y)
    out = client.infer("nested_ensemble", inputs={"X": x, "Y": y}, outputs=None)
    assert set(out) == {"FOUR_X", "FOUR_Y"}


def test_steps_that_lead_to_no_requested_output_do_not_run(
    connect: Callable[[], Client],
) -> None:
    """Triton prunes an ensemble's steps for the requested outputs (qa/L0_simple_ensemble's
    test_ensemble_add_sub_one_output counts the composing versions' inferences)."""
    client = connect()
    before = {m: client.stats(m)["inference_count"] for m in ("add_sub", "add_sub_onnx")}
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.0, np.float32)
    out = client.infer(
        "fan_ensemble", inputs={"A": a, "B": b}, outputs=[client.module.InferRequestedOutput("SUM")]
    )
    assert set(out) == {"SUM"}
    np.testing.assert_allclose(out["SUM"], a + b)
    mid = {m: client.stats(m)["inference_count"] for m in before}
    assert (mid["add_sub_onnx"] - before["add_sub_onnx"], mid["add_sub"] - before["add_sub"]) == (
        1,
        0,
    )
    out = client.infer(
        "fan_ensemble",
        inputs={"A": a, "B": b},
        outputs=[client.module.InferRequestedOutput("DIFF")],
    )
    np.testing.assert_allclose(out["DIFF"], a - b)
    out = client.infer("fan_ensemble", inputs={"A": a, "B": b}, outputs=None)
    assert set(out) == {"SUM", "DIFF"}
    after = {m: client.stats(m)["inference_count"] for m in before}
    assert (after["add_sub_onnx"] - mid["add_sub_onnx"], after["add_sub"] - mid["add_sub"]) == (
        1,
        2,
    )


def test_an_ensemble_without_batching_feeds_a_batching_model(
    connect: Callable[[], Client],
) -> None:
    """Triton's ensemble adds a batch dimension of 1 to a tensor of a non-batching ensemble for
    a batching composing model, and strips it from the result (qa/L0_infer_zero's and
    L0_infer_reshape's *_nobatch ensembles over batching nop models)."""
    client = connect()
    a = np.arange(16, dtype=np.float32)
    b = np.full(16, 0.5, np.float32)
    before = client.stats("add_sub")["inference_count"]
    out = client.infer("nobatch_ensemble", inputs={"A": a, "B": b})
    assert out["SUM"].shape == (16,)
    np.testing.assert_allclose(out["SUM"], a + b)
    assert client.stats("add_sub")["inference_count"] - before == 1  # a request of batch 1


def _response_parameters(protocol: str, result: Any) -> dict[str, object]:
    if protocol == "http":
        return dict(result.get_response().get("parameters", {}))
    found: dict[str, object] = {}
    for name, value in result.get_response().parameters.items():
        found[name] = getattr(value, value.WhichOneof("parameter_choice"))
    return found


@pytest.mark.parametrize(
    ("sequence", "expected"),
    [
        ({}, {"sequence_id": 0, "sequence_start": False, "sequence_end": False}),
        (
            {"sequence_id": 42, "sequence_start": True},
            {"sequence_id": 42, "sequence_start": True, "sequence_end": False},
        ),
        (
            {"sequence_id": "abc", "sequence_end": True},
            {"sequence_id": "abc", "sequence_start": False, "sequence_end": True},
        ),
    ],
)
def test_ensemble_responses_carry_the_requests_sequence_parameters(
    connect: Callable[[], Client], sequence: dict[str, Any], expected: dict[str, object]
) -> None:
    """Triton 2.51's ensemble adds sequence_id/start/end to a response whose outputs a step made
    (qa/L0_simple_ensemble's test_ensemble_sequence_flags reads them), a composing model's
    response has none."""
    client = connect()
    a = np.arange(16, dtype=np.float32).reshape(1, 16)

    def inputs(*names: str) -> list[Any]:
        made = []
        for name in names:
            item = client.module.InferInput(name, [1, 16], "FP32")
            item.set_data_from_numpy(a)
            made.append(item)
        return made

    result = client.client.infer("add_sub_ensemble", inputs("A", "B"), **sequence)
    assert _response_parameters(client.protocol, result) == expected
    np.testing.assert_allclose(result.as_numpy("TWICE_A"), 2 * a)
    plain = client.client.infer("add_sub", inputs("INPUT0", "INPUT1"), **sequence)
    assert _response_parameters(client.protocol, plain) == {}
