"""The instance process reads and prepares its next batch while the model runs, when batches
come back to back (repokit.backends.python.prefetch)."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repokit.backends.base import BackendRequest
from repokit.backends.python import ipc
from repokit.backends.python.child_link import ChildLink
from repokit.backends.python.prefetch import Prefetcher
from repokit.backends.server_api import RequestControl
from tests.backends.conftest import request
from tests.backends.test_python_backend import load

# execute waits for the file "gate" next to the model, then answers each request with INPUT0
# plus the size of its batch (OUTPUT0) and whether the prefetch thread exists (OUTPUT1); it
# also asks is_cancelled() of each request, which reads the socket when nobody else does.
GATED = """
import os
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils

GATE = os.path.join(os.path.dirname(__file__), "gate")
GATE2 = os.path.join(os.path.dirname(__file__), "gate2")


class TritonPythonModel:
    def execute(self, requests):
        while not os.path.exists(GATE):
            time.sleep(0.001)
        first = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
        while first.flat[0] >= 100 and not os.path.exists(GATE2):
            time.sleep(0.001)
        prefetching = any(t.name == "prefetch" for t in threading.enumerate())
        responses = []
        for r in requests:
            assert not r.is_cancelled()
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            flag = np.full(x.shape, float(prefetching), np.float32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", x + np.float32(len(requests))),
                pb_utils.Tensor("OUTPUT1", flag),
            ]))
        return responses
"""


def rows(*values: float) -> list[BackendRequest]:
    return [request({"INPUT0": np.full((1, 4), v, np.float32)}) for v in values]


async def test_batches_that_queue_up_are_prefetched_and_answered_in_order(tmp_path: Path) -> None:
    backend = await load(tmp_path, "gated", GATED)
    first = asyncio.ensure_future(backend.execute(0, rows(0, 1)))
    await asyncio.sleep(0.05)  # the process has it and waits for the gate
    later = [
        asyncio.ensure_future(backend.execute(0, rows(10 * i, 10 * i + 1))) for i in range(1, 5)
    ]
    await asyncio.sleep(0.05)  # the second batch is at the process too (two in flight)
    (tmp_path / "gated" / "1" / "gate").touch()
    results = [await first] + [await f for f in later]
    prefetched = []
    for i, (batch, timing) in enumerate(results):
        assert [r.error for r in batch] == [None, None]
        for j, result in enumerate(batch):
            expected = np.full((1, 4), 10 * i + j + 2, np.float32)  # + batch size 2
            np.testing.assert_array_equal(result.outputs[0].data, expected)
        prefetched.append(bool(batch[0].outputs[1].data.flat[0]))
        assert timing.compute_input_ns > 0 and timing.compute_infer_ns > 0
    # the second batch was waiting when the first finished, so the prefetch thread fetched
    # the third while the second ran
    assert prefetched[1]
    await backend.unload()


async def test_a_cancellation_read_by_the_prefetch_thread_reaches_is_cancelled(
    tmp_path: Path,
) -> None:
    """While the prefetch thread waits for the next batch it reads the socket for everybody: a
    cancellation of a request in the running batch still reaches is_cancelled() (the model
    asserts no request is cancelled, so the batch fails with that assertion)."""
    backend = await load(tmp_path, "gated", GATED)
    model_dir = tmp_path / "gated" / "1"
    first = asyncio.ensure_future(backend.execute(0, rows(0, 1)))
    await asyncio.sleep(0.05)  # at the process, waiting for the gate
    control = RequestControl()
    running = [request({"INPUT0": np.full((1, 4), 100, np.float32)}, control=control)]
    running += rows(101)
    second = asyncio.ensure_future(backend.execute(0, running))
    await asyncio.sleep(0.05)  # at the process too: it was waiting when the first finished
    (model_dir / "gate").touch()
    await first
    await asyncio.sleep(0.05)  # the second runs (waiting for gate2); the prefetch thread reads
    control.cancel()
    await asyncio.sleep(0.05)
    (model_dir / "gate2").touch()
    (hit, _) = await second
    assert all(r.error is not None and "AssertionError" in r.error.message for r in hit)
    assert hit[0].error is not None and "Failed to process the request(s)" in hit[0].error.message
    (after,), _ = await backend.execute(0, rows(7))  # the prefetch thread fetched this one
    np.testing.assert_array_equal(after.outputs[0].data, np.full((1, 4), 8, np.float32))
    assert after.outputs[1].data.flat[0] == 1.0
    await backend.unload()


# --- the Prefetcher itself, over a socket pair -------------------------------------------------
def send(sock: socket.socket, message: Any) -> None:
    ipc.send_parts(sock, ipc.encode(message))


def test_prefetcher_prepares_the_next_operation_and_says_whether_it_was_waiting() -> None:
    ours, theirs = socket.socketpair()
    link = ChildLink(ours)
    prepared: list[str] = []

    def prepare(message: Any) -> Any:
        prepared.append(threading.current_thread().name)
        return message[0], f"prepared {message[1]}"

    prefetcher = Prefetcher(link, prepare)
    send(theirs, ("execute", "one"))
    prefetcher.arm()
    deadline = threading.Event()
    while not prefetcher._fetched and not deadline.wait(0.001):
        pass
    assert prefetcher.take() == (("execute", "prepared one"), True)
    assert prepared == ["prefetch"]
    prefetcher.arm()  # nothing has come yet: take() waits for it
    threading.Timer(0.05, send, (theirs, ("finalize", None))).start()
    assert prefetcher.take() == (("finalize", "prepared None"), False)
    theirs.close()
    ours.close()


def test_prefetcher_passes_on_a_closed_connection() -> None:
    ours, theirs = socket.socketpair()
    prefetcher = Prefetcher(ChildLink(ours), lambda message: message)
    prefetcher.arm()
    theirs.close()
    with pytest.raises(ipc.ChannelClosed):
        prefetcher.take()
    ours.close()
