"""Ensemble DAG routing, concurrency, errors, nesting and backpressure (fake composing models)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from repokit.backends.base import BackendRequest, BackendResult, Timing
from repokit.errors import Code, RepokitError, invalid_arg
from repokit.protocol.types import InferTensor
from repokit.scheduler.base import ScheduledResult
from repokit.scheduler.ensemble import EnsembleScheduler, batch_reshaped
from tests.scheduler.helpers import config, tensor

# A -> add_sub(A, B) -> sum, diff ; sum -> double -> S2 ; diff -> double -> D2 (parallel)
ENSEMBLE = """
name: "ens" platform: "ensemble" max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "S2" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "D2" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling {
  %s
  step [
    { model_name: "add_sub" model_version: -1
      input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
    { model_name: "double" model_version: 2
      input_map { key: "X" value: "sum" } output_map { key: "Y" value: "S2" } },
    { model_name: "double" model_version: 2
      input_map { key: "X" value: "diff" } output_map { key: "Y" value: "D2" } }
  ]
}
"""  # noqa: E501


STEP_QUEUE_NS = 10**15  # far more than a test can take: the ensemble must not add it
STEP_TIMINGS = {"add_sub": Timing(1, 10, 100), "double": Timing(1000, 10_000, 100_000)}


class Models:
    """The composing models as the core's infer callable would run them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, BackendRequest]] = []
        self.double_gate: asyncio.Event | None = None
        self.running_doubles = 0
        self.max_parallel_doubles = 0
        self.fail: str | None = None

    async def infer(self, model: str, version: int, req: BackendRequest) -> ScheduledResult:
        """As the core's step runner: the result with the composing request's timing."""
        result = await self.run(model, version, req)
        return ScheduledResult(result, STEP_QUEUE_NS, STEP_TIMINGS.get(model, Timing()))

    async def run(self, model: str, version: int, req: BackendRequest) -> BackendResult:
        self.calls.append((model, version, req))
        if model == self.fail:
            return BackendResult(error=invalid_arg(f"{model} failed"))
        if model == "add_sub":
            a, b = req.inputs["INPUT0"].data, req.inputs["INPUT1"].data
            return BackendResult(outputs=[tensor("OUTPUT0", a + b), tensor("OUTPUT1", a - b)])
        if model == "double":
            self.running_doubles += 1
            self.max_parallel_doubles = max(self.max_parallel_doubles, self.running_doubles)
            if self.double_gate is not None:
                await self.double_gate.wait()
            self.running_doubles -= 1
            x = req.inputs["X"].data
            return BackendResult(outputs=[InferTensor("Y", "FP32", x.shape, x * 2)])
        raise invalid_arg(f"unknown model {model}")


def ens_request(**kw: object) -> BackendRequest:
    a = np.array([[1, 2]], dtype=np.float32)
    b = np.array([[10, 20]], dtype=np.float32)
    return BackendRequest(
        inputs={"A": tensor("A", a), "B": tensor("B", b)},
        requested_outputs=(),
        **kw,  # type: ignore[arg-type]
    )


async def started(models: Models, extra: str = "") -> EnsembleScheduler:
    sched = EnsembleScheduler(config(ENSEMBLE % extra), models.infer)
    await sched.start()
    return sched


async def test_tensors_are_routed_through_the_dag_without_copies() -> None:
    models = Models()
    sched = await started(models)
    req = ens_request(correlation_id=5, flags=1, parameters={"p": 1})
    res = (await sched.submit(req, 1)).result
    assert res.error is None
    out = {t.name: t.data.tolist() for t in res.outputs}
    assert out == {"S2": [[22, 44]], "D2": [[-18, -36]]}
    first_model, version, first_req = models.calls[0]
    assert (first_model, version) == ("add_sub", -1)
    assert first_req.inputs["INPUT0"].data is req.inputs["A"].data  # same array, renamed
    assert first_req.requested_outputs == ("OUTPUT0", "OUTPUT1")
    assert first_req.correlation_id == 5 and first_req.flags == 1
    assert first_req.parameters == {"p": 1}
    assert [c[1] for c in models.calls[1:]] == [2, 2]


async def test_independent_steps_run_concurrently() -> None:
    models = Models()
    models.double_gate = asyncio.Event()
    sched = await started(models)
    task = asyncio.create_task(sched.submit(ens_request(), 1))
    for _ in range(50):
        await asyncio.sleep(0)
        if models.running_doubles == 2:
            break
    assert models.running_doubles == 2  # both doubles wait at the same time
    models.double_gate.set()
    assert (await task).result.error is None


async def test_only_requested_outputs_are_returned() -> None:
    models = Models()
    sched = await started(models)
    req = ens_request()
    req.requested_outputs = ("D2",)
    res = (await sched.submit(req, 1)).result
    assert [t.name for t in res.outputs] == ["D2"]
    # the step that makes only S2 does not run (Triton prunes it)
    assert [c[0] for c in models.calls] == ["add_sub", "double"]
    assert models.calls[1][2].inputs["X"].data.tolist() == [[-9, -18]]  # diff, for D2
    assert res.parameters == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}


async def test_a_failing_step_fails_the_request_with_the_ensemble_prefix() -> None:
    models = Models()
    models.fail = "double"
    sched = await started(models)
    res = (await sched.submit(ens_request(), 1)).result
    assert res.error is not None and res.error.code is Code.INVALID_ARG
    assert res.error.message == "in ensemble 'ens', double failed"


async def test_a_step_raising_is_reported_the_same_way() -> None:
    cfg = config((ENSEMBLE % "").replace('model_name: "add_sub"', 'model_name: "nope"'))
    sched = EnsembleScheduler(cfg, Models().infer)
    await sched.start()
    res = (await sched.submit(ens_request(), 1)).result
    assert res.error is not None and res.error.message == "in ensemble 'ens', unknown model nope"


async def test_ensembles_of_ensembles() -> None:
    models = Models()
    inner = await started(models)
    outer_cfg = config(
        """
        name: "outer" platform: "ensemble" max_batch_size: 4
        input [ { name: "P" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "Q" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "R" data_type: TYPE_FP32 dims: [ 2 ] } ]
        ensemble_scheduling { step [ { model_name: "ens" model_version: -1
          input_map { key: "A" value: "P" } input_map { key: "B" value: "Q" }
          output_map { key: "S2" value: "R" } } ] }
        """  # noqa: E501
    )

    async def route(model: str, version: int, req: BackendRequest) -> ScheduledResult:
        if model == "ens":
            return await inner.submit(req, 1)
        return await models.infer(model, version, req)

    outer = EnsembleScheduler(outer_cfg, route)
    await outer.start()
    req = BackendRequest(
        inputs={
            "P": tensor("P", np.array([[1, 1]], np.float32)),
            "Q": tensor("Q", np.array([[2, 2]], np.float32)),
        },
        requested_outputs=(),
    )
    scheduled = await outer.submit(req, 1)
    res = scheduled.result
    assert [t.name for t in res.outputs] == ["R"] and res.outputs[0].data.tolist() == [[6, 6]]
    # the inner ensemble's sums: add_sub and the double that makes S2 (the outer step requests
    # only S2, so the inner ensemble prunes the step that makes D2, as Triton does)
    assert scheduled.timing == Timing(1001, 10_010, 100_100)
    assert [c[0] for c in models.calls] == ["add_sub", "double"]
    models.fail = "add_sub"
    res = (await outer.submit(req, 1)).result
    assert res.error is not None
    assert res.error.message == "in ensemble 'outer', in ensemble 'ens', add_sub failed"


async def test_max_inflight_requests_bounds_each_step() -> None:
    models = Models()
    models.double_gate = asyncio.Event()
    sched = await started(models, "max_inflight_requests: 1")
    tasks = [asyncio.create_task(sched.submit(ens_request(), 1)) for _ in range(3)]
    for _ in range(50):
        await asyncio.sleep(0)
    assert models.running_doubles == 2  # one per step (two steps), not one per request
    assert sched.pending_count == 0  # as Triton: the steps' models count what waits
    models.double_gate.set()
    results = await asyncio.gather(*tasks)
    assert all(r.result.error is None for r in results)


async def test_submit_before_start_is_unavailable() -> None:
    sched = EnsembleScheduler(config(ENSEMBLE % ""), Models().infer)
    with pytest.raises(RepokitError) as err:
        await sched.submit(ens_request(), 1)
    assert err.value.code is Code.UNAVAILABLE


async def test_timing_is_the_sum_of_the_steps_and_queue_is_the_ensembles_own() -> None:
    sched = await started(Models())
    scheduled = await sched.submit(ens_request(), 1)
    assert scheduled.result.error is None
    # add_sub once, double twice (Triton 2.51 reports the composing requests' sums)
    assert scheduled.timing == Timing(2001, 20_010, 200_100)
    assert 0 <= scheduled.queue_ns < STEP_QUEUE_NS  # not the steps' queue times added up


async def test_a_failing_step_still_reports_the_steps_that_ran() -> None:
    models = Models()
    models.fail = "double"
    sched = await started(models)
    scheduled = await sched.submit(ens_request(), 1)
    assert scheduled.result.error is not None
    assert scheduled.timing.compute_infer_ns in (10 + 10_000, 10 + 20_000)


# an identity over two optional inputs that answers only those it was given, as Triton's qa
# L0_optional_input's identity_2_float32; then a step that doubles OUTPUT1 if it came
OPTIONAL = """
name: "opt" platform: "ensemble" max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] optional: true },
        { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true } ]
output [ { name: "OA" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "OB" data_type: TYPE_FP32 dims: [ 2 ] },
         { name: "OB2" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [
  { model_name: "identity2" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "OA" } output_map { key: "OUTPUT1" value: "OB" } },
  { model_name: "double_optional" model_version: -1
    input_map { key: "X" value: "OB" } output_map { key: "Y" value: "OB2" } }
] }
"""  # noqa: E501


class OptionalModels(Models):
    async def run(self, model: str, version: int, req: BackendRequest) -> BackendResult:
        self.calls.append((model, version, req))
        if model == "identity2":
            given = {"INPUT0": "OUTPUT0", "INPUT1": "OUTPUT1"}
            return BackendResult(
                outputs=[tensor(out, req.inputs[name].data) for name, out in given.items()
                         if name in req.inputs]
            )  # fmt: skip
        if "X" not in req.inputs:
            return BackendResult(outputs=[])
        return BackendResult(outputs=[tensor("Y", req.inputs["X"].data * 2)])


@pytest.mark.parametrize(
    ("given", "answered"),
    [
        (("A", "B"), ["OA", "OB", "OB2"]),
        (("A",), ["OA"]),
        (("B",), ["OB", "OB2"]),
        ((), []),
    ],
)
async def test_absent_optional_inputs_and_outputs_are_left_out(
    given: tuple[str, ...], answered: list[str]
) -> None:
    models = OptionalModels()
    sched = EnsembleScheduler(config(OPTIONAL), models.infer)
    await sched.start()
    data = np.array([[1, 2]], dtype=np.float32)
    req = BackendRequest(inputs={n: tensor(n, data) for n in given}, requested_outputs=())
    res = (await sched.submit(req, 1)).result
    assert res.error is None
    assert [t.name for t in res.outputs] == answered
    first, second = models.calls[0][2], models.calls[1][2]  # both steps ran
    assert sorted(first.inputs) == sorted({"A": "INPUT0", "B": "INPUT1"}[n] for n in given)
    assert list(second.inputs) == (["X"] if "B" in given else [])


@pytest.mark.parametrize(
    ("config_dims", "batching", "tensor_batch", "shape", "handed"),
    [
        ((16,), True, 0, (16,), (1, 16)),  # unbatched tensor to a batching model: batch of 1
        ((-1,), True, 0, (3,), (1, 3)),
        ((16,), True, 0, (2, 16), (2, 16)),  # already shaped as a batch: as it is
        ((16,), False, 1, (1, 16), (16,)),  # batch of 1 to a model without batching: stripped
        ((1, 16), False, 1, (1, 16), (1, 16)),  # the shape fits the model: kept
        ((16,), False, 2, (2, 16), (2, 16)),  # batch of 2: kept (the model refuses it)
        ((16,), True, 4, (4, 16), (4, 16)),  # both batch: nothing to do
        ((16,), False, 0, (16,), (16,)),  # neither batches
        (None, True, 0, (16,), (16,)),  # a model not known: as it is
    ],
)
def test_tensors_between_batching_and_non_batching_models(
    config_dims: tuple[int, ...] | None,
    batching: bool,
    tensor_batch: int,
    shape: tuple[int, ...],
    handed: tuple[int, ...],
) -> None:
    assert batch_reshaped(config_dims, batching, tensor_batch, shape) == handed
