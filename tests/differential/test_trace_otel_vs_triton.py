"""Differential, OpenTelemetry mode: real Triton 2.51 and repokit, each exporting to its own OTLP
receiver started by the test, give the same span trees (names, parents, event names,
attributes apart from trace ids) for the same requests, honour the client's ``traceparent``
alike and show the same trace settings. Run with ``-m triton``.

Deliberate difference: Triton's exporter sends OTLP/JSON, repokit's OTLP/protobuf (the receiver
reads both); timestamps are not compared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from repokit.core.tracing.options import parse_trace_flags
from tests.differential.test_trace_vs_triton import ENSEMBLE
from tests.differential.triton_reference import TritonReference, running_triton
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, running_receiver

pytestmark = pytest.mark.triton

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"


def _specs(url: str) -> list[str]:
    return [
        "mode=opentelemetry",
        f"opentelemetry,url={url}",
        "opentelemetry,resource=service.name=differential",
        "opentelemetry,bsp_schedule_delay=50",
        "level=TIMESTAMPS",
        "rate=1",
    ]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = copy_models(tmp_path_factory.mktemp("otel_repo"), ("add_sub",))
    (repo / "twice" / "1").mkdir(parents=True)
    (repo / "twice" / "config.pbtxt").write_text(ENSEMBLE)
    return repo


@pytest.fixture(scope="module")
def triton_receiver() -> Iterator[OtlpReceiver]:
    with running_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def repokit_receiver() -> Iterator[OtlpReceiver]:
    with running_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def triton(
    repository: Path, triton_receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonReference]:
    flags = [f"--trace-config={spec}" for spec in _specs(triton_receiver.url)]
    with running_triton(repository, tmp_path_factory.mktemp("triton"), flags, ready=()) as srv:
        yield srv


@pytest.fixture(scope="module")
def repokit(repository: Path, repokit_receiver: OtlpReceiver) -> Iterator[ServerThread]:
    trace = parse_trace_flags(_specs(repokit_receiver.url))
    with running_server(repository, allow_grpc=True, trace=trace) as srv:
        yield srv


def _body(first: str, second: str, request_id: str) -> dict[str, Any]:
    return {
        "id": request_id,
        "inputs": [
            {"name": first, "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
            {"name": second, "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16},
        ],
    }


def _send(base: str) -> None:
    headers = {"traceparent": TRACEPARENT}
    one = requests.post(
        f"{base}/v2/models/add_sub/infer", json=_body("INPUT0", "INPUT1", "one"), headers=headers
    )
    assert one.status_code == 200
    ens = requests.post(f"{base}/v2/models/twice/infer", json=_body("A", "B", "ens"))
    assert ens.status_code == 200


def _tree(spans: list[ReceivedSpan]) -> list[tuple[Any, ...]]:
    """Each span as (name, its parent's name or the client's trace when it has none here,
    event names, attributes without trace ids), sorted."""
    by_id = {s.span_id: s for s in spans}
    out = []
    for span in spans:
        parent = by_id.get(span.parent_span_id)
        if parent is not None:
            parent_name = parent.name
        else:
            parent_name = "client" if span.trace_id == CLIENT_TRACE else ""
        attributes = {k: v for k, v in span.attributes.items() if "trace_id" not in k}
        if "triton.trace_parent_id" in span.attributes:
            attributes["triton.trace_parent_id"] = span.attributes["triton.trace_parent_id"] != 0
        out.append(
            (
                span.name,
                parent_name,
                tuple(name for name, _ in span.events),
                tuple(sorted(attributes.items())),
                span.resource.get("service.name"),
            )
        )
    return sorted(out, key=repr)


def test_same_span_trees(
    triton: TritonReference,
    repokit: ServerThread,
    triton_receiver: OtlpReceiver,
    repokit_receiver: OtlpReceiver,
) -> None:
    _send(triton.endpoints.http)
    _send(repokit.endpoints.http)
    # add_sub: 3 spans; the ensemble: InferRequest, its span, two steps with their compute
    theirs = triton_receiver.wait_for(9)
    ours = repokit_receiver.wait_for(9)
    assert len(theirs) == 9
    assert _tree(ours) == _tree(theirs)
    client_spans = [s for s in ours if s.trace_id == CLIENT_TRACE]
    assert len(client_spans) == 3


def test_same_settings(triton: TritonReference, repokit: ServerThread) -> None:
    def answer(base: str, method: str, body: bytes | None = None) -> tuple[int, Any]:
        reply = requests.request(method, f"{base}/v2/trace/setting", data=body, timeout=30)
        document = reply.json()
        if "url" in document:
            document["url"] = "<receiver>"
        return reply.status_code, document

    for method, body in (
        ("GET", None),
        ("POST", b'{"trace_rate": "7"}'),
        ("POST", b'{"trace_count": "3", "trace_level": ["TIMESTAMPS"]}'),
        ("POST", b'{"trace_rate": null, "trace_count": null}'),
        ("POST", b'{"log_frequency": "2"}'),
        ("GET", None),
    ):
        assert answer(repokit.endpoints.http, method, body) == answer(
            triton.endpoints.http, method, body
        ), (method, body)
