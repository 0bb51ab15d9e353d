"""The worker link: every message of repokit.frontends.workers.messages crosses a socketpair
intact (tensors out of band), errors cross as (code, message), a peer that goes away or sends
a frame that does not unpickle closes the link once."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import numpy as np

from repokit.errors import Code, RepokitError
from repokit.frontends.workers.link import Link
from repokit.frontends.workers.messages import (
    Ack,
    Call,
    Cancel,
    Credit,
    Failure,
    Reply,
    ServiceState,
    Snapshot,
    StreamEnd,
    StreamItem,
    VersionFacts,
    WorkerReady,
    WorkerStart,
)
from repokit.protocol.types import InferResponse, InferTensor


class Ends:
    def __init__(self) -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.received: asyncio.Queue[Any] = asyncio.Queue()
        self.lost = {"a": 0, "b": 0}
        self.a = Link(a, lambda m: None, lambda: self._lose("a"))
        self.b = Link(b, self.received.put_nowait, lambda: self._lose("b"))

    def _lose(self, side: str) -> None:
        self.lost[side] += 1


async def test_every_message_crosses_intact() -> None:
    ends = Ends()
    big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)  # 4 MiB: out of band
    response = InferResponse(
        "m", "1", "id", [InferTensor("OUT", "FP32", big.shape, big)], final=True
    )
    state = ServiceState(3, {("m", ""): VersionFacts(True, False)}, tracing=True)
    messages = [
        Call(1, "infer", ("request", {"k": b"v"})),
        Reply(1, response),
        Failure(2, "NOT_FOUND", "Request for unknown model: 'x' is not found"),
        StreamItem(3, response),
        StreamEnd(3),
        Cancel(4),
        Credit(5, 2),
        Snapshot(state),
        Ack(3),
        WorkerStart({"settings": 1}, state),
        WorkerReady(1234),
    ]
    for message in messages:
        ends.a.send(message)
    got = [await asyncio.wait_for(ends.received.get(), 10) for _ in messages]
    for sent, came in zip(messages, got, strict=True):
        assert type(came) is type(sent)
    assert got[0] == messages[0] and got[2:3] == messages[2:3] and got[4:] == messages[4:]
    for reply in (got[1], got[3]):
        (tensor,) = reply.value.outputs
        assert reply.value.final and tensor.shape == (1024, 1024)
        np.testing.assert_array_equal(tensor.data, big)
    ends.a.close()
    ends.b.close()


def test_errors_cross_as_code_and_message() -> None:
    failure = Failure.of(7, RepokitError(Code.UNAVAILABLE, "Server exiting"))
    assert failure == Failure(7, "UNAVAILABLE", "Server exiting")
    error = failure.error()
    assert (error.code, error.message) == (Code.UNAVAILABLE, "Server exiting")


async def test_a_peer_that_goes_away_closes_the_link_once() -> None:
    ends = Ends()
    ends.a.close()
    for _ in range(100):
        if ends.lost["b"]:
            break
        await asyncio.sleep(0.01)
    assert ends.lost == {"a": 1, "b": 1}
    assert ends.b.closed
    ends.b.send(Ack(1))  # a no-op once closed
    ends.b.close()
    assert ends.lost == {"a": 1, "b": 1}


async def test_a_frame_that_does_not_unpickle_closes_the_link() -> None:
    raw, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    lost = asyncio.Event()
    received: list[Any] = []
    link = Link(other, received.append, lost.set)
    raw.sendall(struct.pack("<QI", 5, 0) + b"\x80\x05junk")
    await asyncio.wait_for(lost.wait(), 10)
    assert link.closed and received == []
    raw.close()
