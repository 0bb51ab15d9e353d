"""The sequence batcher driver: control tensors, fillers, implicit state, errors, Oldest."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from repokit.backends.base import BackendRequest, BackendResult, Timing
from repokit.errors import Code, ConfigError, RepokitError
from repokit.protocol.types import InferTensor
from repokit.scheduler.base import CancelledInQueue, ScheduledResult
from repokit.scheduler.runtime import ManualClock
from repokit.scheduler.sequence_batch import SequenceBatchScheduler
from repokit.scheduler.sequence_controls import FLAG_END, FLAG_START
from tests.scheduler.helpers import RecordingBackend, config, tensor

SEQ = """
name: "seq" max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  %s
}
"""


def seq_request(
    corrid: int | str, value: int, *, start: bool = False, end: bool = False
) -> BackendRequest:
    return BackendRequest(
        inputs={"INPUT0": tensor("INPUT0", np.array([[value]], dtype=np.int32), "INT32")},
        requested_outputs=(),
        correlation_id=corrid,
        flags=(FLAG_START if start else 0) | (FLAG_END if end else 0),
    )


async def until(predicate: object, rounds: int = 200) -> None:
    for _ in range(rounds):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def scheduler(
    backend: RecordingBackend, extra: str = "", clock: ManualClock | None = None
) -> SequenceBatchScheduler:
    sched = SequenceBatchScheduler(
        backend, config(SEQ % extra), model_dir=Path("."), clock=clock or ManualClock()
    )
    await sched.start()
    return sched


def values(req: BackendRequest, name: str) -> list[object]:
    return np.asarray(req.inputs[name].data).reshape(-1).tolist()


async def test_control_tensors_carry_start_end_ready_and_corrid() -> None:
    backend = RecordingBackend()
    sched = await scheduler(backend)
    await sched.submit(seq_request(77, 1, start=True), 1)
    await sched.submit(seq_request(77, 2, end=True), 1)
    first, last = backend.batches[0][1][0], backend.batches[1][1][0]
    assert values(first, "START") == [1] and values(last, "START") == [0]
    assert values(first, "END") == [0.0] and values(last, "END") == [1.0]
    assert values(first, "READY") == [True]
    assert values(first, "CORRID") == [77]
    assert first.inputs["START"].shape == (1, 1) and first.inputs["START"].datatype == "INT32"
    assert first.inputs["END"].data.dtype == np.float32
    assert first.inputs["READY"].datatype == "BOOL"
    assert first.inputs["CORRID"].data.dtype == np.uint64
    await sched.stop()


async def test_empty_slots_are_filled_with_zero_requests_that_are_not_ready() -> None:
    backend = RecordingBackend()
    sched = await scheduler(backend)
    await sched.submit(seq_request(1, 5, start=True), 1)  # slot 0
    await sched.submit(seq_request(2, 6, start=True), 1)  # slot 1
    result = await sched.submit(seq_request(2, 7), 1)  # only slot 1 has work
    batch = backend.batches[-1][1]
    assert len(batch) == 2
    filler, real = batch
    assert values(filler, "READY") == [False] and values(filler, "INPUT0") == [0]
    assert values(filler, "CORRID") == [0] and values(filler, "START") == [0]
    assert values(real, "READY") == [True] and values(real, "INPUT0") == [7]
    assert result.result.outputs[0].data.reshape(-1).tolist() == [14]
    await sched.stop()


async def test_a_batch_that_fails_outside_the_backend_fails_its_requests_only() -> None:
    """A fault around the execution (preparing, joining or splitting a batch) answers that
    batch's requests with INTERNAL; the worker goes on, and the sequence's next request and
    other sequences are served (before, the worker task died and every later request of the
    model waited for ever)."""
    backend = RecordingBackend()
    sched = await scheduler(backend)
    prepare = sched._prepare

    def faulty(dispatched: object) -> BackendRequest:
        prepared = prepare(dispatched)  # type: ignore[arg-type]
        if values(prepared, "INPUT0") == [13]:
            raise ValueError("a stand-in for a bug")
        return prepared

    sched._prepare = faulty  # type: ignore[method-assign]
    with pytest.raises(RepokitError) as failed:
        await asyncio.wait_for(sched.submit(seq_request(1, 13, start=True), 1), 30)
    assert failed.value.code is Code.INTERNAL
    assert failed.value.message == "sequence batch failed: ValueError: a stand-in for a bug"
    answered = await asyncio.wait_for(
        asyncio.gather(
            sched.submit(seq_request(1, 2, end=True), 1),
            sched.submit(seq_request(2, 3, start=True, end=True), 1),
        ),
        30,
    )
    assert [r.result.outputs[0].data.reshape(-1).tolist() for r in answered] == [[4], [6]]
    await sched.stop()


async def test_backlogged_sequence_runs_when_a_slot_ends() -> None:
    backend = RecordingBackend()
    cfg = SEQ.replace("max_batch_size: 4", "max_batch_size: 1")
    sched = SequenceBatchScheduler(backend, config(cfg % ""), clock=ManualClock())
    await sched.start()
    await sched.submit(seq_request(1, 1, start=True), 1)
    waiting = asyncio.create_task(sched.submit(seq_request(2, 2, start=True), 1))
    await until(lambda: sched.pending_count == 1)
    assert not waiting.done() and len(backend.batches) == 1
    await sched.submit(seq_request(1, 3, end=True), 1)
    await waiting
    assert [values(b[1][0], "CORRID") for b in backend.batches] == [[1], [1], [2]]
    await sched.stop()


async def test_idle_expiry_frees_the_slot_and_the_late_request_gets_tritons_error() -> None:
    clock = ManualClock()
    backend = RecordingBackend()
    sched = await scheduler(backend, "max_sequence_idle_microseconds: 500", clock)
    await sched.submit(seq_request(9, 1, start=True), 1)
    clock.advance_us(500)
    sched.wake()
    await until(lambda: sched.slots.slot_owner(0, 0) is None)
    with pytest.raises(RepokitError) as err:
        await sched.submit(seq_request(9, 2), 1)
    assert err.value.message == (
        "inference request for sequence 9 to model 'seq' must specify the START flag on the "
        "first request of the sequence"
    )
    await sched.stop()


async def test_default_idle_timeout_is_one_second() -> None:
    sched = SequenceBatchScheduler(RecordingBackend(), config(SEQ % ""))
    assert sched.slots.idle_ns == 1_000_000_000


NON_ZERO = "inference request to model 'seq' must specify a non-zero or non-empty correlation ID"
BATCH_1 = (
    "inference request to model 'seq' must specify batch-size 1 due to requirements of "
    "sequence batcher"
)


@pytest.mark.parametrize(
    ("corrid", "batch", "message"),
    [
        (0, 1, NON_ZERO),
        ("", 1, NON_ZERO),
        (5, 2, BATCH_1),
        ("x" * 129, 1, "string correlation ID cannot be longer than 128 characters"),
    ],
)
async def test_request_errors_match_triton(corrid: int | str, batch: int, message: str) -> None:
    sched = await scheduler(RecordingBackend())
    with pytest.raises(RepokitError) as err:
        await sched.submit(seq_request(corrid, 1, start=True), batch)
    assert err.value.code is Code.INVALID_ARG and err.value.message == message
    await sched.stop()


async def test_string_correlation_ids_with_a_string_corrid_control() -> None:
    backend = RecordingBackend()
    cfg = (SEQ % "").replace("data_type: TYPE_UINT64", "data_type: TYPE_STRING")
    sched = SequenceBatchScheduler(backend, config(cfg), clock=ManualClock())
    await sched.start()
    await sched.submit(seq_request("session-a", 1, start=True), 1)
    assert values(backend.batches[0][1][0], "CORRID") == [b"session-a"]
    with pytest.raises(RepokitError):
        await sched.submit(seq_request(12, 1, start=True), 1)
    await sched.stop()


@pytest.mark.parametrize(
    ("datatype", "corrid", "expected"),
    [  # what Triton 2.51 fed a python model (measured with a model returning its CORRID)
        ("UINT64", "abc", 27974191445704707),
        ("UINT64", "12345", 3761405299819282437),
        ("UINT64", "0", 206158430209),
        ("INT64", "-5", 58467389800450),
        ("INT32", "abc", 3),
        ("UINT32", "18446744073709551615", 20),
    ],
)
async def test_string_ids_on_an_integer_corrid_control_get_tritons_bytes(
    datatype: str, corrid: str, expected: int
) -> None:
    backend = RecordingBackend()
    cfg = (SEQ % "").replace("data_type: TYPE_UINT64", f"data_type: TYPE_{datatype}")
    sched = SequenceBatchScheduler(backend, config(cfg), clock=ManualClock())
    await sched.start()
    result = await sched.submit(seq_request(corrid, 1, start=True, end=True), 1)
    assert result.result.error is None
    sent = backend.batches[0][1][0].inputs["CORRID"]
    assert sent.datatype == datatype and sent.shape == (1, 1)
    assert sent.data.dtype == np.dtype(datatype.lower()) and values_of(sent) == [expected]
    await sched.stop()


def values_of(t: InferTensor) -> list[object]:
    return np.asarray(t.data).reshape(-1).tolist()


class AccumulatingBackend(RecordingBackend):
    """OUTPUT0 = STATE_IN + INPUT0 and STATE_OUT = the same (an implicit-state accumulator)."""

    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        self.batches.append((instance, requests))
        results = []
        for req in requests:
            total = req.inputs["STATE_IN"].data + req.inputs["INPUT0"].data
            results.append(
                BackendResult(
                    outputs=[
                        InferTensor("OUTPUT0", "INT32", total.shape, total),
                        InferTensor("STATE_OUT", "INT32", total.shape, total),
                    ]
                )
            )
        return results, Timing()


STATE = """state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32
  dims: [ 1 ] %s } ]"""


async def test_implicit_state_is_carried_between_requests_and_reset_at_start() -> None:
    backend = AccumulatingBackend()
    sched = await scheduler(backend, STATE % "")
    outs = []
    for value, start in ((1, True), (2, False), (3, False), (10, True)):
        res = await sched.submit(seq_request(4, value, start=start), 1)
        outs.append(res.result)
    assert [r.outputs[0].data.reshape(-1).tolist() for r in outs] == [[1], [3], [6], [10]]
    assert all([t.name for t in r.outputs] == ["OUTPUT0"] for r in outs)  # state is internal
    assert backend.batches[0][1][0].inputs["STATE_IN"].shape == (1, 1)
    await sched.stop()


async def test_a_filler_takes_the_shape_of_a_grown_variable_state() -> None:
    """A state of dims [ -1 ] takes the shape of the output it carries; the zero request of an
    empty slot beside it must have that shape too, or a merged (onnxruntime) batch cannot
    concatenate (qa/L0_implicit_state test_ragged_batch[modelsv,onnx]: the fillers had the
    initial state's shape, the worker failed and no request was answered again)."""
    cfg = (SEQ % (STATE % "").replace("dims: [ 1 ]", "dims: [ -1 ]")).replace(
        "dims: [ 1 ]", "dims: [ -1 ]", 1
    )
    backend = AccumulatingBackend()
    sched = SequenceBatchScheduler(
        backend, config(cfg), model_dir=Path("."), clock=ManualClock(), merge_batches=True
    )
    await sched.start()

    def shaped(corrid: int, values: list[int], *, start: bool, end: bool) -> BackendRequest:
        data = np.array([values], dtype=np.int32)
        flags = (FLAG_START if start else 0) | (FLAG_END if end else 0)
        return BackendRequest(
            inputs={"INPUT0": tensor("INPUT0", data, "INT32")},
            requested_outputs=(),
            correlation_id=corrid,
            flags=flags,
        )

    first = await asyncio.gather(
        sched.submit(shaped(1, [5, 5], start=True, end=True), 1),
        sched.submit(shaped(2, [1, 2], start=True, end=False), 1),
    )
    assert [r.result.outputs[0].data.tolist() for r in first] == [[[5, 5]], [[1, 2]]]
    # corrid 1 ended: its slot (0) is empty and gets a filler beside corrid 2's state [1, 2]
    second = await asyncio.wait_for(sched.submit(shaped(2, [10, 10], start=False, end=True), 1), 30)
    assert second.result.outputs[0].data.tolist() == [[11, 12]]
    await sched.stop()


class RequestedOnlyAccumulatingBackend(AccumulatingBackend):
    """Answers the requested outputs only and, when none are requested, the config's outputs
    only (as onnxruntime does): the state output comes back only when asked for."""

    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        results, timing = await super().execute(instance, requests)
        for req, result in zip(requests, results, strict=True):
            wanted = set(req.requested_outputs) or {"OUTPUT0"}
            result.outputs = [t for t in result.outputs if t.name in wanted]
        return results, timing


async def test_the_state_output_is_asked_for_when_the_client_asks_for_no_outputs() -> None:
    """L0_dyna_implicit_state's test_simple_sequence (onnx): a request without requested
    outputs (all of them) still carries the state to the next request."""
    backend = RequestedOnlyAccumulatingBackend()
    sched = await scheduler(backend, STATE % "")
    outs = []
    for value, start in ((1, True), (2, False), (3, False)):
        res = await sched.submit(seq_request(4, value, start=start), 1)
        outs.append(res.result)
    assert [r.outputs[0].data.reshape(-1).tolist() for r in outs] == [[1], [3], [6]]
    assert all([t.name for t in r.outputs] == ["OUTPUT0"] for r in outs)
    assert backend.batches[0][1][0].requested_outputs == ("OUTPUT0", "STATE_OUT")
    await sched.stop()


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ((), ["OUTPUT0", "STATE_OUT"]),
        (("OUTPUT0", "STATE_OUT"), ["OUTPUT0", "STATE_OUT"]),
        (("OUTPUT0",), ["OUTPUT0"]),
    ],
)
async def test_a_state_output_the_config_lists_is_answered_when_asked_for(
    asked: tuple[str, ...], answered: list[str]
) -> None:
    """Triton 2.51 (L0_implicit_state test_request_output): a model whose config lists its
    state output as an output answers it to a client that asks for it (or for all outputs);
    the state still carries to the next request."""
    backend = AccumulatingBackend()
    cfg = (SEQ % (STATE % "")).replace(
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] },'
        ' { name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
    )
    sched = SequenceBatchScheduler(backend, config(cfg), model_dir=Path("."), clock=ManualClock())
    await sched.start()
    results = []
    for value, start in ((1, True), (2, False)):
        given = seq_request(4, value, start=start)
        given.requested_outputs = asked
        results.append((await sched.submit(given, 1)).result)
    assert [[t.name for t in r.outputs] for r in results] == [answered, answered]
    assert results[1].outputs[0].data.reshape(-1).tolist() == [3]
    await sched.stop()


async def test_initial_state_from_a_data_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "init.bin").write_bytes(np.int32(100).tobytes())
    backend = AccumulatingBackend()
    init = 'initial_state { name: "init" data_type: TYPE_INT32 dims: [ 1 ] data_file: "init.bin" }'
    sched = SequenceBatchScheduler(
        backend, config(SEQ % (STATE % init)), model_dir=tmp_path, clock=ManualClock()
    )
    await sched.start()
    res = await sched.submit(seq_request(4, 5, start=True), 1)
    assert res.result.outputs[0].data.reshape(-1).tolist() == [105]
    await sched.stop()
    (tmp_path / "initial_state" / "init.bin").write_bytes(b"\x01")
    with pytest.raises(ConfigError) as err:
        SequenceBatchScheduler(backend, config(SEQ % (STATE % init)), model_dir=tmp_path)
    assert err.value.message == (
        "initial_state setting expects 4 bytes, but the data provided from init.binonly has 1 bytes"
    )


async def test_oldest_strategy_batches_heads_of_different_sequences() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = await scheduler(backend, "oldest { max_candidate_sequences: 8 }")
    first = asyncio.create_task(sched.submit(seq_request(1, 1, start=True), 1))
    await until(lambda: len(backend.batches) == 1)
    others = [
        asyncio.create_task(sched.submit(seq_request(c, c, start=True), 1)) for c in (2, 3, 4)
    ]
    same_seq = asyncio.create_task(sched.submit(seq_request(1, 9), 1))
    await until(lambda: sched.pending_count == 4)
    backend.gate.set()
    results: list[ScheduledResult] = await asyncio.gather(first, *others, same_seq)
    sizes = [len(reqs) for _, reqs in backend.batches]
    # sequence 1's second request runs only after its first finished: 1, then 2/3/4 + 1's next
    assert sizes == [1, 4]
    corrids = np.concatenate([r.inputs["CORRID"].data.reshape(-1) for r in backend.batches[1][1]])
    assert sorted(corrids.tolist()) == [1, 2, 3, 4]
    assert results[-1].result.outputs[0].data.reshape(-1).tolist() == [18]
    assert sched.slots.slots_per_instance == 8
    await sched.stop()


def _shaped(corrid: int, length: int) -> BackendRequest:
    """A one-request sequence whose INPUT0 holds ``length`` values."""
    data = np.full((1, length), corrid, dtype=np.int32)
    return BackendRequest(
        inputs={"INPUT0": tensor("INPUT0", data, "INT32")},
        requested_outputs=(),
        correlation_id=corrid,
        flags=FLAG_START | FLAG_END,
    )


async def _run_behind_a_held_batch(
    cfg: str, first: tuple[int, int], others: list[tuple[int, int]]
) -> RecordingBackend:
    """Sequences of (correlation id, length): ``first`` runs alone and is held while the others
    queue behind it, then all run; the backend has the batches they made."""
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = SequenceBatchScheduler(backend, config(cfg), model_dir=Path("."), clock=ManualClock())
    await sched.start()
    held = asyncio.create_task(sched.submit(_shaped(*first), 1))
    await until(lambda: len(backend.batches) == 1)
    queued = [asyncio.create_task(sched.submit(_shaped(c, n), 1)) for c, n in others]
    await until(lambda: sched.pending_count == len(others))
    backend.gate.set()
    await asyncio.gather(held, *queued)
    await sched.stop()
    return backend


@pytest.mark.parametrize(("ragged", "sizes"), [(False, [1, 2, 1, 1]), (True, [1, 4])])
async def test_oldest_strategy_batches_only_equal_shapes_unless_ragged(
    ragged: bool, sizes: list[int]
) -> None:
    """Triton 2.51 (L0_dyna_sequence_batcher test_multi_sequence_different_shape): requests
    of different shapes do not share an Oldest batch, unless the input allows ragged batches."""
    dims = "dims: [ -1 ]" + (" allow_ragged_batch: true" if ragged else "")
    cfg = (SEQ % "oldest { max_candidate_sequences: 8 }").replace("dims: [ 1 ]", dims, 1)
    backend = await _run_behind_a_held_batch(cfg, (1, 1), [(2, 3), (3, 3), (4, 2), (5, 1)])
    assert [len(reqs) for _, reqs in backend.batches] == sizes


async def test_direct_batches_hold_one_shape_of_inputs_that_are_not_ragged() -> None:
    """Triton 2.51 (qa/L0_sequence_batcher test_ragged_batch, variable-shape models): Direct
    sequences whose requests differ in shape run in separate batches, the oldest request's
    shape first; the slot layout stays. repokit merged them all into one batch, which failed to
    concatenate and left every request of the model unanswered."""
    cfg = (SEQ % "").replace("dims: [ 1 ]", "dims: [ -1 ]", 1)
    backend = await _run_behind_a_held_batch(cfg, (9, 2), [(1, 2), (2, 2), (3, 1), (4, 3)])
    shapes = [
        sorted({tuple(r.inputs["INPUT0"].shape) for r in reqs if values(r, "READY") == [True]})
        for _, reqs in backend.batches[1:]
    ]
    assert shapes == [[(1, 2)], [(1, 1)], [(1, 3)]]


async def test_oldest_a_sequence_in_a_slot_freed_by_an_end_waits_until_that_end_ran() -> None:
    """Triton 2.51 (its per-slot in_flight_; L0_dyna_sequence_batcher test_backlog_fill): the
    slot an END frees goes to the next sequence at once, but that sequence's first request is
    batched only after the END executed, never together with it."""
    clock = ManualClock()
    backend = RecordingBackend()
    oldest = (
        "oldest { max_candidate_sequences: 2 preferred_batch_size: [ 2 ]"
        " max_queue_delay_microseconds: 5000000 }"
    )
    sched = await scheduler(backend, oldest, clock)
    starts = [asyncio.create_task(sched.submit(seq_request(c, c, start=True), 1)) for c in (1, 2)]
    await asyncio.gather(*starts)
    end1 = asyncio.create_task(sched.submit(seq_request(1, 10, end=True), 1))
    await until(lambda: sched.pending_count == 1)
    third = asyncio.create_task(sched.submit(seq_request(3, 30, start=True), 1))  # slot of 1
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(backend.batches) == 1  # the END and the new START do not make a batch
    next2 = asyncio.create_task(sched.submit(seq_request(2, 20), 1))
    await asyncio.gather(end1, next2)
    clock.advance_us(5_000_000)  # the new sequence's START then goes alone after the delay
    sched.wake()
    await third
    corrids = [sorted(values(r, "CORRID")[0] for r in reqs) for _, reqs in backend.batches]
    assert corrids == [[1, 2], [1, 2], [3]]
    await sched.stop()


# --- backlog timeouts (Direct) -------------------------------------------------------------
async def test_a_backlogged_sequence_past_its_request_timeout_is_rejected() -> None:
    clock = ManualClock()
    backend = RecordingBackend()
    cfg = SEQ.replace("max_batch_size: 4", "max_batch_size: 1")
    sched = SequenceBatchScheduler(backend, config(cfg % ""), clock=clock)
    await sched.start()
    await sched.submit(seq_request(1, 1, start=True), 1, timeout_us=10)  # slotted: no limit
    first = asyncio.create_task(sched.submit(seq_request(2, 2, start=True), 1))
    second = asyncio.create_task(sched.submit(seq_request(2, 3), 1, timeout_us=300))
    await until(lambda: sched.pending_count == 2)
    clock.advance_us(299)
    sched.wake()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not first.done() and not second.done()
    clock.advance_us(1)
    sched.wake()
    for task in (first, second):  # every request of the backlogged sequence
        with pytest.raises(RepokitError) as err:
            await task
        assert err.value.code is Code.UNAVAILABLE
        assert err.value.message == "timeout of the corresponding sequence has been expired"
    with pytest.raises(RepokitError) as err:  # the id is forgotten, as in Triton
        await sched.submit(seq_request(2, 4), 1)
    assert "must specify the START flag" in err.value.message
    clock.advance_us(10_000)  # the slotted sequence is still served
    res = await sched.submit(seq_request(1, 5, end=True), 1)
    assert res.result.error is None and len(backend.batches) == 2
    await sched.stop()


# --- cancellation --------------------------------------------------------------------------
async def test_cancelling_a_queued_request_cancels_its_whole_sequence() -> None:
    """Triton 2.51 (L0_request_cancellation scheduler_test): the running request finishes, the
    sequence's other queued requests are answered CANCELLED, its slot goes to the backlog."""
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    cfg = SEQ.replace("max_batch_size: 4", "max_batch_size: 1")
    sched = SequenceBatchScheduler(backend, config(cfg % ""), clock=ManualClock())
    await sched.start()
    running = asyncio.create_task(sched.submit(seq_request(1, 1, start=True), 1))
    await backend.started.wait()
    cancelled = asyncio.create_task(sched.submit(seq_request(1, 2), 1))
    other = asyncio.create_task(sched.submit(seq_request(1, 3), 1))
    backlogged = asyncio.create_task(sched.submit(seq_request(2, 4, start=True), 1))
    await until(lambda: sched.pending_count == 3)
    cancelled.cancel()
    with pytest.raises(CancelledInQueue):
        await cancelled
    with pytest.raises(RepokitError) as err:
        await other
    assert err.value.code is Code.CANCELLED
    backend.gate.set()
    assert (await running).result.error is None
    assert (await backlogged).result.error is None  # sequence 2 got the freed slot
    assert [values(b[1][0], "INPUT0") for b in backend.batches] == [[1], [4]]
    with pytest.raises(RepokitError, match="must specify the START flag"):
        await sched.submit(seq_request(1, 5), 1)  # the cancelled sequence is gone
    await sched.stop()


async def test_cancelling_a_backlogged_request_cancels_its_sequence_in_the_backlog() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    cfg = SEQ.replace("max_batch_size: 4", "max_batch_size: 1")
    sched = SequenceBatchScheduler(backend, config(cfg % ""), clock=ManualClock())
    await sched.start()
    running = asyncio.create_task(sched.submit(seq_request(1, 1, start=True), 1))
    await backend.started.wait()
    first = asyncio.create_task(sched.submit(seq_request(2, 2, start=True), 1))
    second = asyncio.create_task(sched.submit(seq_request(2, 3), 1))
    await until(lambda: sched.slots.backlog_count == 2)
    first.cancel()
    with pytest.raises(CancelledInQueue):
        await first
    with pytest.raises(RepokitError) as err:
        await second
    assert err.value.code is Code.CANCELLED
    assert not sched.slots.backlog and sched.pending_count == 0
    backend.gate.set()
    assert (await running).result.error is None
    assert (await sched.submit(seq_request(1, 6, end=True), 1)).result.error is None
    await sched.stop()


async def test_cancelling_a_running_request_leaves_its_sequence_alone() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = await scheduler(backend)
    running = asyncio.create_task(sched.submit(seq_request(1, 1, start=True), 1))
    await backend.started.wait()
    queued = asyncio.create_task(sched.submit(seq_request(1, 2), 1))
    await until(lambda: sched.pending_count == 1)
    running.cancel()
    with pytest.raises(asyncio.CancelledError) as err:
        await running
    assert not isinstance(err.value, CancelledInQueue)  # it ran: not counted as CANCELED
    backend.gate.set()
    assert (await queued).result.error is None
    await sched.stop()


# --- iterative sequences -------------------------------------------------------------------
ITERATIVE = "iterative_sequence: true"


class ReschedulingBackend(RecordingBackend):
    """Reschedules each request until it ran ``rounds`` times (as a model counting down)."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds
        self.scheduler: SequenceBatchScheduler | None = None
        self.runs: dict[object, int] = {}

    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        assert self.scheduler is not None
        for req in requests:
            if values(req, "READY") != [True]:
                continue
            corrid = values(req, "CORRID")[0]
            self.runs[corrid] = self.runs.get(corrid, 0) + 1
            if self.runs[corrid] < self.rounds:
                self.scheduler.reschedule(req)
        return await super().execute(instance, requests)


async def test_iterative_requests_without_an_id_get_one_and_start() -> None:
    backend = RecordingBackend()
    sched = await scheduler(backend, ITERATIVE)
    await sched.submit(seq_request(0, 1), 1)
    await sched.submit(seq_request("", 2), 1)
    first, second = (b[1][0] for b in backend.batches)
    assert values(first, "CORRID") == [1] and values(second, "CORRID") == [2]
    assert values(first, "START") == [1] and values(second, "START") == [1]
    # each request that finished without rescheduling ended its sequence: slots are free
    assert sched.slots.slot_owner(0, 0) is None and not sched.slots.is_live(1)
    await sched.stop()


async def test_generated_ids_skip_live_sequences() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = await scheduler(backend, ITERATIVE)
    held = asyncio.create_task(sched.submit(seq_request(1, 1, start=True), 1))
    await until(lambda: backend.started.is_set())
    auto = asyncio.create_task(sched.submit(seq_request(0, 2), 1))
    backend.gate.set()
    await held
    await auto
    ready = [r for b in backend.batches for r in b[1] if values(r, "READY") == [True]]
    assert [values(r, "CORRID") for r in ready] == [[1], [2]]
    await sched.stop()


async def test_a_rescheduled_request_runs_again_without_start_and_answers_once() -> None:
    backend = ReschedulingBackend(rounds=3)
    sched = await scheduler(backend, ITERATIVE)
    backend.scheduler = sched
    result = await sched.submit(seq_request(0, 7), 1)
    assert result.result.outputs[0].data.reshape(-1).tolist() == [14]
    runs = [b[1][0] for b in backend.batches]
    assert len(runs) == 3 and backend.runs == {1: 3}
    assert [values(r, "START") for r in runs] == [[1], [0], [0]]
    assert all(values(r, "END") == [0.0] for r in runs)
    assert sched.slots.slot_owner(0, 0) is None  # ended after the last iteration
    await sched.stop()


async def test_ending_an_iterative_sequence_cancels_its_other_queued_requests() -> None:
    backend = RecordingBackend()
    backend.gate = asyncio.Event()
    sched = await scheduler(backend, ITERATIVE)
    first = asyncio.create_task(sched.submit(seq_request(5, 1, start=True), 1))
    await until(lambda: backend.started.is_set())
    queued = asyncio.create_task(sched.submit(seq_request(5, 2), 1))
    await until(lambda: sched.pending_count == 1)
    backend.gate.set()
    assert (await first).result.error is None
    with pytest.raises(RepokitError) as err:
        await queued
    assert err.value.code is Code.CANCELLED
    await sched.stop()


async def test_reschedule_is_refused_outside_iterative_sequences_and_executions() -> None:
    sched = await scheduler(RecordingBackend())
    with pytest.raises(RepokitError) as err:
        sched.reschedule(seq_request(1, 1))
    assert err.value.code is Code.UNSUPPORTED
    await sched.stop()
    iterative = await scheduler(RecordingBackend(), ITERATIVE)
    with pytest.raises(RepokitError) as err:
        iterative.reschedule(seq_request(1, 1))
    assert err.value.code is Code.INTERNAL
    await iterative.stop()


async def test_delay_scheduler_holds_the_sequence_batcher_until_slots_and_backlog_fill() -> None:
    """TRITONSERVER_DELAY_SCHEDULER=3 and TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1 (Triton's test
    hooks): nothing runs until 3 requests wait in slots and 1 in the backlog; then the three
    slotted sequences go in one batch and the backlogged one after them."""
    backend = RecordingBackend()
    sched = SequenceBatchScheduler(
        backend,
        config((SEQ % "").replace("max_batch_size: 4", "max_batch_size: 3")),
        model_dir=Path("."),
        clock=ManualClock(),
        hold_until_queued=3,
        hold_until_backlog=1,
    )
    await sched.start()
    tasks = [
        asyncio.create_task(sched.submit(seq_request(corrid, corrid, start=True, end=True), 1))
        for corrid in (1, 2, 3)
    ]
    await until(lambda: sched.slots.slotted_count == 3)
    for _ in range(20):
        await asyncio.sleep(0)
    assert backend.batches == []  # three slots full, but no request in the backlog yet
    tasks.append(asyncio.create_task(sched.submit(seq_request(4, 4, start=True, end=True), 1)))
    await asyncio.gather(*tasks)
    assert [len(reqs) for _, reqs in backend.batches] == [3, 1]
    await sched.stop()


async def test_backlog_delay_alone_does_not_hold_the_sequence_batcher() -> None:
    """As in Triton, the backlog count is only looked at with TRITONSERVER_DELAY_SCHEDULER."""
    backend = RecordingBackend()
    sched = SequenceBatchScheduler(
        backend, config(SEQ % ""), model_dir=Path("."), clock=ManualClock(), hold_until_backlog=5
    )
    await sched.start()
    await sched.submit(seq_request(1, 1, start=True, end=True), 1)
    assert len(backend.batches) == 1
    await sched.stop()
