"""A tiny OTLP/HTTP trace receiver for tests: an HTTP server on port 0 (its own thread) that
decodes each ``POST /v1/traces`` body as an ``ExportTraceServiceRequest`` (protobuf, from
opentelemetry-proto) and keeps the spans."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int]]
    resource: dict[str, Any] = field(default_factory=dict)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _from_json(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON (ids as hex, as the OTLP spec says) into the protobuf message."""
    document = json.loads(body)
    for resource_spans in document.get("resourceSpans", document.get("resource_spans", [])):
        for scope in resource_spans.get("scopeSpans", resource_spans.get("scope_spans", [])):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id",
                            "parent_span_id"):  # fmt: skip
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    request = _from_json(body)
                else:
                    request = ExportTraceServiceRequest.FromString(body)
                receiver._take(request, self.path)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.paths: list[str] = []
        self.content_types: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def _take(self, request: ExportTraceServiceRequest, path: str) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=[(e.name, e.time_unix_nano) for e in span.events],
                            resource=resource,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.paths.append(path)
            self.spans.extend(spans)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[ReceivedSpan]:
        """The spans received once there are at least ``count`` (or when ``timeout`` ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            time.sleep(0.02)
        with self._lock:
            return list(self.spans)


@contextmanager
def running_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver._thread.start()
    try:
        yield receiver
    finally:
        receiver._server.shutdown()
        receiver._server.server_close()
