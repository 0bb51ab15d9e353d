"""A virtual-time event loop and a fake transport for driving the profiler deterministically.

On :class:`VirtualTimeLoop` ``asyncio.sleep`` takes no real time: when nothing is ready the
selector jumps the loop's clock to the next timer. :class:`FakeTransport` answers after a
latency chosen by a function of (virtual time, concurrency in flight) and keeps cumulative
statistics like a server's statistics extension.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from repokit.perf.transports.base import InferTiming, SequenceFlags, ShmBinding


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events and timeout is not None and timeout > 0:
            self._loop.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(selector=_VirtualSelector(self))
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self.now

    def clock_ns(self) -> int:
        return round(self.now * 1e9)


def run_virtual(coro: Any) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


ADD_SUB_METADATA = {
    "name": "add_sub",
    "versions": ["1"],
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ],
    "outputs": [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ],
}
ADD_SUB_CONFIG = {"name": "add_sub", "max_batch_size": 8}


@dataclass
class FakeTransport:
    """latency(now_s, in_flight) -> seconds; fail_after: error from that request on."""

    latency: Callable[[float, int], float]
    metadata: dict[str, Any] = field(default_factory=lambda: dict(ADD_SUB_METADATA))
    config: dict[str, Any] | None = field(default_factory=lambda: dict(ADD_SUB_CONFIG))
    fail_after: int | None = None
    queue_fraction: float = 0.25
    in_flight: int = 0
    sent: list[tuple[int, SequenceFlags | None]] = field(default_factory=list)
    success_count: int = 0
    success_ns: int = 0
    connections: int = 0

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def server_metadata(self) -> dict[str, Any]:
        return {"name": "fake", "extensions": ["statistics"]}

    async def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        return self.metadata

    async def model_config(self, model: str, version: str) -> dict[str, Any] | None:
        return self.config

    async def model_statistics(self, model: str | None, version: str) -> dict[str, Any]:
        n, ns = self.success_count, self.success_ns
        queue = int(ns * self.queue_fraction)
        infer = ns - queue
        stats = {
            "success": {"count": n, "ns": ns},
            "queue": {"count": n, "ns": queue},
            "compute_input": {"count": n, "ns": 0},
            "compute_infer": {"count": n, "ns": infer},
            "compute_output": {"count": n, "ns": 0},
        }
        entry = {
            "name": self.metadata["name"],
            "version": "1",
            "inference_count": n,
            "execution_count": n,
            "inference_stats": stats,
        }
        return {"model_stats": [entry]}

    async def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        pass

    async def unregister_system_shm(self, name: str) -> None:
        pass

    async def update_trace_settings(self, settings: dict[str, str]) -> None:
        self.trace_settings = dict(settings)

    def prepare(
        self,
        model: str,
        version: str,
        inputs: dict[str, Any],
        outputs: list[tuple[str, str]],
        shm: ShmBinding | None = None,
        decoupled: bool = False,
    ) -> Any:
        return {name: array for name, (_, array) in inputs.items()}

    async def connect(self) -> FakeConnection:
        self.connections += 1
        return FakeConnection(self)


class FakeConnection:
    def __init__(self, owner: FakeTransport) -> None:
        self.owner = owner

    async def infer(
        self, request: Any, sequence: SequenceFlags | None = None, want_outputs: bool = False
    ) -> InferTiming:
        owner = self.owner
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        start = loop.clock_ns()
        owner.sent.append((start, sequence))
        if owner.fail_after is not None and len(owner.sent) > owner.fail_after:
            return InferTiming(start, start, start, start, "HTTP 400: injected failure")
        owner.in_flight += 1
        delay = owner.latency(loop.time(), owner.in_flight)
        await asyncio.sleep(delay)
        owner.in_flight -= 1
        end = loop.clock_ns()
        owner.success_count += 1
        owner.success_ns += end - start
        return InferTiming(start, start + 1000, end - 2000, end, None)

    async def close(self) -> None:
        pass
