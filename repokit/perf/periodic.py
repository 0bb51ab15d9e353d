"""perf_analyzer's periodic concurrency mode (``--periodic-concurrency-range START:END:STEP``
with ``--request-period N``), its ramp for LLM-style decoupled models.

As perf_analyzer 2.51 (``periodic_concurrency_manager.cc``, ``periodic_concurrency_worker.cc``)
runs it: ``START`` requests are sent at once, each on a ModelStreamInfer stream of its own;
once every request of the latest group has received ``N`` responses (the empty final response
counts), ``STEP`` more are sent, while the groups completed so far times ``STEP`` is below
``END``; the run ends when ``END`` requests have received their final response (requests still
streaming then are cancelled). A request whose final response comes before its ``N``-th is an
error. There are no windows and no stability check: every request's start and response
timestamps go to ``--profile-export-file`` (required) as one experiment, ``{"mode":
"concurrency", "value": 1}`` with window boundaries ``[0, 2^64 - 1]``, as perf_analyzer writes
it; perf_analyzer writes no CSV in this mode, and ``-f`` is ignored here too (with a warning).
It needs ``-i grpc --streaming`` and one ``-u`` endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from repokit.perf.errors import GENERIC_ERROR, PerfError, option_error
from repokit.perf.options import ConcurrencyRange, PerfOptions
from repokit.perf.report import LevelResult
from repokit.perf.statistics import RequestLog, summarize_window
from repokit.perf.transports.base import InferTiming, Transport
from repokit.perf.workload import Workload

OPTION = "--periodic-concurrency-range"
MODE = "periodic_concurrency"
UINT64_MAX = 2**64 - 1
TOO_FEW_RESPONSES = (
    "Request received final response before request period was reached. Request period "
    "must be at most the total number of responses received by any request."
)


def parse_periodic_range(text: str) -> ConcurrencyRange:
    """``START:END[:STEP]`` checked as perf_analyzer checks it (its messages)."""
    parts = text.split(":")
    if len(parts) < 2:
        raise option_error(
            f"Failed to parse {OPTION}. Both <start> and <end> values must be provided."
        )
    if len(parts) > 3:
        raise option_error(f"Failed to parse {OPTION}. The value does not match <start:end:step>.")
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise option_error(
            f"Failed to parse {OPTION}. <start>, <end> and <step> must be integers, got '{text}'."
        ) from None
    start, end = values[0], values[1]
    step = values[2] if len(values) > 2 else 1
    if step <= 0:
        raise option_error(f"Failed to parse {OPTION}. The <step> value must be > 0.")
    if start > end:
        raise option_error(f"Failed to parse {OPTION}. The <start> must be <= <end>.")
    if (end - start) % step:
        raise option_error(
            f"Failed to parse {OPTION}. The <step> value must be a factor of the range size "
            "(<end> - <start>)."
        )
    if start < 1:  # perf_analyzer would wait for responses to no request, for ever
        raise option_error(f"Failed to parse {OPTION}. The <start> value must be > 0.")
    return ConcurrencyRange(start, end, step)


def check_periodic(o: PerfOptions) -> None:
    """perf_analyzer's rules for the mode, and what repokit does not combine with it."""
    if o.request_period < 1:
        raise option_error("Failed to parse --request-period. The value must be > 0")
    if o.periodic_concurrency_range is None:
        return
    modes = [o.concurrency_range, o.request_rate_range, o.request_intervals]
    if any(mode is not None for mode in modes):
        raise option_error(
            "Cannot specify more then one inference load mode. Please choose only one of the "
            "following modes: --concurrency-range, --periodic-concurrency-range, "
            "--request-rate-range, or --request-intervals."
        )
    if not o.streaming or o.protocol != "grpc":
        raise option_error(f"The {OPTION} option requires bi-directional gRPC streaming.")
    if o.profile_export_file is None:
        raise option_error(f"Must provide --profile-export-file when using the {OPTION} option.")
    if len(o.server_urls) > 1:
        raise option_error(f"{OPTION} runs against one -u endpoint")
    for given, name in (
        (o.request_count, "--request-count"),
        (o.warmup_request_count, "--warmup-request-count"),
        (o.binary_search, "--binary-search"),
    ):
        if given:
            raise option_error(f"{name} cannot be combined with {OPTION}")


class PeriodicRun:
    """One run of the mode on one endpoint (see the module docstring)."""

    def __init__(
        self,
        options: PerfOptions,
        transport: Transport,
        workload: Workload,
        clock: Callable[[], int],
    ) -> None:
        assert options.periodic_concurrency_range is not None
        self.range = options.periodic_concurrency_range
        self.period = options.request_period
        self.options = options
        self.transport = transport
        self.flat = workload.flat()
        self.clock = clock
        self.log = RequestLog()
        self.failure: str | None = None
        self.finished = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._incomplete = 0  # requests of the latest group that have not reached the period
        self._steps = 0  # groups that completed their period
        self._completed = 0  # requests that received their final response

    async def run(self) -> LevelResult:
        start = self.clock()
        self._add(self.range.start)
        try:
            await self.finished.wait()
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.failure is not None:
            raise PerfError(self.failure, GENERIC_ERROR)
        records = self.log.take()
        end = max(records.end.tolist(), default=self.clock())
        summary = summarize_window(
            records,
            start,
            end,
            batch_size=self.options.batch_size,
            percentile=self.options.percentile,
            sent_count=self.log.sent,
        )
        return LevelResult(
            mode=MODE,
            value=float(len(self._tasks)),
            stable=True,
            summary=summary,
            windows=[summary],
            records=records,
            window_boundaries=[0, UINT64_MAX],
        )

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
        self.finished.set()

    def _add(self, count: int) -> None:
        """Send ``count`` more concurrent requests: the next group."""
        self._incomplete = count
        for _ in range(count):
            index = len(self._tasks)
            self._tasks.append(asyncio.get_running_loop().create_task(self._request(index)))

    def _period_reached(self) -> None:
        self._incomplete -= 1
        if self._incomplete == 0:
            self._steps += 1
            if self._steps * self.range.step < self.range.end:
                self._add(self.range.step)

    async def _request(self, index: int) -> None:
        connection: Any = await self.transport.connect()
        request, _ = self.flat[index % len(self.flat)]
        period = self.period

        def on_response(count: int, final: bool) -> None:
            if count == period:
                self._period_reached()
            if final and count < period:
                self._fail(TOO_FEW_RESPONSES)

        try:
            self.log.sent += 1
            timing: InferTiming = await connection.infer(request, None, False, on_response)
        finally:
            with contextlib.suppress(Exception):
                await connection.close()
        if timing.error is not None:
            self._fail(timing.error)
            return
        self.log.add(
            timing.start,
            timing.end,
            timing.sent - timing.start,
            timing.end - timing.received,
            first=timing.first - timing.start if timing.first else 0,
            responses=timing.responses,
            response_times=timing.response_times,
        )
        self._completed += 1
        if self._completed == self.range.end:
            self.finished.set()
