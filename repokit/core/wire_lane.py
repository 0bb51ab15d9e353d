"""The wire lane: plain requests go to a python model's instance process as their wire bytes.

For a python-backend model with the default scheduler, a request's own work is small next to
the server's work around it: decoding the protocol message, the request checks, packing the
tensors for the instance process, and encoding the response. On the wire lane the server does
none of that: it hands the bytes it received to the instance process, which decodes and checks
the request, runs ``execute`` and encodes the response (the instance side of the frontend's
codec, :mod:`repokit.core.infer_codec`). That work then runs beside the model, in the instance
process, instead of on the event loop every client shares. Frontends do not choose: they call
``InferenceService.infer_encoded``, which takes the lane when it can (the HTTP frontend first
asks ``InferenceService.start_quick_wire``, which runs a lane request by callbacks, without a
task: :mod:`repokit.core.quick_wire`). The lane is an optional
capability of a scheduler (:class:`~repokit.scheduler.base.WireScheduler`: the default
scheduler over a :class:`~repokit.backends.base.WireBackend`, and the dynamic batcher over a
:class:`~repokit.backends.base.WireBatchBackend`; both are the python backend). The dynamic
batcher queues such a request with the batch size read from its bytes
(:mod:`repokit.protocol.wire_batch_size`) and runs it in a batch beside the standard path's
requests (:class:`~repokit.backends.base.WireEntry`).

The lane never changes an answer. The instance takes only requests that the standard path would
accept without a second look (the plain path's rules); for anything else it answers "take the
standard path" before the model runs, and the service runs the request as usual, which decides
any error and its message. Scheduling, cancellation and statistics are those of the standard path:
the same instance queues and merging, the same counters. A model qualifies when it is a
non-decoupled python model on the default scheduler or the dynamic batcher (without a batching
key: no ragged, shape-tensor or optional inputs, no inputs whose shapes must match to batch)
whose inputs all take the plain path (no
BYTES, reshape, shape-tensor or ragged inputs), whose outputs are not reshaped and that does
not use the response cache (its requests are looked up in :mod:`repokit.core.dispatch`).

It moves the decoding and encoding of small requests off the event loop that every client
shares; the throughput and server CPU it saves are in ``benchmarks/README.md`` (measured with
``benchmarks/grpc_vs_triton.py`` and ``benchmarks/http_vs_triton.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from repokit.backends.wire_plan import WirePlan
from repokit.core.request_checks import ModelIO
from repokit.scheduler.base import QuickWireScheduler, Scheduler, WireScheduler

# larger requests take the standard path: their tensors travel out of band there, without copies
WIRE_LANE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class WireLane:
    scheduler: WireScheduler
    plan: WirePlan
    # the scheduler when callbacks can drive its requests (repokit.core.quick_wire)
    quick: QuickWireScheduler | None = None


def wire_lane_for(
    name: str,
    version_text: str,
    io: ModelIO,
    scheduler: Scheduler | None,
    decoupled: bool,
    *,
    cached: bool,
) -> WireLane | None:
    """The lane of a started model version, or None when its requests cannot take it."""
    if (
        not isinstance(scheduler, WireScheduler)
        or not scheduler.takes_wire
        or decoupled
        or cached
        or io.fast_inputs is None
        or io.reshaped_outputs
    ):
        return None
    plan = WirePlan(
        model_name=name,
        version_text=version_text,
        max_batch_size=io.max_batch_size,
        inputs=dict(io.fast_inputs),
        outputs=frozenset(io.outputs),
    )
    quick = scheduler if isinstance(scheduler, QuickWireScheduler) else None
    return WireLane(scheduler, plan, quick)
