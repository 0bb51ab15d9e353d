"""One sampled trace: what the request path records for it.

The frontends start a trace (:meth:`TraceManager.sample`) and record their receive and send
times; the core records ``REQUEST_START`` / ``QUEUE_START`` / ``COMPUTE_*`` /
``INFER_RESPONSE_COMPLETE`` / ``REQUEST_END`` (:mod:`repokit.core.dispatch` and the service);
each composing model of an ensemble gets a child trace (its own id, ``parent_id`` = the
ensemble's). At TENSORS level the inputs as queued (``TENSOR_QUEUE_INPUT``) and the backend's
outputs (``TENSOR_BACKEND_OUTPUT``) are recorded with their data, as Triton formats them. The
root trace is finished by the frontend once the response is sent; once it is and every child
has ended (a BLS request may outlive its caller's response, as Triton keeps a trace until its
last child is released), its objects and its children's are collected by its setting (triton
mode, as one trace) or exported as spans (opentelemetry mode).

Timestamps are ``time.monotonic_ns()`` (Triton's steady clock; CLOCK_MONOTONIC, which every
process of the machine shares). The compute timestamps are placed from the scheduler's
measurements: ``COMPUTE_START`` when the instance started the execution (the python backend's
instance processes report that moment on the same clock; a pipelined batch may wait there
while the instance runs another, and a reply may arrive late on a busy machine, so no estimate
from the reply's arrival would do), else after ``QUEUE_START`` by the request's queue time,
``COMPUTE_INPUT_END`` after it by the execution's input duration,
``COMPUTE_END`` when the server has the result, ``COMPUTE_OUTPUT_START`` before it by the output
duration (the python backend measures the durations in the instance process). As with Triton's
python backend, whose compute timestamps are taken in the server around the stub's work, the
infer span holds the trip back from the instance, so the requests a model makes while it
executes (BLS) lie within it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from repokit.core.tracing.setting import (
    OTEL_MODE,
    TENSORS,
    TIMESTAMPS,
    TRITON_MODE,
    TraceSetting,
)

if TYPE_CHECKING:
    from repokit.backends.base import Timing
    from repokit.core.tracing.manager import TraceManager
    from repokit.protocol.types import InferTensor

QUEUE_INPUT = "TENSOR_QUEUE_INPUT"
BACKEND_OUTPUT = "TENSOR_BACKEND_OUTPUT"


def _format_values(datatype: str, data: Any) -> str:
    """A tensor's elements as Triton's trace writes them: comma separated, floats with six
    significant digits, booleans as 0/1, strings quoted; FP16/BF16 are left empty."""
    if datatype in ("FP16", "BF16"):
        return ""
    array = np.asarray(data)
    flat = array.reshape(-1)
    if datatype == "BYTES":
        parts = []
        for item in flat.tolist():
            text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            parts.append(f'"{text}"')
        return ",".join(parts)
    if datatype in ("FP32", "FP64"):
        return ",".join("%g" % v for v in flat.tolist())  # noqa: UP031 - C++ stream default
    if datatype == "BOOL":
        return ",".join("1" if v else "0" for v in flat.tolist())
    return ",".join(str(v) for v in flat.tolist())


class Trace:
    __slots__ = (
        "events",
        "finished",
        "id",
        "level",
        "manager",
        "model_name",
        "model_version",
        "open_children",
        "otel_context",
        "otel_span_id",
        "otel_trace_id",
        "parent_id",
        "request_id",
        "root",
        "setting",
        "spawned",
        "started",
        "tensors",
    )

    def __init__(
        self,
        setting: TraceSetting,
        trace_id: int,
        manager: TraceManager,
        parent: Trace | None = None,
        otel_context: Any = None,
    ) -> None:
        self.setting = setting
        self.level = setting.level
        self.id = trace_id
        self.manager = manager
        self.parent_id = parent.id if parent is not None else 0
        self.root: Trace = parent.root if parent is not None else self
        self.otel_context = otel_context  # the client's (propagated) context, root only
        # opentelemetry mode, once a model asked for its context: the ids its spans get
        self.otel_trace_id = 0  # root only
        self.otel_span_id = 0  # this trace's model span
        self.model_name = ""
        self.model_version = -1
        self.request_id = ""
        self.events: list[tuple[str, int]] = []
        self.tensors: list[tuple[str, str, str, str, str]] = []  # activity, name, data...
        self.spawned: list[Trace] = []  # the root: its children's traces (any depth), in order
        self.open_children = 0  # the root: children spawned and not ended yet
        self.finished = False
        self.started = False  # the request reached a model (REQUEST_START)

    @property
    def tensors_wanted(self) -> bool:
        return bool(self.level & TENSORS) and self.setting.mode == TRITON_MODE

    def stamp(self, name: str, ns: int | None = None) -> None:
        if self.level & TIMESTAMPS:
            self.events.append((name, time.monotonic_ns() if ns is None else ns))

    def start_request(
        self, model_name: str, model_version: int, request_id: str, ns: int | None = None
    ) -> None:
        """The model the request runs on is known: its header, and REQUEST_START."""
        self.model_name = model_name
        self.model_version = model_version
        self.request_id = request_id
        self.started = True
        self.stamp("REQUEST_START", ns)

    def spawn(self) -> Trace:
        """A child trace (an ensemble step, a BLS request): its caller calls :meth:`end`
        once it is done with it."""
        child = Trace(self.setting, self.manager.new_id(), self.manager, parent=self)
        root = self.root
        root.spawned.append(child)
        root.open_children += 1
        return child

    def end(self) -> None:
        """A child trace is done (its request ended): the root is collected if it was
        waiting for this one."""
        root = self.root
        root.open_children -= 1
        if root.finished and not root.open_children:
            self.manager.finished(root)

    def queued(self, inputs: Iterable[InferTensor]) -> int:
        """QUEUE_START (and the inputs at TENSORS level); the time stamped."""
        now = time.monotonic_ns()
        self.stamp("QUEUE_START", now)
        if self.tensors_wanted:
            for tensor in inputs:
                self.record_tensor(QUEUE_INPUT, tensor)
        return now

    def computed(self, queue_start: int, queue_ns: int, timing: Timing, ended: int) -> None:
        """COMPUTE_START .. COMPUTE_END from the execution's start (the instance's moment when
        the backend reports it, else after ``queue_start`` by the scheduler's queue time), its
        durations and the moment the server had the result (``ended``, monotonic ns)."""
        started = timing.started_ns
        start = max(started, queue_start) if started else queue_start + queue_ns
        input_end = start + timing.compute_input_ns
        end = max(ended, input_end + timing.compute_infer_ns + timing.compute_output_ns)
        output_start = end - timing.compute_output_ns
        self.stamp("COMPUTE_START", start)
        self.stamp("COMPUTE_INPUT_END", input_end)
        self.stamp("COMPUTE_OUTPUT_START", output_start)
        self.stamp("COMPUTE_END", end)

    def outputs(self, tensors: Iterable[InferTensor]) -> None:
        if self.tensors_wanted:
            for tensor in tensors:
                self.record_tensor(BACKEND_OUTPUT, tensor)

    def record_tensor(self, activity: str, tensor: InferTensor) -> None:
        self.tensors.append(
            (
                activity,
                tensor.name,
                _format_values(tensor.datatype, tensor.data),
                ",".join(str(d) for d in tensor.shape),
                tensor.datatype,
            )
        )

    def context(self) -> str | None:
        """What ``request.trace().get_context()`` gives a python model executing this trace's
        request: in opentelemetry mode the W3C context of its model span as Triton's JSON;
        None in triton mode (Triton sets a context only in opentelemetry mode)."""
        otel = self.manager.otel
        if self.setting.mode != OTEL_MODE or otel is None:
            return None
        return otel.context_of(self)

    def finish(self) -> None:
        """The request is answered (root trace; called once by the frontend)."""
        if not self.finished:
            self.finished = True
            if not self.open_children:
                self.manager.finished(self)

    # --- output --------------------------------------------------------------------------
    def objects(self) -> list[str]:
        """Triton's JSON objects of this trace: its header, one object per timestamp, one
        per tensor."""
        header: dict[str, Any] = {
            "id": self.id,
            "model_name": self.model_name,
            "model_version": self.model_version,
        }
        if self.request_id:
            header["request_id"] = self.request_id
        if self.parent_id:
            header["parent_id"] = self.parent_id
        out: list[str] = []
        for name, ns in self.events:
            if name == "REQUEST_START":  # the header comes with the request, as in Triton
                out.append(json.dumps(header, separators=(",", ":")))
                header = {}
            out.append(
                json.dumps(
                    {"id": self.id, "timestamps": [{"name": name, "ns": ns}]},
                    separators=(",", ":"),
                )
            )
        if header:  # no timestamps recorded (TENSORS level)
            out.insert(0, json.dumps(header, separators=(",", ":")))
        for activity, name, data, shape, dtype in self.tensors:
            out.append(
                json.dumps(
                    {
                        "id": self.id,
                        "activity": activity,
                        "tensor": {"name": name, "data": data, "shape": shape, "dtype": dtype},
                    },
                    separators=(",", ":"),
                )
            )
        return out
