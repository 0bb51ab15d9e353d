"""Run one checked request on a loaded version's scheduler and count it as Triton does.

Used by the service for client requests and by the ensemble step runner for composing-model
requests, so both go through the same scheduler and the same statistics:

* the request's priority and timeout go to the scheduler (the dynamic batcher uses them);
* a request the scheduler rejects counts as a failure with reason REJECTED: one rejected by its
  queue timeout (as Triton) and one refused because the queue is full (``Exceeds maximum queue
  size``: Triton 2.51 counts these nowhere, neither in the statistics nor in the metrics, so a
  server refusing most of its load looked healthy; counting them is deliberate). Other
  scheduler errors raised at enqueue (a sequence rule) reach the client uncounted, as Triton;
* a request that ran is counted by the caller (``record_success``) once its outputs are final;
  executions (and batch sizes) are counted by the scheduler's ``on_execution`` hook.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from repokit.backends.base import BackendRequest
from repokit.core.loaded_model import LoadedVersion
from repokit.core.request_checks import SEQUENCE_END, SEQUENCE_START, prepare
from repokit.errors import RepokitError, internal, unavailable
from repokit.protocol.types import InferRequest, InputSpec, RequestedOutput, SharedMemoryRef
from repokit.scheduler.base import ScheduledResult
from repokit.scheduler.queue_policy import QUEUE_FULL_MESSAGE, TIMEOUT_MESSAGE


async def submit(
    loaded: LoadedVersion, request: BackendRequest, batch_size: int
) -> tuple[ScheduledResult, int]:
    """The scheduled result and the request's duration in ns (scheduler errors raise)."""
    scheduler = loaded.scheduler
    if scheduler is None:
        raise unavailable(
            f"Request for unknown model: '{loaded.name}' version {loaded.version} is not at "
            "ready state"
        )
    started = time.perf_counter_ns()
    loaded.begin()
    try:
        scheduled = await scheduler.submit(
            request, batch_size, priority=request.priority, timeout_us=request.timeout_us
        )
    except RepokitError as exc:
        if exc.message == TIMEOUT_MESSAGE or exc.message.endswith(QUEUE_FULL_MESSAGE):
            loaded.stats.record_failure(time.perf_counter_ns() - started, "REJECTED")
        raise
    finally:
        loaded.end()
    return scheduled, time.perf_counter_ns() - started


def record_ran(
    loaded: LoadedVersion, batch_size: int, elapsed_ns: int, scheduled: ScheduledResult
) -> None:
    """Count a request that ran and succeeded (an ensemble also counts one execution per
    request, as Triton 2.51's ensemble statistics do)."""
    loaded.stats.record_success(batch_size, elapsed_ns, scheduled.queue_ns, scheduled.timing)
    if loaded.is_ensemble:
        loaded.stats.record_execution(batch_size, scheduled.timing)


def composing_request(model_name: str, request: BackendRequest) -> InferRequest:
    """An ensemble step's request as a protocol request, so the composing model applies its
    own request checks (shapes, datatypes, batch size) exactly as for a client request."""
    return InferRequest(
        model_name=model_name,
        id=request.request_id,
        inputs=[
            InputSpec(t.name, t.datatype, t.shape, t.data, parameters=dict(t.parameters))
            for t in request.inputs.values()
        ],
        outputs=[RequestedOutput(name) for name in request.requested_outputs],
        parameters=dict(request.parameters),
        sequence_id=request.correlation_id,
        sequence_start=bool(request.flags & SEQUENCE_START),
        sequence_end=bool(request.flags & SEQUENCE_END),
        priority=request.priority,
        timeout_us=request.timeout_us,
    )


def _no_shared_memory(ref: SharedMemoryRef) -> npt.NDArray[np.uint8]:
    raise internal(f"an ensemble step cannot read shared memory region '{ref.region}'")


async def run_composing(loaded: LoadedVersion, request: BackendRequest) -> ScheduledResult:
    """One ensemble step on a composing model: its checks, its scheduler, its statistics.
    Errors come back in the result (or raise RepokitError), the ensemble prefixes them; the
    timing goes into the ensemble's own statistics (Triton sums the steps' durations)."""
    prepared = prepare(loaded.io, composing_request(loaded.name, request), _no_shared_memory)
    scheduled, elapsed = await submit(loaded, prepared.backend_request, prepared.batch_size)
    result = scheduled.result
    if result.error is not None:
        loaded.stats.record_failure(elapsed, "BACKEND")
    else:
        record_ran(loaded, prepared.batch_size, elapsed, scheduled)
    return scheduled
