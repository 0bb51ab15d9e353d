"""Run one checked request on a loaded version's scheduler and count it as Triton does.

Used by the service for client requests (on the standard path and on the wire lane) and by the
ensemble step runner for composing-model requests, so all go through the same scheduler and the
same statistics:

* the request's priority and timeout go to the scheduler (the dynamic batcher uses them);
* a request the scheduler rejects counts as a failure with reason REJECTED: one rejected by its
  queue timeout (as Triton) and one refused because the queue is full (``Exceeds maximum queue
  size``: Triton 2.51 counts these nowhere, neither in the statistics nor in the metrics, so a
  server refusing most of its load looked healthy; counting them is deliberate). Other
  scheduler errors raised at enqueue (a sequence rule) reach the client uncounted, as Triton;
* a request cancelled while it waited in a queue (``CancelledInQueue``), and one a scheduler
  answered CANCELLED (the other requests of a cancelled sequence), count with reason CANCELED;
* a request that ran is counted by the caller (``record_ran``) once its outputs are final;
  one that ran and failed (``record_failed``) counts with reason BACKEND, an ensemble's twice
  with reason OTHER (Triton 2.51's ensemble answers the error with reason OTHER and counts the
  failed request again when its last step ends; L0_model_queue checks that count);
  executions (and batch sizes) are counted by the scheduler's ``on_execution`` hook;
* a model version with the response cache (``loaded.response_cache``) is looked up here,
  before its scheduler sees the request: a hit comes back at once with the stored outputs and
  a :class:`CacheTiming` that says so, a miss runs and ``record_ran`` stores its result. This is
  the one place a request meets the cache, for client requests and ensemble steps alike; a
  version without a cache pays one attribute test here and one type test in ``record_ran``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from repokit.backends.base import BackendRequest, BackendResult, Timing, WireRequest
from repokit.core.loaded_model import LoadedVersion
from repokit.core.request_checks import SEQUENCE_END, SEQUENCE_START, prepare
from repokit.core.response_cache import ModelCache
from repokit.core.wire_lane import WireLane
from repokit.errors import Code, RepokitError, internal, unavailable
from repokit.protocol.types import InferRequest, InputSpec, RequestedOutput, SharedMemoryRef
from repokit.scheduler.base import CancelledInQueue, ScheduledResult, Scheduler
from repokit.scheduler.queue_policy import QUEUE_FULL_MESSAGE, TIMEOUT_MESSAGE

T = TypeVar("T")


@dataclass(slots=True)
class CacheTiming(Timing):
    """The timing of a request of a model with the response cache: a hit (no execution, the
    durations are 0) or a successful miss whose result ``record_ran`` stores under ``key``."""

    cache: ModelCache | None = None
    key: bytes = b""
    lookup_ns: int = 0
    hit: bool = False


def submit(
    loaded: LoadedVersion, request: BackendRequest, batch_size: int, traced: bool = False
) -> Awaitable[tuple[ScheduledResult, int]]:
    """The scheduled result and the request's duration in ns (scheduler errors raise, when
    awaited). A traced request goes through :func:`_submit_traced` (``traced``: it comes from
    there). The usual request (untraced, no cache) gets the scheduler's awaitable itself,
    timed: no coroutine of its own."""
    scheduler = loaded.scheduler
    if (
        scheduler is None
        or loaded.response_cache is not None
        or (request.trace is not None and not traced)
    ):
        return _submit_other(loaded, request, batch_size, traced)
    return _schedule(loaded, scheduler, request, batch_size)


async def _submit_other(
    loaded: LoadedVersion, request: BackendRequest, batch_size: int, traced: bool
) -> tuple[ScheduledResult, int]:
    """:func:`submit` of a traced request, a version without a scheduler (not ready) or one
    with the response cache."""
    if request.trace is not None and not traced:  # what an untraced request pays for tracing
        return await _submit_traced(loaded, request, batch_size)
    scheduler = loaded.scheduler
    if scheduler is None:
        raise unavailable(
            f"Request for unknown model: '{loaded.name}' version {loaded.version} is not at "
            "ready state"
        )
    if loaded.response_cache is not None:
        return await _submit_cached(loaded, loaded.response_cache, scheduler, request, batch_size)
    return await _schedule(loaded, scheduler, request, batch_size)


async def _submit_cached(
    loaded: LoadedVersion,
    cache: ModelCache,
    scheduler: Scheduler,
    request: BackendRequest,
    batch_size: int,
) -> tuple[ScheduledResult, int]:
    started = time.perf_counter_ns()
    key = cache.key(request)
    looked = time.perf_counter_ns()
    entry = cache.cache.lookup(key, cache.wanted(request))
    lookup_ns = time.perf_counter_ns() - looked
    if entry is not None:
        timing = CacheTiming(cache=cache, key=key, lookup_ns=lookup_ns, hit=True)
        result = BackendResult(outputs=list(entry.outputs))
        return ScheduledResult(result, looked - started, timing), time.perf_counter_ns() - started
    scheduled, _ = await _schedule(loaded, scheduler, request, batch_size)
    elapsed = time.perf_counter_ns() - started  # the key and the lookup included
    if scheduled.result.error is not None:  # not stored: a miss of its lookup alone
        loaded.stats.record_cache_miss(lookup_ns)
        return scheduled, elapsed
    ran = scheduled.timing
    timing = CacheTiming(
        ran.compute_input_ns,
        ran.compute_infer_ns,
        ran.compute_output_ns,
        ran.started_ns,
        cache=cache,
        key=key,
        lookup_ns=lookup_ns,
    )
    return ScheduledResult(scheduled.result, scheduled.queue_ns, timing), elapsed


def _schedule(
    loaded: LoadedVersion, scheduler: Scheduler, request: BackendRequest, batch_size: int
) -> Awaitable[tuple[ScheduledResult, int]]:
    return _timed(
        loaded,
        scheduler.submit(
            request, batch_size, priority=request.priority, timeout_us=request.timeout_us
        ),
    )


def submit_wire(
    loaded: LoadedVersion, lane: WireLane, request: WireRequest
) -> Awaitable[tuple[tuple[ScheduledResult, int] | None, int]]:
    """A request as its bytes on the version's wire lane: the scheduled result with the batch
    size the instance found (None when nothing ran), and the request's duration in ns."""
    return _timed(loaded, lane.scheduler.submit_wire(request))


async def _timed(loaded: LoadedVersion, scheduled: Awaitable[T]) -> tuple[T, int]:
    """``scheduled`` awaited as one in-flight request of the version, with its duration;
    a request the scheduler rejects is counted (see the module docstring)."""
    started = time.perf_counter_ns()
    loaded.begin()
    try:
        result = await scheduled
    except RepokitError as exc:
        if exc.message == TIMEOUT_MESSAGE or exc.message.endswith(QUEUE_FULL_MESSAGE):
            loaded.stats.record_failure(time.perf_counter_ns() - started, "REJECTED")
        elif exc.code is Code.CANCELLED:
            loaded.stats.record_failure(time.perf_counter_ns() - started, "CANCELED")
        raise
    except CancelledInQueue:
        loaded.stats.record_failure(time.perf_counter_ns() - started, "CANCELED")
        raise
    finally:
        loaded.end()
    return result, time.perf_counter_ns() - started


async def _submit_traced(
    loaded: LoadedVersion, request: BackendRequest, batch_size: int
) -> tuple[ScheduledResult, int]:
    """:func:`submit` recording QUEUE_START (and the queued inputs), the compute timestamps
    from the scheduler's measurements, and the backend's outputs."""
    trace = request.trace
    queue_start = trace.queued(request.inputs.values())
    scheduled, elapsed = await submit(loaded, request, batch_size, traced=True)
    if not loaded.is_ensemble:  # as Triton: an ensemble computes nothing itself
        trace.computed(queue_start, scheduled.queue_ns, scheduled.timing, time.monotonic_ns())
    trace.outputs(scheduled.result.outputs)
    return scheduled, elapsed


def record_ran(
    loaded: LoadedVersion, batch_size: int, elapsed_ns: int, scheduled: ScheduledResult
) -> None:
    """Count a request that ran and succeeded (an ensemble also counts one execution per
    request, as Triton 2.51's ensemble statistics do); with the response cache, count a hit as
    one, or store a missed request's result and count its miss."""
    timing = scheduled.timing
    if type(timing) is CacheTiming:
        if timing.hit:
            loaded.stats.record_cache_hit(elapsed_ns, scheduled.queue_ns, timing.lookup_ns)
            return
        assert timing.cache is not None
        store = timing.cache.cache
        inserted = store.insertion_ns
        store.insert(timing.key, scheduled.result.outputs)
        insert_ns = store.insertion_ns - inserted
        loaded.stats.record_cache_miss(timing.lookup_ns + insert_ns)
        elapsed_ns += insert_ns
    loaded.stats.record_success(batch_size, elapsed_ns, scheduled.queue_ns, scheduled.timing)
    if loaded.is_ensemble:
        loaded.stats.record_execution(batch_size, scheduled.timing)


def record_failed(loaded: LoadedVersion, elapsed_ns: int) -> None:
    """Count a request that ran and failed (see the module docstring)."""
    if loaded.is_ensemble:
        loaded.stats.record_failure(elapsed_ns, "OTHER")
        loaded.stats.record_failure(elapsed_ns, "OTHER")
    else:
        loaded.stats.record_failure(elapsed_ns, "BACKEND")


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
    prepared.backend_request.control = request.control  # a decoupled step's responses
    if request.trace is not None:  # the ensemble is traced: this step gets a child trace
        step = prepared.backend_request.trace = request.trace.spawn()
        step.start_request(loaded.name, loaded.version, request.request_id)
        try:
            scheduled, elapsed = await submit(loaded, prepared.backend_request, prepared.batch_size)
        finally:
            step.stamp("REQUEST_END")
            step.end()
    else:
        scheduled, elapsed = await submit(loaded, prepared.backend_request, prepared.batch_size)
    if scheduled.result.error is not None:
        record_failed(loaded, elapsed)
    else:
        record_ran(loaded, prepared.batch_size, elapsed, scheduled)
    return scheduled
