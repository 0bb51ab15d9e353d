"""Latency summaries (``--metrics-config summary_latencies=true``): Triton's
``nv_inference_{request,queue,compute_input,compute_infer,compute_output}_summary_us``
families.

As prometheus-cpp's Summary that Triton uses: ``_count`` and ``_sum`` over every observation,
quantiles over the observations of a sliding window (``max_age``, 60 s in Triton; the window
also keeps at most :data:`MAX_SAMPLES` observations). A quantile with no observation in the
window is ``Nan``, as Triton prints it. The clock is injectable.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
MAX_AGE_S = 60.0
MAX_SAMPLES = 10_000


@dataclass
class LatencySummary:
    clock: Callable[[], float] = time.monotonic
    max_age_s: float = MAX_AGE_S
    count: int = 0
    total_us: int = 0
    _window: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))

    def observe(self, us: int) -> None:
        self.count += 1
        self.total_us += us
        self._window.append((self.clock(), us))

    def quantiles(self, wanted: tuple[float, ...]) -> list[float]:
        """The value at each quantile of the window (``nan`` when it is empty)."""
        oldest = self.clock() - self.max_age_s
        window = self._window
        while window and window[0][0] < oldest:
            window.popleft()
        values = sorted(v for _, v in window)
        if not values:
            return [math.nan for _ in wanted]
        last = len(values) - 1
        return [float(values[min(last, max(0, math.ceil(q * len(values)) - 1))]) for q in wanted]


@dataclass
class LatencySummaries:
    """The summaries of one model version."""

    clock: Callable[[], float] = time.monotonic
    request: LatencySummary = field(init=False)
    queue: LatencySummary = field(init=False)
    # the compute phases of the requests a model ran (not those answered from the cache)
    compute_input: LatencySummary = field(init=False)
    compute_infer: LatencySummary = field(init=False)
    compute_output: LatencySummary = field(init=False)
    # nv_cache_{hit,miss}_summary_per_model (rendered for models with the response cache)
    cache_hit: LatencySummary = field(init=False)
    cache_miss: LatencySummary = field(init=False)

    def __post_init__(self) -> None:
        self.request = LatencySummary(self.clock)
        self.queue = LatencySummary(self.clock)
        self.compute_input = LatencySummary(self.clock)
        self.compute_infer = LatencySummary(self.clock)
        self.compute_output = LatencySummary(self.clock)
        self.cache_hit = LatencySummary(self.clock)
        self.cache_miss = LatencySummary(self.clock)

    def observe(self, request_ns: int, queue_ns: int) -> None:
        self.request.observe(request_ns // 1000)
        self.queue.observe(queue_ns // 1000)

    def observe_compute(self, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.compute_input.observe(input_ns // 1000)
        self.compute_infer.observe(infer_ns // 1000)
        self.compute_output.observe(output_ns // 1000)


def parse_quantiles(text: str) -> tuple[float, ...]:
    """``summary_quantiles=0.5:0.05,0.9:0.01`` (quantile:error pairs; the error is ignored)."""
    quantiles = []
    for pair in text.split(","):
        head = pair.split(":", 1)[0].strip()
        try:
            value = float(head)
        except ValueError:
            raise ValueError(f"invalid summary quantile '{pair}'") from None
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"summary quantile '{pair}' is not between 0 and 1")
        quantiles.append(value)
    return tuple(quantiles)
