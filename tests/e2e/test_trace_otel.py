"""OpenTelemetry trace mode end to end: spans exported over OTLP/HTTP (protobuf) to a real
receiver the test runs (``tests/otlp_receiver.py``), with Triton's span tree, events and
attributes; a client's W3C ``traceparent`` (HTTP header, gRPC metadata) becomes the parent."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repokit.core.tracing.options import parse_trace_flags
from tests.cli.serve_process import PORT_FLAGS, ServeProcess
from tests.e2e.test_trace_bls import write_bls_model
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, running_receiver

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]


def _specs(url: str, rate: str = "1") -> list[str]:
    return [
        "mode=opentelemetry",
        f"opentelemetry,url={url}",
        "opentelemetry,resource=service.name=repokit-test",
        "opentelemetry,bsp_schedule_delay=50",
        "level=TIMESTAMPS",
        f"rate={rate}",
    ]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with running_receiver() as rx:
        yield rx


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_models(
        tmp_path_factory.mktemp("repo"), ("add_sub", "add_sub_onnx", "add_sub_ensemble")
    )
    write_bls_model(repo, "bls")
    return repo


@pytest.fixture(scope="module")
def server(repo: Path, receiver: OtlpReceiver) -> Iterator[ServerThread]:
    trace = parse_trace_flags(_specs(receiver.url))
    with running_server(repo, allow_grpc=True, trace=trace) as srv:
        yield srv


def _body(a: str = "INPUT0", b: str = "INPUT1", request_id: str = "") -> dict[str, object]:
    return {
        "id": request_id,
        "inputs": [
            {"name": a, "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
            {"name": b, "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16},
        ],
    }


def _trace(spans: list[ReceivedSpan], trace_id: str) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans if s.trace_id == trace_id}


def _new_spans(receiver: OtlpReceiver, before: int, count: int) -> list[ReceivedSpan]:
    return receiver.wait_for(before + count)[before:]


def test_settings_show_the_mode_settings(server: ServerThread, receiver: OtlpReceiver) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_trace_settings() == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
        "url": receiver.url,
        "resource": "service.name=repokit-test",
        "bsp_schedule_delay": "50",
        "bsp_max_queue_size": "2048",
        "bsp_max_export_batch_size": "512",
    }
    client.close()


def test_http_request_with_traceparent(server: ServerThread, receiver: OtlpReceiver) -> None:
    before = len(receiver.spans)
    url = f"http://{server.http_url}/v2/models/add_sub/infer"
    answer = requests.post(url, json=_body(request_id="h1"), headers={"traceparent": TRACEPARENT})
    assert answer.status_code == 200
    spans = _trace(_new_spans(receiver, before, 3), CLIENT_TRACE)
    assert sorted(spans) == ["InferRequest", "add_sub", "compute"]
    root, model, compute = spans["InferRequest"], spans["add_sub"], spans["compute"]
    assert root.parent_span_id == CLIENT_SPAN  # the client's span is the parent
    assert model.parent_span_id == root.span_id
    assert compute.parent_span_id == model.span_id
    assert [e for e, _ in root.events] == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]
    assert [e for e, _ in model.events] == MODEL_EVENTS
    assert [e for e, _ in compute.events] == COMPUTE_EVENTS
    assert model.attributes == {
        "triton.model_name": "add_sub",
        "triton.model_version": 1,
        "triton.trace_id": model.attributes["triton.trace_id"],
        "triton.trace_parent_id": 0,
        "triton.request_id": "h1",
    }
    assert root.start_ns <= model.start_ns <= compute.start_ns <= compute.end_ns <= model.end_ns
    assert model.end_ns <= root.end_ns
    assert root.resource["service.name"] == "repokit-test"


def test_grpc_request_with_traceparent_metadata(
    server: ServerThread, receiver: OtlpReceiver
) -> None:
    before = len(receiver.spans)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
        inputs.append(tensor)
    client.infer("add_sub_onnx", inputs, headers={"traceparent": TRACEPARENT})
    client.close()
    spans = _trace(_new_spans(receiver, before, 3), CLIENT_TRACE)
    assert sorted(spans) == ["InferRequest", "add_sub_onnx", "compute"]
    assert spans["InferRequest"].parent_span_id == CLIENT_SPAN
    assert [e for e, _ in spans["InferRequest"].events] == [
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        "INFER_RESPONSE_COMPLETE",
        "GRPC_SEND_START",
        "GRPC_SEND_END",
    ]


def test_ensemble_spans_nest(server: ServerThread, receiver: OtlpReceiver) -> None:
    before = len(receiver.spans)
    url = f"http://{server.http_url}/v2/models/add_sub_ensemble/infer"
    assert requests.post(url, json=_body("A", "B", "e1"), timeout=30).status_code == 200
    spans = _new_spans(receiver, before, 6)
    by_id = {s.span_id: s for s in spans}
    (root,) = [s for s in spans if s.name == "InferRequest"]
    assert root.parent_span_id == ""  # no client context: a new trace
    tree = sorted((s.name, by_id[s.parent_span_id].name if s.parent_span_id else "") for s in spans)
    assert tree == [
        ("InferRequest", ""),
        ("add_sub", "add_sub_ensemble"),
        ("add_sub_ensemble", "InferRequest"),
        ("add_sub_onnx", "add_sub_ensemble"),
        ("compute", "add_sub"),
        ("compute", "add_sub_onnx"),
    ]
    ensemble = next(s for s in spans if s.name == "add_sub_ensemble")
    steps = [s for s in spans if s.parent_span_id == ensemble.span_id]
    for step in steps:
        assert step.attributes["triton.trace_parent_id"] == ensemble.attributes["triton.trace_id"]
        assert step.attributes["triton.request_id"] == "e1"


@pytest.mark.parametrize("propagated", [True, False], ids=["traceparent", "new_trace"])
def test_bls_children_nest_under_their_caller(
    server: ServerThread, receiver: OtlpReceiver, propagated: bool
) -> None:
    before = len(receiver.spans)
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
            {"name": "MODEL", "datatype": "BYTES", "shape": [1, 1], "data": ["add_sub"]},
            {"name": "MODE", "datatype": "INT32", "shape": [1, 1], "data": [1]},
        ]
    }
    url = f"http://{server.http_url}/v2/models/bls/infer"
    headers = {"traceparent": TRACEPARENT} if propagated else {}
    answer = requests.post(url, json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    info = next(o for o in answer.json()["outputs"] if o["name"] == "INFO")["data"][0]
    spans = _new_spans(receiver, before, 5)
    by_id = {s.span_id: s for s in spans}
    tree = sorted((s.name, by_id[s.parent_span_id].name if s.parent_span_id in by_id else "")
                  for s in spans)  # fmt: skip
    # as Triton's qa (opentelemetry_unittest _test_bls_trace): the child under the BLS model
    assert tree == [
        ("InferRequest", ""),
        ("add_sub", "bls"),
        ("bls", "InferRequest"),
        ("compute", "add_sub"),
        ("compute", "bls"),
    ]
    (trace_id,) = {s.trace_id for s in spans}
    if propagated:
        assert trace_id == CLIENT_TRACE
    caller = next(s for s in spans if s.name == "bls")
    child = next(s for s in spans if s.name == "add_sub")
    assert child.attributes["triton.trace_parent_id"] == caller.attributes["triton.trace_id"]
    # request.trace().get_context(): the W3C context of the model's span, as Triton gives it
    kind, context, _ = info.split("|")
    assert kind == "InferenceTrace"
    assert json.loads(context) == {"traceparent": f"00-{trace_id}-{caller.span_id}-01"}


def test_rate_zero_traces_only_propagated_requests(repo: Path, receiver: OtlpReceiver) -> None:
    trace = parse_trace_flags(_specs(receiver.url, rate="0"))
    before = len(receiver.spans)
    with running_server(repo, trace=trace) as srv:
        url = f"http://{srv.http_url}/v2/models/add_sub/infer"
        assert requests.post(url, json=_body(), timeout=30).status_code == 200
        headers = {"traceparent": TRACEPARENT}
        assert requests.post(url, json=_body(), headers=headers, timeout=30).status_code == 200
        bad = {"traceparent": "00-not-a-context-01"}  # invalid: not traced, still answered
        assert requests.post(url, json=_body(), headers=bad, timeout=30).status_code == 200
    # the server flushed its exporter when it stopped
    spans = receiver.spans[before:]
    assert len(spans) == 3
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}


def test_missing_receiver_does_not_fail_requests(repo: Path, tmp_path: Path) -> None:
    trace = parse_trace_flags(_specs("http://127.0.0.1:9/v1/traces"))  # nothing listens
    with running_server(repo, trace=trace) as srv:
        url = f"http://{srv.http_url}/v2/models/add_sub/infer"
        assert requests.post(url, json=_body(), timeout=30).status_code == 200


# nothing exported before the server stops, one span a batch: every span waits for the flush
_QUEUED_FLAGS = (
    "--trace-config", "mode=opentelemetry",
    "--trace-config", "opentelemetry,bsp_schedule_delay=600000",
    "--trace-config", "opentelemetry,bsp_max_export_batch_size=1",
    "--trace-config", "level=TIMESTAMPS",
    "--trace-config", "rate=1",
)  # fmt: skip


def _serve_and_stop(repo: Path, url: str, requests_sent: int) -> tuple[float, ServeProcess]:
    """Start ``repokit serve`` exporting to ``url``, send requests, SIGTERM it: the seconds it
    took to exit after the signal."""
    server = ServeProcess(
        str(repo), *PORT_FLAGS, *_QUEUED_FLAGS, "--trace-config", f"opentelemetry,url={url}"
    )
    try:
        infer = f"http://{server.url('HTTPService')}/v2/models/add_sub/infer"
        for _ in range(requests_sent):
            assert requests.post(infer, json=_body(), timeout=30).status_code == 200
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(timeout=120) == 0, server.text
        return time.monotonic() - signalled, server
    finally:
        server.kill()


def test_unreachable_receiver_does_not_hold_the_server_at_exit(repo: Path) -> None:
    # 5 requests: 15 batches queued at exit, which the exporter retried with backoff (1, 2,
    # 4 s each) until the span processor's 30 s shutdown wait ran out; tried once each now
    took, server = _serve_and_stop(repo, "http://127.0.0.1:9/v1/traces", 5)  # nothing listens
    assert took < 20, f"exit took {took:.1f} s:\n{server.text}"
    assert "Traceback" not in server.text


def test_reachable_receiver_gets_every_queued_span_at_exit(
    repo: Path, receiver: OtlpReceiver
) -> None:
    before = len(receiver.spans)
    _, server = _serve_and_stop(repo, receiver.url, 5)
    # each request: its InferRequest span, the model's span and its compute span
    spans = receiver.spans[before:]
    assert len(spans) == 15, server.text
    assert sorted({s.name for s in spans}) == ["InferRequest", "add_sub", "compute"]


class HungReceiver:
    """A receiver that takes every connection and reads what comes, but never answers."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1/traces"
        self._held: list[socket.socket] = []
        self.requested = threading.Event()  # some bytes of a request came
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            self._held.append(connection)
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        try:
            while connection.recv(65536):
                self.requested.set()
        except OSError:
            pass

    def close(self) -> None:
        self._listener.close()
        for connection in self._held:
            connection.close()


@pytest.mark.parametrize(
    "schedule_delay_ms", ["600000", "20"], ids=["queued_at_exit", "on_its_way_at_exit"]
)
def test_a_receiver_that_never_answers_does_not_hold_the_server_at_exit(
    repo: Path, monkeypatch: pytest.MonkeyPatch, schedule_delay_ms: str
) -> None:
    """The flush at exit is bounded as a whole (2 s): before, a receiver that took the
    connection and never answered held the exit for the exporter's timeout (10 s by default),
    for the batches queued at exit and for one already on its way when the server was told to
    stop; with the timeout made 600 s here, until the span processor gave up (30 s)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "600")
    receiver = HungReceiver()
    flags = [
        f
        if "bsp_schedule_delay" not in f
        else f"opentelemetry,bsp_schedule_delay={schedule_delay_ms}"
        for f in _QUEUED_FLAGS
    ]
    server = ServeProcess(
        str(repo), *PORT_FLAGS, *flags, "--trace-config", f"opentelemetry,url={receiver.url}"
    )
    try:
        infer = f"http://{server.url('HTTPService')}/v2/models/add_sub/infer"
        for _ in range(3):
            assert requests.post(infer, json=_body(), timeout=30).status_code == 200
        if schedule_delay_ms != "600000":
            assert receiver.requested.wait(60)  # a batch is on its way
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0, server.text  # a bound far beyond 2 s, below 30
        assert "Traceback" not in server.text
    finally:
        server.kill()
        receiver.close()
