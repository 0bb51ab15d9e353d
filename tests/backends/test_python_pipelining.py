"""Python backend IPC: batches queued for a busy instance travel in one message, yet each gets
its own ``execute`` call; cancellation and instance death while queued; the frame parser."""

from __future__ import annotations

import asyncio
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from repokit.backends.base import BackendRequest, WireRequest
from repokit.backends.python import ipc
from repokit.backends.python.backend import PythonBackend
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.scheduler.default import DefaultScheduler
from tests.backends.conftest import request
from tests.backends.test_python_backend import load

# execute waits for the file "gate" next to the model, then answers each request with its
# INPUT0 plus the size of the batch it arrived in; INPUT0 == -1 makes the process exit.
GATED = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

GATE = os.path.join(os.path.dirname(__file__), "gate")


class TritonPythonModel:
    def execute(self, requests):
        while not os.path.exists(GATE):
            time.sleep(0.001)
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x.flat[0] == -1:
                os._exit(3)
            out = x + np.float32(len(requests))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""


# execute waits for the file "gate<INPUT0>" next to the model, then answers INPUT0
PER_REQUEST_GATES = """
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            gate = os.path.join(os.path.dirname(__file__), f"gate{int(x.flat[0])}")
            while not os.path.exists(gate):
                time.sleep(0.001)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def row(value: float) -> BackendRequest:
    return request({"INPUT0": np.full((1, 4), value, np.float32)})


def count_messages(backend: PythonBackend, instance: int = 0) -> list[str]:
    """Record the operation of every message sent to the instance process."""
    sent: list[str] = []
    channel = backend._instances[instance].channel
    assert channel is not None
    original = channel.request

    def counting(message: Any, on_reply: Any) -> None:
        sent.append(message[0] if message[0] != "execute" else f"execute x{len(message[1])}")
        original(message, on_reply)

    channel.request = counting  # type: ignore[method-assign]
    return sent


async def test_queued_batches_share_one_message_and_keep_their_execute(tmp_path: Path) -> None:
    backend = await load(tmp_path, "gated", GATED)
    # merging as for fast batches, however long the first one waits for its gate on a busy
    # machine (slow batches go one per message: the next test)
    backend._queues.slow_batch_s = math.inf
    sent = count_messages(backend)
    first = asyncio.ensure_future(backend.execute(0, [row(100)]))
    await asyncio.sleep(0)  # the first batch is at the process, which waits for the gate
    sizes = [1, 2, 3, 1]
    queued = [
        asyncio.ensure_future(backend.execute(0, [row(10 * i + j) for j in range(size)]))
        for i, size in enumerate(sizes)
    ]
    await asyncio.sleep(0)
    (tmp_path / "gated" / "1" / "gate").touch()
    (result,), timing = await first
    np.testing.assert_array_equal(result.outputs[0].data, np.full((1, 4), 101, np.float32))
    assert timing.compute_infer_ns > 0
    for i, (size, task) in enumerate(zip(sizes, queued, strict=True)):
        results, timing = await task
        assert timing.compute_infer_ns > 0 and timing.compute_input_ns > 0
        for j, one in enumerate(results):  # each batch was its own execute call
            expected = np.full((1, 4), 10 * i + j + size, np.float32)
            np.testing.assert_array_equal(one.outputs[0].data, expected)
    assert sent == ["execute x1", "execute x4"]
    await backend.unload()


async def test_after_a_slow_batch_each_queued_batch_is_answered_when_it_ran(
    tmp_path: Path,
) -> None:
    """Triton answers each request when its execution ends: batches queued behind a slow one
    go one per message, so an answer does not wait for the batches merged after it (a 2 s
    model answered the 2nd of 10 queued requests after 20 s)."""
    backend = await load(tmp_path, "slow", PER_REQUEST_GATES)
    sent = count_messages(backend)
    gates = tmp_path / "slow" / "1"
    first = asyncio.ensure_future(backend.execute(0, [row(1)]))
    await asyncio.sleep(0)
    queued = [asyncio.ensure_future(backend.execute(0, [row(i)])) for i in (2, 3)]
    await asyncio.sleep(0.2)  # the first batch is slow: it waits at least this long
    (gates / "gate2").touch()
    (gates / "gate1").touch()
    assert (await first)[0][0].error is None
    (second,), _ = await asyncio.wait_for(queued[0], 60)  # while the third waits for its gate
    np.testing.assert_array_equal(second.outputs[0].data, np.full((1, 4), 2, np.float32))
    assert not queued[1].done()
    (gates / "gate3").touch()
    (third,), _ = await queued[1]
    np.testing.assert_array_equal(third.outputs[0].data, np.full((1, 4), 3, np.float32))
    assert sent == ["execute x1", "execute x1", "execute x1"]
    await backend.unload()


async def test_the_instance_reports_when_it_started_each_execution(tmp_path: Path) -> None:
    """On the server's trace clock (time.monotonic_ns: CLOCK_MONOTONIC, shared by every
    process): a batch queued at the instance behind another starts once that one ended, and
    its reported start does not move when the server reads the answers late."""
    backend = await load(tmp_path, "stamps", PER_REQUEST_GATES)
    gates = tmp_path / "stamps" / "1"
    sent = time.monotonic_ns()
    first = asyncio.ensure_future(backend.execute(0, [row(1)]))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(backend.execute(0, [row(2)]))
    await asyncio.sleep(0.05)
    (gates / "gate2").touch()
    opened = time.monotonic_ns()
    (gates / "gate1").touch()
    time.sleep(0.3)  # the server's loop is busy while the answers come in
    (one,), first_timing = await first
    (two,), second_timing = await second
    read = time.monotonic_ns()
    assert one.error is None and two.error is None
    assert sent <= first_timing.started_ns
    # the first execute waited for its gate: it ended after the gate opened
    assert (
        first_timing.started_ns + first_timing.compute_input_ns + (first_timing.compute_infer_ns)
        >= opened
    )
    # it ran after the first one: its execute began once that one returned (its inputs may
    # have been built while the first one ran: the prefetch thread's work)
    assert opened <= second_timing.started_ns + second_timing.compute_input_ns
    ran = second_timing.compute_input_ns + second_timing.compute_infer_ns
    assert second_timing.started_ns + ran + second_timing.compute_output_ns <= read
    await backend.unload()


async def test_a_cancelled_queued_execute_is_not_sent(tmp_path: Path) -> None:
    backend = await load(tmp_path, "cancel", GATED)
    sent = count_messages(backend)
    first = asyncio.ensure_future(backend.execute(0, [row(1)]))
    await asyncio.sleep(0)
    dropped = asyncio.ensure_future(backend.execute(0, [row(2)]))
    kept = asyncio.ensure_future(backend.execute(0, [row(3)]))
    await asyncio.sleep(0)
    dropped.cancel()
    (tmp_path / "cancel" / "1" / "gate").touch()
    assert (await first)[0][0].error is None
    (result,), _ = await kept
    np.testing.assert_array_equal(result.outputs[0].data, np.full((1, 4), 4, np.float32))
    assert dropped.cancelled()
    assert sent == ["execute x1", "execute x1"]
    await backend.unload()


async def test_instance_death_fails_the_running_and_the_queued_batches(tmp_path: Path) -> None:
    backend = await load(tmp_path, "dies", GATED)
    running = asyncio.ensure_future(backend.execute(0, [row(-1)]))
    await asyncio.sleep(0)
    queued = [asyncio.ensure_future(backend.execute(0, [row(i)])) for i in range(3)]
    await asyncio.sleep(0)
    (tmp_path / "dies" / "1" / "gate").touch()
    for task in (running, *queued):
        (result,), _ = await task
        assert result.error is not None
        assert result.error.message == "Stub process 'dies_0_0' is not healthy."
    assert not backend.health()
    (after,), _ = await backend.execute(0, [row(1)])  # served by the restarted process
    assert after.error is None and backend.health()
    await backend.unload()


async def test_default_scheduler_pipelines_and_counts_pending(tmp_path: Path) -> None:
    backend = await load(tmp_path, "sched", GATED)
    scheduler = DefaultScheduler(backend)
    await scheduler.start()
    tasks = [asyncio.ensure_future(scheduler.submit(row(i), 1)) for i in range(4)]
    await asyncio.sleep(0)
    assert scheduler.pending_count == 3  # one executes, three wait
    (tmp_path / "sched" / "1" / "gate").touch()
    for i, task in enumerate(tasks):
        scheduled = await task
        expected = np.full((1, 4), i + 1, np.float32)  # one request per execute
        np.testing.assert_array_equal(scheduled.result.outputs[0].data, expected)
        assert scheduled.queue_ns >= 0 and scheduled.timing.compute_infer_ns > 0
    assert scheduler.pending_count == 0
    await scheduler.stop()
    await backend.unload()


def test_frame_parser_reassembles_frames_split_anywhere() -> None:
    rng = np.random.default_rng(1)
    big = rng.random(100_000, dtype=np.float32)  # 400 kB: out of band
    strings = np.array([b"a", b"\x00b"], dtype=object)
    messages = [
        ("ok", [("x", ipc.pack_array(np.arange(6, dtype=np.int16).reshape(2, 3)))]),
        ("big", ipc.pack_array(big), ipc.pack_array(big[::2])),
        ("strings", ipc.pack_array(strings), ipc.pack_array(np.zeros((0, 3), np.float64))),
        ("empty", None),
        ("strided", ipc.pack_array(np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])),
    ]
    stream = b"".join(bytes(memoryview(p).cast("B")) for m in messages for p in ipc.encode(m))
    chooser = random.Random(7)
    for _ in range(5):
        parser = ipc.FrameParser()
        got: list[Any] = []
        position = 0
        while position < len(stream):
            target = parser.buffer()
            count = min(len(target), len(stream) - position, chooser.choice([1, 7, 4096, 1 << 20]))
            target[:count] = stream[position : position + count]
            position += count
            got.extend(parser.feed(count))
        assert len(got) == len(messages)
        dtypes: dict[str, np.dtype[Any]] = {}
        small = ipc.unpack_array(got[0][1][0][1], dtypes)
        np.testing.assert_array_equal(small, np.arange(6, dtype=np.int16).reshape(2, 3))
        np.testing.assert_array_equal(ipc.unpack_array(got[1][1], dtypes), big)
        np.testing.assert_array_equal(ipc.unpack_array(got[1][2], dtypes), big[::2])
        assert ipc.unpack_array(got[2][1], dtypes).tolist() == strings.tolist()
        assert ipc.unpack_array(got[2][2], dtypes).shape == (0, 3)
        assert got[3] == ("empty", None)
        strided = ipc.unpack_array(got[4][1], dtypes)
        np.testing.assert_array_equal(
            strided, np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
        )
        # received tensors are writable, small (in the pickle) and large (out of band) alike
        assert small.flags.writeable and ipc.unpack_array(got[1][1], dtypes).flags.writeable


async def test_an_unsendable_output_fails_only_its_own_batch(tmp_path: Path) -> None:
    code = GATED.replace(
        "            out = x + np.float32(len(requests))",
        "            out = x + np.float32(len(requests))\n"
        "            if x.flat[0] == 5:\n"
        "                out = np.array([lambda: None], dtype=object)",
    )
    backend = await load(tmp_path, "unsendable", code)
    sent = count_messages(backend)
    first = asyncio.ensure_future(backend.execute(0, [row(1)]))
    await asyncio.sleep(0)
    bad = asyncio.ensure_future(backend.execute(0, [row(5)]))
    good = asyncio.ensure_future(backend.execute(0, [row(6)]))
    await asyncio.sleep(0)
    (tmp_path / "unsendable" / "1" / "gate").touch()
    assert (await first)[0][0].error is None
    (failed,), _ = await bad
    assert failed.error is not None
    assert failed.error.message.startswith(
        "Failed to process the request(s) for model 'unsendable_0_0', message: "
    )
    (result,), _ = await good
    np.testing.assert_array_equal(result.outputs[0].data, np.full((1, 4), 7, np.float32))
    assert sent == ["execute x1", "execute x2"]
    assert backend.health()
    await backend.unload()


def _wire_request(value: float) -> bytes:
    msg = pb.ModelInferRequest(model_name="gated")
    for name in ("INPUT0", "INPUT1"):
        msg.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        msg.raw_input_contents.append(np.full(4, value, np.float32).tobytes())
    body: bytes = msg.SerializeToString()
    return body


async def test_wire_plan_goes_again_when_its_message_was_cancelled_unsent(tmp_path: Path) -> None:
    """The first wire request carries the model's plan; cancelled while queued (never sent),
    the next request must carry it again, or the process would send every request back."""
    backend = await load(tmp_path, "gated", GATED)
    f32 = np.dtype(np.float32)
    plan = WirePlan(
        model_name="gated",
        version_text="1",
        max_batch_size=8,
        inputs={"INPUT0": ("FP32", (4,), f32, 4), "INPUT1": ("FP32", (4,), f32, 4)},
        outputs=frozenset({"OUTPUT0", "OUTPUT1"}),
    )
    sent = count_messages(backend)
    first = asyncio.ensure_future(backend.execute(0, [row(100)]))
    await asyncio.sleep(0)  # at the process, which waits for the gate
    queued = asyncio.ensure_future(
        backend.execute_wire(0, WireRequest("grpc", _wire_request(1), plan, 0))
    )
    await asyncio.sleep(0)
    queued.cancel()
    (tmp_path / "gated" / "1" / "gate").touch()
    await first
    outcome = await backend.execute_wire(0, WireRequest("grpc", _wire_request(2), plan, 0))
    assert sent == ["execute x1", "execute x1"]  # the cancelled request never left
    assert outcome is not None and outcome.batch_size == 1
    body = outcome.result.encoded
    assert body is not None and outcome.result.error is None
    reply = pb.ModelInferResponse.FromString(body)
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [3.0] * 4
    again = await backend.execute_wire(0, WireRequest("grpc", _wire_request(5), plan, 0))
    assert again is not None and again.result.encoded is not None  # the process kept the plan
    await backend.unload()
