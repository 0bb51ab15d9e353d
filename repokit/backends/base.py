"""The backend interface: what the scheduler calls to run a model version.

A backend is created per loaded model version by ``repokit.backends.registry.create_backend``
(chosen by the config's backend/platform name; heavy imports happen inside the backend module).
It owns ``instance_count`` execution instances; the scheduler decides which instance runs which
batch and never runs two batches on one instance at once, unless the backend sets
``pipelines_executions``: then ``execute`` may be called for an instance that is still busy,
and the backend itself runs that instance's batches one after the other, in call order (the
python backend sends the batches that queued up meanwhile to its instance process in one
message).

``execute`` receives the requests of one batch (a single request for the default scheduler,
several for the dynamic/sequence batchers). Each request's inputs are fully resolved numpy arrays
(shared memory already read, control/state tensors already added by the scheduler). It returns
one ``BackendResult`` per request, in order: either output tensors or a ``RepokitError``.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from repokit.backends.wire_plan import WirePlan
from repokit.errors import RepokitError
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor, ParamValue

if TYPE_CHECKING:
    from repokit.backends.server_api import RequestControl, ServerApi


class RateSlot(Protocol):
    """One instance's turn at its rate-limiter resources (``--rate-limit execution_count``;
    implemented by repokit.scheduler.rate_limiter.InstanceSlot)."""

    @property
    def holding(self) -> bool: ...

    def request(self, on_grant: Callable[[], None]) -> None:
        """Ask for the resources; ``on_grant`` runs once they are held."""

    def withdraw(self) -> None:
        """Take back a request not granted yet."""

    async def acquire(self) -> None:
        """Wait until the resources are held."""

    def release(self) -> None:
        """Give the resources back."""


class RateSlots(Protocol):
    """The slots of one model version's instances (repokit.scheduler.rate_limiter.ModelSlots)."""

    def slot(self, instance: int) -> RateSlot | None:
        """Instance ``instance``'s slot (None: that instance is not limited)."""


def instance_count(config: mc.ModelConfig) -> int:
    """Total instances over every instance group (at least one)."""
    return max(1, sum(max(0, group.count) for group in config.instance_group))


@dataclass
class BackendRequest:
    """One request as a backend sees it."""

    inputs: dict[str, InferTensor]
    requested_outputs: tuple[str, ...]  # names the client asked for (all outputs when empty)
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    request_id: str = ""
    correlation_id: int | str = 0
    flags: int = 0  # 1 = SEQUENCE_START, 2 = SEQUENCE_END (Triton's TRITONSERVER_REQUEST_FLAG_*)
    priority: int = 0  # the request's priority level (0 = the model's default level)
    timeout_us: int = 0  # the request's queue timeout (0 = the queue policy's)
    # cancellation and streamed (decoupled) responses; None for plain unary requests
    control: RequestControl | None = None
    # the request's trace (repokit.core.tracing.trace.Trace) when it was sampled, else None:
    # the core records its queue and compute timestamps (backends do not look at it)
    trace: Any = None


@dataclass(slots=True)  # slots: built once per request, a third cheaper
class BackendResult:
    outputs: list[InferTensor] = field(default_factory=list)
    error: RepokitError | None = None
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    # the response as the instance encoded it for the client (wire lane only; no outputs then)
    encoded: bytes | None = None


@dataclass(frozen=True)
class ModelContext:
    """Everything a backend needs to load one version of a model."""

    name: str
    version: int
    model_dir: Path  # <repo>/<model>
    version_dir: Path  # <repo>/<model>/<version>
    repository: Path
    config: mc.ModelConfig  # normalised (instance groups filled in)
    config_json: str  # the config as Triton's /config JSON, as passed to python models
    server: ServerApi | None = None  # the serving core (BLS, model control, custom metrics)
    # python models: an execute that takes longer kills and restarts its instance (0 = off)
    execute_timeout_s: float = 0.0


def instance_names(context: ModelContext) -> list[str]:
    """``<group name>_<i>`` for every instance, as Triton names them (``add_sub_0_0`` ...)."""
    names: list[str] = []
    for index, group in enumerate(context.config.instance_group):
        group_name = group.name or f"{context.name}_{index}"
        names.extend(f"{group_name}_{i}" for i in range(max(0, group.count)))
    return names or [f"{context.name}_0_0"]


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs three times more
class Timing:
    """Per-execution durations in nanoseconds, for the statistics extension (never changed
    once made)."""

    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    # when the instance started the execution, time.monotonic_ns() (CLOCK_MONOTONIC, shared by
    # every process; the trace clock): a backend whose instances run in processes of their
    # own reports it (the python backend), so a trace's compute timestamps are the instance's
    # moments and not estimated from when its reply arrived; 0 when not known
    started_ns: int = 0


class Backend(abc.ABC):
    """A loaded model version with ``instance_count`` instances."""

    # True: execute() may be called while the instance runs another batch (see module doc)
    pipelines_executions: bool = False

    def __init__(self, context: ModelContext) -> None:
        self.context = context
        # set by the core before load() when the model may complete its own config (python
        # auto_complete_config): takes the completed config JSON, returns the context with the
        # normalised config (raises RepokitError when the completed config cannot load)
        self.on_config_completed: Callable[[str], ModelContext] | None = None
        # set by the core when the model's scheduler can run a request again (iterative
        # sequences: ``SequenceBatchScheduler.reschedule``). A backend whose model releases a
        # request for rescheduling calls it with that request (the object execute() received)
        # before execute() returns; the result execute() returns for it is then discarded.
        # Raises RepokitError when the request cannot be rescheduled.
        self.on_reschedule: Callable[[BackendRequest], None] | None = None
        # set by the core once the version serves: a backend whose instances keep failing (and
        # are no longer restarted) calls it with the reason; the core then marks the version
        # UNAVAILABLE with that reason and unloads it.
        self.on_failed: Callable[[str], None] | None = None
        # set by the core before unload() at shutdown: the time.monotonic() by which unload()
        # must be done (--exit-timeout-secs); a backend cuts its waits (finalize) short then
        self.unload_deadline: float | None = None
        # set by the core when --rate-limit execution_count limits this version's instances:
        # an instance executes a batch only while holding its slot (None: not limited). The
        # schedulers take the slot around execute(); a backend that pipelines executions takes
        # it itself when the instance really starts a batch (repokit.scheduler.rate_limiter).
        self.rate_slots: RateSlots | None = None

    @property
    @abc.abstractmethod
    def instance_count(self) -> int: ...

    @abc.abstractmethod
    async def load(self) -> None:
        """Create every instance; raise RepokitError with Triton's message on failure."""

    @abc.abstractmethod
    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        """Run one batch on one instance; never raises for a model error (see BackendResult)."""

    @abc.abstractmethod
    async def unload(self) -> None:
        """Release every instance (python models get finalize())."""

    def configure(self, settings: dict[str, str]) -> None:
        """The server's ``--backend-config`` settings for this backend (before load();
        raises ValueError for a value it cannot use). Backends without settings ignore them."""
        return

    def health(self) -> bool:
        """False when an instance died; the model then reports not ready."""
        return True

    def problem(self) -> str:
        """Why the backend is not healthy right now ("" when it is), e.g. an instance that
        is being restarted; the repository index shows it."""
        return ""

    def describe(self) -> dict[str, Any]:
        return {"backend": type(self).__name__, "instances": self.instance_count}

    # --- in-place instance updates (repokit.core.instance_update) ----------------------
    # True: add_instances and remove_instances work (the instances' ids are their slots:
    # those of the instances loaded first are 0..instance_count-1, added ones get new ones)
    updates_instances: bool = False

    async def add_instances(self, names: list[str]) -> list[int]:
        """Create and initialize instances named ``names`` beside the serving ones; their
        ids. RepokitError (Triton's message) when one fails: none is added then."""
        raise NotImplementedError

    async def remove_instances(self, instances: list[int]) -> None:
        """Finalize and release these instances (nothing executes on them any more)."""
        raise NotImplementedError


# --- the wire lane: an optional capability (repokit.core.wire_lane) ----------------------------
class WireRequest(NamedTuple):
    """One request as its protocol bytes, for an instance that decodes it itself."""

    codec: str  # the instance's decoder and encoder ("grpc", "json": InferCodec.lane)
    raw: bytes
    plan: WirePlan  # what the instance checks the request against
    limit: int  # the server's maximum input size (0: none)


class WireRun(NamedTuple):
    """A wire request that ran: its result (``encoded`` set when the instance encoded the
    response; else the outputs or the error, which the server finishes as usual), the batch
    size the instance found (0 when the model does not batch) and the execution's durations."""

    result: BackendResult
    batch_size: int
    timing: Timing


@runtime_checkable
class WireBackend(Protocol):
    """A backend whose instances take requests as their protocol bytes (the python backend):
    the instance decodes and checks the request, runs the model and encodes the response."""

    async def execute_wire(self, instance: int, request: WireRequest) -> WireRun | None:
        """Run one request on one instance (pipelined, as ``execute``); None when the instance
        does not take it (nothing ran: the server's standard path answers it)."""


@runtime_checkable
class QuickWireBackend(WireBackend, Protocol):
    """A wire backend whose :meth:`WireBackend.execute_wire` a caller may also drive by
    callbacks, step by step (:mod:`repokit.core.quick_wire`): ``send_wire`` queues the request
    and returns what was sent (None: not taken, nothing sent), whose ``reply`` future
    completes with the instance's reply; then ``wire_reply`` gives the run (None: nothing ran;
    an awaitable when the result comes later), or ``wire_cancelled`` tells the instance that
    the client went away."""

    def send_wire(self, instance: int, request: WireRequest) -> Any: ...

    def wire_reply(self, sent: Any) -> WireRun | Awaitable[WireRun] | None: ...

    def wire_cancelled(self, sent: Any) -> None: ...


@dataclass(eq=False, slots=True)
class WireEntry:
    """A wire request queued in a batch with requests of the standard path (the dynamic
    batcher's wire lane): its bytes, the batch size the server read from them (0 when the
    model does not batch), and while it is at an instance process, how to tell that process
    the request was cancelled (set and cleared by the backend)."""

    request: WireRequest
    batch_size: int
    cancel: Callable[[], None] | None = None


# the result of a wire entry the instance did not take (nothing ran for it): the server's
# standard path answers the request
WIRE_FALLBACK = BackendResult()


@runtime_checkable
class WireBatchBackend(Protocol):
    """A backend that runs batches in which some requests are wire entries (the python
    backend): the instance decodes each entry, runs ``execute`` once on the whole batch and
    encodes the entries' responses."""

    async def execute_entries(
        self, instance: int, entries: list[BackendRequest | WireEntry]
    ) -> tuple[list[BackendResult], Timing]:
        """``execute`` of a batch that may hold wire entries: one result per entry, in order;
        :data:`WIRE_FALLBACK` for an entry the instance did not take."""
