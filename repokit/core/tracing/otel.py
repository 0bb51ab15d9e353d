"""OpenTelemetry mode: each finished trace becomes spans exported over OTLP/HTTP (protobuf).

The spans are Triton's: an ``InferRequest`` span per request (the frontend's receive and send
timestamps and INFER_RESPONSE_COMPLETE as its events), a span named after the model from
``REQUEST_START`` to ``REQUEST_END`` (attributes ``triton.model_name``, ``triton.model_version``,
``triton.trace_id``, ``triton.trace_parent_id``, ``triton.request_id``), and a ``compute``
span from ``COMPUTE_START`` to ``COMPUTE_END`` inside it. A composing model's span is a child
of its ensemble's model span. A request that carries a W3C ``traceparent`` is traced whatever
the rate and count, its ``InferRequest`` span a child of the client's span.

Spans are built when the request is answered, from the recorded monotonic timestamps (shifted
to the wall clock once, when the exporter starts), and handed to the SDK's batch span
processor (``bsp_*`` settings), whose thread exports them; the server flushes it when it stops,
trying each queued batch once, within :data:`EXIT_FLUSH_S` in all (:class:`ReceiverSession`).
A python model that asks for its request's context (``request.trace().get_context()``) gets
Triton's JSON of the W3C context of its model span (``{"traceparent": "00-<trace id>-<span
id>-01"}``) while the span does not exist yet: the ids are chosen then (:meth:`context_of`)
and the span is given them when it is built (:class:`PlannedIds`).
This module is imported only in opentelemetry mode (the ``tracing`` extra).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any

try:
    import requests
    from opentelemetry import trace as otel_trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - the dev extra installs them
    raise ValueError(
        "--trace-config mode=opentelemetry needs the OpenTelemetry packages "
        "(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http): install repokit with "
        f"the 'tracing' extra, e.g. pip install 'repokit[tracing]' ({exc})"
    ) from None

from repokit.core.tracing.options import DEFAULT_OTEL_URL, TraceStartup

if TYPE_CHECKING:
    from repokit.core.tracing.trace import Trace

TRACER_NAME = "triton-server"
# at exit, the queued spans are sent within this many seconds in all (see OtelExporter.shutdown)
EXIT_FLUSH_S = 2.0
EXIT_JOIN_MARGIN_S = 0.5  # what the processor's shutdown may take beyond the last request
log = logging.getLogger(__name__)


class PlannedIds(RandomIdGenerator):
    """Random ids, except the next trace or span id when one was planned (the span a model
    already gave its context out for). Spans are built on the event loop only."""

    def __init__(self) -> None:
        self.next_trace_id = 0
        self.next_span_id = 0

    def generate_trace_id(self) -> int:
        planned, self.next_trace_id = self.next_trace_id, 0
        return planned or super().generate_trace_id()

    def generate_span_id(self) -> int:
        planned, self.next_span_id = self.next_span_id, 0
        return planned or super().generate_span_id()


class ReceiverSession(requests.Session):
    """The exporter's HTTP session. While the server runs, the exporter retries a receiver it
    cannot reach (with backoff: 1, 2, 4 s... up to its 10 s timeout, for each batch). Once the
    server stops (:meth:`stop_by`), each queued batch is tried once, as tritonserver's exporter
    tries it, and only until the flush's deadline: a failure is not worth a retry (nor are the
    batches after it), and a receiver that takes the connection but does not answer is not
    waited for beyond the deadline, so the server exits promptly when the receiver is
    unreachable or hung and still delivers the spans when it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = False
        self.unreachable = ""  # why the receiver failed while stopping
        self._deadline = 0.0  # time.monotonic() by which the flush at exit ends

    def stop_by(self, deadline: float) -> None:
        """The server stops: from now on each request is tried once, until ``deadline``."""
        self._deadline = deadline
        self.stopping = True

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        if self.stopping:
            if self.unreachable:
                raise _GiveUp(self.unreachable)
            left = self._deadline - time.monotonic()
            if left <= 0:
                self.unreachable = "the server is stopping and the receiver did not answer in time"
                raise _GiveUp(self.unreachable)
            kwargs["timeout"] = _within(kwargs.get("timeout"), left)
        try:
            response = super().request(*args, **kwargs)
        except requests.RequestException as exc:
            if not self.stopping:
                raise  # the exporter retries
            self.unreachable = f"the server is stopping and the receiver failed: {exc}"
            raise _GiveUp(self.unreachable) from exc
        if self.stopping and not response.ok:
            self.unreachable = (
                f"the server is stopping and the receiver answered {response.status_code}"
            )
            response.close()
            raise _GiveUp(self.unreachable)
        return response


def _within(timeout: Any, left: float) -> Any:
    """A requests timeout (None, seconds, or (connect, read)) that ends within ``left`` s."""
    if isinstance(timeout, tuple):
        return tuple(left if t is None else min(t, left) for t in timeout)
    return left if timeout is None else min(float(timeout), left)


class _GiveUp(requests.RequestException):
    """Not a connection error: the exporter's client gives the batch up without a retry."""


class OtelExporter:
    def __init__(self, startup: TraceStartup) -> None:
        url = startup.otel_setting("url", DEFAULT_OTEL_URL)
        if "://" not in url:  # tritonserver takes host:port/path
            url = f"http://{url}"
        self._ids = PlannedIds()
        self._session = ReceiverSession()
        self._provider = TracerProvider(
            resource=Resource.create(startup.otel_resources()), id_generator=self._ids
        )
        self._provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=url, session=self._session),
                max_queue_size=int(startup.otel_setting("bsp_max_queue_size", "2048")),
                schedule_delay_millis=float(startup.otel_setting("bsp_schedule_delay", "5000")),
                max_export_batch_size=int(startup.otel_setting("bsp_max_export_batch_size", "512")),
            )
        )
        self._tracer = self._provider.get_tracer(TRACER_NAME)
        self._propagator = TraceContextTextMapPropagator()
        self._offset = time.time_ns() - time.monotonic_ns()

    def extract(self, traceparent: str) -> Any:
        """The client's context from a W3C ``traceparent`` value, or None when invalid."""
        context = self._propagator.extract({"traceparent": traceparent})
        span_context = otel_trace.get_current_span(context).get_span_context()
        return context if span_context.is_valid else None

    def context_of(self, trace: Trace) -> str:
        """Triton's trace context of ``trace``'s model span (``get_context()``), its ids
        chosen now if the span was not asked for before."""
        root = trace.root
        if not root.otel_trace_id:
            parent = None
            if root.otel_context is not None:
                parent = otel_trace.get_current_span(root.otel_context).get_span_context()
            root.otel_trace_id = parent.trace_id if parent is not None else _random_id(128)
        if not trace.otel_span_id:
            trace.otel_span_id = _random_id(64)
        traceparent = f"00-{root.otel_trace_id:032x}-{trace.otel_span_id:016x}-01"
        return json.dumps({"traceparent": traceparent}, separators=(",", ":"))

    def export(self, trace: Trace) -> None:
        offset = self._offset
        tracer = self._tracer
        now = time.monotonic_ns()
        start = min((ns for _, ns in trace.events), default=now)
        end = max((ns for _, ns in trace.events), default=now)
        kind = otel_trace.SpanKind.SERVER
        if trace.otel_context is None:  # a new trace: the id given out, if any
            self._ids.next_trace_id = trace.otel_trace_id
        root = tracer.start_span(
            "InferRequest", context=trace.otel_context, kind=kind, start_time=start + offset
        )
        model_spans: dict[int, Any] = {}
        for item in (trace, *trace.spawned):
            parent = model_spans.get(item.parent_id, root)
            self._model_spans(item, parent, model_spans)
        root.end(end_time=end + offset)

    def _model_spans(self, trace: Trace, parent: Any, model_spans: dict[int, Any]) -> None:
        """The model span (and its compute span) of one trace; events before REQUEST_START
        and after REQUEST_END (the frontend's) go on ``parent``."""
        offset = self._offset
        tracer = self._tracer
        kind = otel_trace.SpanKind.SERVER
        model: Any = None
        compute: Any = None
        for name, ns in trace.events:
            at = ns + offset
            if name == "REQUEST_START":
                self._ids.next_span_id = trace.otel_span_id  # the id given out, if any
                model = tracer.start_span(
                    trace.model_name,
                    context=otel_trace.set_span_in_context(parent),
                    kind=kind,
                    start_time=at,
                )
                model.set_attribute("triton.model_name", trace.model_name)
                model.set_attribute("triton.model_version", trace.model_version)
                model.set_attribute("triton.trace_id", trace.id)
                model.set_attribute("triton.trace_parent_id", trace.parent_id)
                if trace.request_id:
                    model.set_attribute("triton.request_id", trace.request_id)
                model_spans[trace.id] = model
            elif name == "COMPUTE_START" and model is not None:
                compute = tracer.start_span(
                    "compute",
                    context=otel_trace.set_span_in_context(model),
                    kind=kind,
                    start_time=at,
                )
            # the response's completion belongs to the request, not to the model (as Triton)
            target = parent if name == "INFER_RESPONSE_COMPLETE" else compute or model or parent
            target.add_event(name, timestamp=at)
            if name == "COMPUTE_END" and compute is not None:
                compute.end(end_time=at)
                compute = None
            elif name == "REQUEST_END" and model is not None:
                if compute is not None:
                    compute.end(end_time=at)
                    compute = None
                model.end(end_time=at)
                model = None
        for span in (compute, model):  # a request that failed before its end was recorded
            if span is not None:
                span.end()

    def shutdown(self) -> None:
        """Export what is queued (each batch tried once) and stop the processor's thread,
        within :data:`EXIT_FLUSH_S` in all: a receiver that takes the connection and never
        answers held the exit for the exporter's timeout (10 s, also for a batch already on
        its way when the server stopped). Past the deadline the spans not delivered are given
        up (the processor's thread is a daemon: it does not hold the process)."""
        deadline = time.monotonic() + EXIT_FLUSH_S
        self._session.stop_by(deadline)
        flush = threading.Thread(target=self._provider.shutdown, name="otel-flush", daemon=True)
        flush.start()
        flush.join(EXIT_FLUSH_S + EXIT_JOIN_MARGIN_S)
        if flush.is_alive():
            log.warning(
                "OpenTelemetry: the trace receiver did not take the last spans within %g s; "
                "they are dropped",
                EXIT_FLUSH_S,
            )


def _random_id(bits: int) -> int:
    value = 0
    while not value:
        value = random.getrandbits(bits)
    return value
