"""The ensemble scheduler: ``ensemble_scheduling`` steps run as a DAG.

A step starts as soon as every ensemble tensor in its ``input_map`` exists; steps whose inputs
are ready run concurrently. Tensors are routed by name only (``input_map`` / ``output_map``
rename the same numpy arrays, never copy them). Each step calls the injected
``infer(model_name, version, request)`` — the core's entry point for a composing model, so the
composing models keep their own schedulers and statistics, and an ensemble step may itself be
an ensemble. ``version`` is the step's ``model_version`` (-1 = latest READY).

An optional ensemble input the request leaves out, and a step output the composing model did
not produce, are absent tensors (Triton's placeholders, core ``ensemble_scheduler.cc``): they
count as present for the steps that wait for them, which then run without that input (it is
optional there too), and an ensemble output that is absent is left out of the response.

The request's parameters, id, correlation id and sequence flags are passed to every step. A
failing step fails the request with the step's code and message prefixed by
``in ensemble '<name>', ``; the result holds the requested ensemble outputs (all when none were
requested). Steps that lead to no requested output do not run (Triton prunes them, core
``EnsembleContext``): a request for one output runs only that output's steps. A response with
outputs that a step made carries the request's ``sequence_id``, ``sequence_start`` and
``sequence_end`` as response parameters, as Triton's ensemble adds them (once here; Triton's
HTTP JSON repeats them once per such output). Tensors pass between models that batch and
models that do not as Triton passes them (``batch_reshaped``): a batch dimension of 1 is added
or stripped where the receiving model's config dims call for it, the ensemble's outputs too.

An ensemble with a decoupled model in its steps is decoupled (the core sets its transaction
policy at load, as Triton does) and streams: every response of a decoupled step goes on through
the steps after it as a branch of its own, and each branch that ends with the requested outputs
is one response of the ensemble (``_stream``); the final flag follows the last branch.
``max_inflight_requests`` (0 = unlimited) bounds the in-flight calls of each step
across all requests.

Statistics as Triton 2.51 reports them for an ensemble (measured on an ensemble of two python
models): the ensemble request's compute_input/infer/output are the sums of its composing
requests' durations (``ScheduledResult.timing`` of every step that ran), and its queue time is
only the ensemble's own wait before its first step was dispatched (not the steps' queue times).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from repokit.backends.base import BackendRequest, BackendResult, Timing
from repokit.backends.server_api import RequestControl
from repokit.errors import RepokitError, internal, unavailable
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor, ParamValue
from repokit.scheduler.base import ScheduledResult, Scheduler

# (model name, version or -1, request) -> the composing model's scheduled result
InferCallable = Callable[[str, int, BackendRequest], Awaitable[ScheduledResult]]


@dataclass(frozen=True)
class StepModel:
    """What the ensemble needs to know of a composing model to hand it tensors: whether it
    batches and its inputs' config dims."""

    batching: bool
    input_dims: dict[str, tuple[int, ...]]
    decoupled: bool = False


# (model name, version or -1) -> the composing model, None when it is not loaded
DescribeCallable = Callable[[str, int], "StepModel | None"]


def batch_reshaped(
    config_dims: tuple[int, ...] | None,
    batching: bool,
    tensor_batch: int,
    shape: tuple[int, ...],
) -> tuple[int, ...]:
    """The shape a tensor is handed on with between a model that batches and one that does not
    (Triton's ``EnsembleContext::ReshapeTensorDims``). ``tensor_batch`` is the batch size of
    the request that made the tensor (0: a model or ensemble without batching). To a batching
    model an unbatched tensor whose shape matches the config dims gets a batch dimension of 1;
    to a model without batching a tensor of batch 1 whose shape does not match loses it."""
    if config_dims is None or batching == (tensor_batch != 0):
        return shape
    if batching:
        return (1, *shape) if _matches(config_dims, shape) else shape
    if tensor_batch == 1 and not _matches(config_dims, shape):
        return shape[1:]
    return shape


def _matches(config_dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return len(config_dims) == len(shape) and all(
        a == b or a == -1 or b == -1 for a, b in zip(config_dims, shape, strict=True)
    )


@dataclass(frozen=True, eq=False)
class EnsembleStep:
    index: int
    model_name: str
    model_version: int
    input_map: tuple[tuple[str, str], ...]  # (model input, ensemble tensor)
    output_map: tuple[tuple[str, str], ...]  # (model output, ensemble tensor)

    needs: frozenset[str] = frozenset()  # the ensemble tensors the step waits for
    routes: dict[str, str] = field(default_factory=dict)  # model output -> ensemble tensor


def sequence_parameters(request: BackendRequest) -> dict[str, ParamValue]:
    """What Triton 2.51's ensemble adds to a response whose outputs a step made
    (``EnsembleContext::CheckAndSetEnsembleOutput``): the request's correlation id (0 without
    one; a string id stays a string) and its sequence start and end flags."""
    return {
        "sequence_id": request.correlation_id,
        "sequence_start": bool(request.flags & 1),
        "sequence_end": bool(request.flags & 2),
    }


def ensemble_steps(config: mc.ModelConfig) -> tuple[EnsembleStep, ...]:
    return tuple(
        EnsembleStep(
            index=i,
            model_name=step.model_name,
            model_version=int(step.model_version),
            input_map=tuple(sorted(step.input_map.items())),
            output_map=tuple(sorted(step.output_map.items())),
            needs=frozenset(step.input_map.values()),
            routes=dict(step.output_map),
        )
        for i, step in enumerate(config.ensemble_scheduling.step)
    )


def needed_steps(
    steps: tuple[EnsembleStep, ...], wanted: frozenset[str]
) -> tuple[EnsembleStep, ...]:
    """The steps whose outputs are wanted or feed a step that is needed, in config order."""
    tensors = set(wanted)
    needed: set[int] = set()
    changed = True
    while changed:
        changed = False
        for step in steps:
            if step.index not in needed and tensors.intersection(step.routes.values()):
                needed.add(step.index)
                tensors.update(step.needs)
                changed = True
    return tuple(s for s in steps if s.index in needed)


class EnsembleScheduler(Scheduler):
    def __init__(
        self,
        config: mc.ModelConfig,
        infer: InferCallable,
        describe: DescribeCallable | None = None,
    ) -> None:
        self._name = config.name
        self._infer = infer
        self._describe = describe
        self._batching = config.max_batch_size > 0
        self._output_dims = {o.name: tuple(o.dims) for o in config.output}
        self._steps = ensemble_steps(config)
        self._outputs = tuple(o.name for o in config.output)
        self._optional = tuple(i.name for i in config.input if i.optional)
        self._max_inflight = int(config.ensemble_scheduling.max_inflight_requests)
        self._limits: dict[int, asyncio.Semaphore] = {}
        # requested outputs -> the steps they need (subsets of the config's outputs: bounded)
        self._pruned: dict[frozenset[str], tuple[EnsembleStep, ...]] = {}
        self._running = False

    async def start(self) -> None:
        if self._max_inflight:
            self._limits = {s.index: asyncio.Semaphore(self._max_inflight) for s in self._steps}
        self._running = True

    async def stop(self) -> None:
        self._running = False

    @property
    def pending_count(self) -> int:
        """Always 0, as Triton 2.51: an ensemble's request is executing from the moment the
        ensemble takes it; what waits is counted by the composing models' schedulers."""
        return 0

    async def submit(
        self,
        request: BackendRequest,
        batch_size: int,
        *,
        priority: int = 0,
        timeout_us: int = 0,
    ) -> ScheduledResult:
        if not self._running:
            raise unavailable("model is not accepting requests: its scheduler is stopped")
        batch = batch_size if self._batching else 0
        if request.control is not None and request.control.sink is not None:
            return await self._stream(request, batch, time.perf_counter_ns())
        return await self._run(request, batch, time.perf_counter_ns())

    async def _run(self, request: BackendRequest, batch: int, submitted_ns: int) -> ScheduledResult:
        values = _Values.of_request(request, batch, self._optional)
        tensors = values.tensors
        waiting = list(self._steps_for(request.requested_outputs))
        running: dict[asyncio.Task[tuple[ScheduledResult, int]], EnsembleStep] = {}
        totals = _TimingSum()
        queue_ns = -1
        try:
            while True:
                ready = [s for s in waiting if s.needs <= tensors.keys()]
                if queue_ns < 0 and ready:
                    queue_ns = time.perf_counter_ns() - submitted_ns
                if len(ready) == 1 and not running:
                    # a chain: run the only runnable step inline (no task, no asyncio.wait)
                    step = ready[0]
                    waiting.remove(step)
                    called = await self._call(step, request, values)
                    error = self._take(step, called, values, totals)
                    if error is not None:
                        return ScheduledResult(error, queue_ns, totals.timing())
                    continue
                for step in ready:
                    waiting.remove(step)
                    task = asyncio.create_task(self._call(step, request, values))
                    running[task] = step
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    error = self._take(step, task.result(), values, totals)
                    if error is not None:
                        return ScheduledResult(error, max(queue_ns, 0), totals.timing())
        finally:
            for task in running:
                task.cancel()
        result = self._result(request, values)
        if result is None:
            missing = [n for n in request.requested_outputs or self._outputs if n not in tensors]
            result = BackendResult(
                error=internal(f"in ensemble '{self._name}', no step produced output(s) {missing}")
            )
        return ScheduledResult(result, max(queue_ns, 0), totals.timing())

    def _result(
        self,
        request: BackendRequest,
        values: _Values,
    ) -> BackendResult | None:
        """The response of a request whose steps ran: its requested outputs (shaped for the
        ensemble's batching); None when no step made one of them."""
        wanted = request.requested_outputs or self._outputs
        tensors, batches = values.tensors, values.batches
        if any(name not in tensors for name in wanted):
            return None
        outputs = []
        for name in wanted:
            found = tensors[name]
            if found is None:
                continue
            dims = self._output_dims.get(name) if self._describe is not None else None
            shape = batch_reshaped(dims, self._batching, batches[name], found.shape)
            if shape != found.shape:
                found = InferTensor(
                    name, found.datatype, shape, found.data.reshape(shape), found.parameters
                )
            outputs.append(found)
        from_steps = any(name not in request.inputs for name in wanted)
        return BackendResult(
            outputs=outputs,
            parameters=sequence_parameters(request) if outputs and from_steps else {},
        )

    async def _stream(
        self, request: BackendRequest, batch: int, submitted_ns: int
    ) -> ScheduledResult:
        """A decoupled ensemble (a decoupled model in its steps): each response of a decoupled
        step carries on through the steps after it on its own (Triton's iterations), and each
        that ends with the requested outputs is a response of the ensemble, sent to the
        request's sink as it is ready; a step with no response ends its branch. The final flag
        follows once every branch ended. A failed step sends its error as the final response.
        Steps of one branch run one after the other."""
        control = request.control
        assert control is not None and control.sink is not None
        sink = control.sink
        values = _Values.of_request(request, batch, self._optional)
        totals = _TimingSum()
        queue_ns = time.perf_counter_ns() - submitted_ns
        try:
            await self._branch(request, values, self._steps_for(request.requested_outputs), totals)
        except RepokitError as exc:  # prefixed with the ensemble's name already
            sink(BackendResult(error=exc), True)
            return ScheduledResult(BackendResult(), queue_ns, totals.timing())
        sink(None, True)
        return ScheduledResult(BackendResult(), queue_ns, totals.timing())

    async def _branch(
        self,
        request: BackendRequest,
        values: _Values,
        waiting: tuple[EnsembleStep, ...],
        totals: _TimingSum,
    ) -> None:
        control = request.control
        assert control is not None and control.sink is not None
        while True:
            ready = [s for s in waiting if s.needs <= values.tensors.keys()]
            if not ready:
                break
            step = ready[0]
            waiting = tuple(s for s in waiting if s is not step)
            model = self._describe(step.model_name, step.model_version) if self._describe else None
            if model is None or not model.decoupled:
                called = await self._call(step, request, values)
                failed = self._take(step, called, values, totals)
                if failed is not None and failed.error is not None:
                    raise failed.error
                continue
            await self._fan_out(step, request, values, waiting, totals)
            return
        result = self._result(request, values)
        if result is not None and result.outputs:
            control.sink(result, False)

    async def _fan_out(
        self,
        step: EnsembleStep,
        request: BackendRequest,
        values: _Values,
        waiting: tuple[EnsembleStep, ...],
        totals: _TimingSum,
    ) -> None:
        """Run a decoupled step; every response it sends goes on as a branch of its own."""
        queue: asyncio.Queue[tuple[BackendResult | None, bool] | None] = asyncio.Queue()
        step_control = RequestControl(sink=lambda result, final: queue.put_nowait((result, final)))
        assert request.control is not None
        request.control.on_cancel(step_control.cancel)
        batch = self._step_request(step, request, values)[1]
        task = asyncio.ensure_future(self._call(step, request, values, control=step_control))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        branches: list[asyncio.Task[None]] = []
        executed = final = False
        try:
            while not (executed and final):
                item = await queue.get()
                if item is None:
                    executed = True
                    scheduled = task.result()[0]
                    totals.add(scheduled.timing)
                    if scheduled.result.error is not None:
                        raise self._prefixed(scheduled.result.error)
                    continue
                result, last = item
                final = final or last
                if result is None:
                    continue
                if result.error is not None:
                    raise self._prefixed(result.error)
                forked = values.fork()
                self._route(step, result, forked, batch)
                branches.append(
                    asyncio.ensure_future(self._branch(request, forked, waiting, totals))
                )
            await asyncio.gather(*branches)
        finally:
            for pending in (task, *branches):
                if not pending.done():
                    pending.cancel()

    def _steps_for(self, requested: tuple[str, ...]) -> tuple[EnsembleStep, ...]:
        """The steps that lead to the requested outputs (all of them when none or all are
        requested), as Triton prunes an ensemble before running it."""
        wanted = frozenset(requested)
        if not wanted or wanted.issuperset(self._outputs):
            return self._steps
        found = self._pruned.get(wanted)
        if found is None:
            found = needed_steps(self._steps, wanted)
            self._pruned[wanted] = found
        return found

    def _take(
        self,
        step: EnsembleStep,
        called: tuple[ScheduledResult, int],
        values: _Values,
        totals: _TimingSum,
    ) -> BackendResult | None:
        """Route a finished step's outputs into ``values`` (the ones it did not produce as
        absent) with the step request's batch size; its error result, if it failed."""
        scheduled, batch = called
        totals.add(scheduled.timing)
        result = scheduled.result
        if result.error is not None:
            return BackendResult(error=self._prefixed(result.error))
        self._route(step, result, values, batch)
        return None

    @staticmethod
    def _route(
        step: EnsembleStep,
        result: BackendResult,
        values: _Values,
        batch: int,
    ) -> None:
        """A step's outputs into ``values`` (those it did not produce as absent), made by a
        request of batch size ``batch``."""
        routes = step.routes
        tensors, batches = values.tensors, values.batches
        for out in result.outputs:
            target = routes.get(out.name)
            if target is not None:
                tensors[target] = InferTensor(
                    target, out.datatype, out.shape, out.data, out.parameters
                )
                batches[target] = batch
        for target in routes.values():
            tensors.setdefault(target, None)

    async def _call(
        self,
        step: EnsembleStep,
        request: BackendRequest,
        values: _Values,
        control: RequestControl | None = None,
    ) -> tuple[ScheduledResult, int]:
        """Run a step; its result and its request's batch size (0: the model does not batch).
        ``control``: a decoupled step's (its responses go to its sink)."""
        step_request, batch = self._step_request(step, request, values)
        step_request.control = control
        limit = self._limits.get(step.index)
        try:
            if limit is None:
                scheduled = await self._infer(step.model_name, step.model_version, step_request)
            else:
                async with limit:
                    scheduled = await self._infer(step.model_name, step.model_version, step_request)
        except RepokitError as exc:
            return ScheduledResult(BackendResult(error=exc), 0, _NO_TIME), batch
        return scheduled, batch

    def _step_request(
        self,
        step: EnsembleStep,
        request: BackendRequest,
        values: _Values,
    ) -> tuple[BackendRequest, int]:
        """A step's request and its batch size (0: the model does not batch)."""
        model = (
            self._describe(step.model_name, step.model_version)
            if self._describe is not None
            else None
        )
        inputs = {}
        batch = 0
        tensors, batches = values.tensors, values.batches
        for model_input, name in step.input_map:
            given = tensors[name]
            if given is None:  # an absent tensor: the (optional) input is left out
                continue
            shape, data = given.shape, given.data
            if model is not None:
                shape = batch_reshaped(
                    model.input_dims.get(model_input), model.batching, batches[name], shape
                )
                if shape != given.shape:
                    data = data.reshape(shape)
                if model.batching and shape:
                    batch = shape[0]
            inputs[model_input] = InferTensor(model_input, given.datatype, shape, data)
        step_request = BackendRequest(
            inputs=inputs,
            requested_outputs=tuple(name for name, _ in step.output_map),
            parameters=dict(request.parameters),
            request_id=request.request_id,
            correlation_id=request.correlation_id,
            flags=request.flags,
            priority=request.priority,
            timeout_us=request.timeout_us,
            trace=request.trace,
        )
        return step_request, batch

    def _prefixed(self, error: RepokitError) -> RepokitError:
        return RepokitError(error.code, f"in ensemble '{self._name}', {error.message}")


_NO_TIME = Timing()


class _Values:
    """The tensors of one ensemble request (or of one branch of a decoupled one) so far, by
    ensemble tensor name (None: absent, an optional input not given or an output a step did
    not make), and the batch size of the request that made each (0: no batching)."""

    __slots__ = ("batches", "tensors")

    def __init__(self, tensors: dict[str, InferTensor | None], batches: dict[str, int]) -> None:
        self.tensors = tensors
        self.batches = batches

    @classmethod
    def of_request(cls, request: BackendRequest, batch: int, optional: Iterable[str]) -> _Values:
        """The ensemble's inputs (made with the request's ``batch``), its optional inputs
        not given as absent."""
        tensors: dict[str, InferTensor | None] = dict(request.inputs)
        batches = dict.fromkeys(tensors, batch)
        for name in optional:
            tensors.setdefault(name, None)
        return cls(tensors, batches)

    def fork(self) -> _Values:
        """A copy a branch goes on with (what it adds, the others do not see)."""
        return _Values(dict(self.tensors), dict(self.batches))


class _TimingSum:
    """The composing requests' durations of one ensemble request, added up."""

    __slots__ = ("compute_infer", "compute_input", "compute_output")

    def __init__(self) -> None:
        self.compute_input = self.compute_infer = self.compute_output = 0

    def add(self, timing: Timing) -> None:
        self.compute_input += timing.compute_input_ns
        self.compute_infer += timing.compute_infer_ns
        self.compute_output += timing.compute_output_ns

    def timing(self) -> Timing:
        return Timing(self.compute_input, self.compute_infer, self.compute_output)
