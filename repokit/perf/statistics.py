"""Request records, window accounting, latency summaries and perf_analyzer's stability rule.

Pure code (no I/O, no clock): the profiler feeds it timestamps from its injected clock.

- :class:`RequestLog` collects one record per completed request (start, end, send and receive
  durations in ns); the load drivers append, the profiler takes the batch at each window end.
- :class:`WindowAccountant` assigns records to windows: a request counts in the window in which
  it **ends** (perf_analyzer's ``ValidLatencyMeasurement``); records ending before the window
  are dropped, records ending after it are carried to the next window.
- :func:`summarize_window` computes throughput = count x batch / duration, the average, sample
  standard deviation and percentiles (index ``round(p/100 x (n-1))`` over sorted latencies).
- :func:`is_stable` is perf_analyzer's rule: the last three windows all have non-zero
  throughput and max/min <= 1 + s for throughput and for the stabilizing latency (average, or
  pN with ``--percentile``). :func:`merge_windows` merges the stable windows into one summary.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

STABILITY_WINDOW = 3
REPORTED_PERCENTILES = (50, 90, 95, 99)

I64 = npt.NDArray[np.int64]
BOOLS = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class RecordBatch:
    start: I64
    end: I64
    send: I64
    recv: I64
    sequence_end: BOOLS
    delayed: BOOLS
    # ns from start to the first streamed response (generate_stream, a decoupled model's
    # stream); 0 for other requests
    first: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # responses each request received (a decoupled model's stream: its non-empty responses)
    responses: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # each request's response arrival times (a decoupled model's stream), an object array of
    # tuples; empty when no request of the batch had several responses
    response_times: npt.NDArray[np.object_] = field(
        default_factory=lambda: np.zeros(0, dtype=np.object_)
    )

    @staticmethod
    def empty() -> RecordBatch:
        z = np.zeros(0, dtype=np.int64)
        b = np.zeros(0, dtype=np.bool_)
        return RecordBatch(z, z, z, z, b, b, z, z)

    def __len__(self) -> int:
        return int(self.end.shape[0])

    def select(self, mask: BOOLS) -> RecordBatch:
        return RecordBatch(
            self.start[mask],
            self.end[mask],
            self.send[mask],
            self.recv[mask],
            self.sequence_end[mask],
            self.delayed[mask],
            _firsts(self)[mask],
            _responses(self)[mask],
            self.response_times[mask] if len(self.response_times) else self.response_times,
        )

    @staticmethod
    def concat(batches: Sequence[RecordBatch]) -> RecordBatch:
        if not batches:
            return RecordBatch.empty()
        return RecordBatch(
            np.concatenate([b.start for b in batches]),
            np.concatenate([b.end for b in batches]),
            np.concatenate([b.send for b in batches]),
            np.concatenate([b.recv for b in batches]),
            np.concatenate([b.sequence_end for b in batches]),
            np.concatenate([b.delayed for b in batches]),
            np.concatenate([_firsts(b) for b in batches]),
            np.concatenate([_responses(b) for b in batches]),
            _concat_times(batches),
        )

    @property
    def latency(self) -> I64:
        return self.end - self.start


def response_times_of(batch: RecordBatch) -> npt.NDArray[np.object_]:
    """The batch's response-time tuples, one per request (empty tuples when it has none)."""
    if len(batch.response_times) == len(batch):
        return batch.response_times
    out = np.empty(len(batch), dtype=np.object_)
    out[:] = [()] * len(batch)
    return out


def _concat_times(batches: Sequence[RecordBatch]) -> npt.NDArray[np.object_]:
    if not any(len(b.response_times) for b in batches):
        return np.zeros(0, dtype=np.object_)
    return np.concatenate([response_times_of(b) for b in batches])


def _firsts(batch: RecordBatch) -> I64:
    """The batch's first-response times (zeros for a batch built without them)."""
    return batch.first if len(batch.first) == len(batch) else np.zeros(len(batch), np.int64)


def _responses(batch: RecordBatch) -> I64:
    """The batch's response counts (one each for a batch built without them)."""
    if len(batch.responses) == len(batch):
        return batch.responses
    return np.ones(len(batch), np.int64)


class RequestLog:
    """Completed requests, appended by the load drivers (asyncio tasks or worker threads);
    :meth:`take` swaps them out as arrays. One tuple per request under a lock, so a take never
    splits a record."""

    def __init__(self) -> None:
        self._records: list[tuple[int, int, int, int, bool, bool, int, int]] = []
        self._times: list[tuple[int, tuple[int, ...]]] = []  # (record index, response times)
        self._lock = threading.Lock()
        self.sent = 0  # requests handed to the transport (for the send-rate line)

    def add(
        self,
        start: int,
        end: int,
        send: int,
        recv: int,
        sequence_end: bool = False,
        delayed: bool = False,
        first: int = 0,
        responses: int = 1,
        response_times: tuple[int, ...] = (),
    ) -> None:
        with self._lock:
            if response_times:
                self._times.append((len(self._records), response_times))
            self._records.append((start, end, send, recv, sequence_end, delayed, first, responses))

    def __len__(self) -> int:
        return len(self._records)

    def take(self) -> RecordBatch:
        with self._lock:
            records, self._records = self._records, []
            times, self._times = self._times, []
        if not records:
            return RecordBatch.empty()
        table = np.array([r[:4] + r[6:] for r in records], dtype=np.int64)
        flags = np.array([r[4:6] for r in records], dtype=np.bool_)
        response_times = np.zeros(0, dtype=np.object_)
        if times:
            response_times = np.empty(len(records), dtype=np.object_)
            response_times[:] = [()] * len(records)
            for index, values in times:
                response_times[index] = values
        return RecordBatch(
            table[:, 0],
            table[:, 1],
            table[:, 2],
            table[:, 3],
            flags[:, 0],
            flags[:, 1],
            table[:, 4],
            table[:, 5],
            response_times,
        )


class WindowAccountant:
    """Splits the stream of records into windows by their end timestamp."""

    def __init__(self) -> None:
        self._carry = RecordBatch.empty()

    def close_window(self, log: RequestLog, start_ns: int, end_ns: int) -> RecordBatch:
        records = RecordBatch.concat([self._carry, log.take()])
        inside = (records.end >= start_ns) & (records.end <= end_ns)
        self._carry = records.select(records.end > end_ns)
        return records.select(inside)

    def reset(self) -> None:
        self._carry = RecordBatch.empty()


@dataclass
class WindowSummary:
    """One measurement window (or the merge of the stable ones). Times in ns."""

    start_ns: int
    end_ns: int
    request_count: int
    throughput: float  # infer/s = request_count x batch / duration
    avg_latency_ns: int
    std_latency_ns: int
    percentiles_ns: dict[int, int]
    stabilizing_latency_ns: int
    avg_send_ns: int
    avg_recv_ns: int
    sequence_count: int = 0
    delayed_count: int = 0
    sent_count: int = 0
    duration_ns: int = 0
    client_cpu: float = 0.0  # client process CPU seconds / window seconds
    extra: dict[str, Any] = field(default_factory=dict)
    # responses received (a decoupled model's stream counts each non-empty response, as
    # perf_analyzer does); responses/s is perf_analyzer's "Response Throughput"
    response_count: int = 0

    @property
    def response_throughput(self) -> float:
        return self.response_count / self.duration_s if self.duration_ns > 0 else 0.0

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    @property
    def send_rate(self) -> float:
        return self.sent_count / self.duration_s if self.duration_ns > 0 else 0.0


def percentile_index(p: float, n: int) -> int:
    """perf_analyzer's index: C++ ``std::round`` (half away from zero) of p/100 x (n-1)."""
    return int(np.floor(p / 100.0 * (n - 1) + 0.5))


def summarize_window(
    records: RecordBatch,
    start_ns: int,
    end_ns: int,
    *,
    batch_size: int,
    percentile: int = -1,
    sent_count: int = 0,
    duration_ns: int | None = None,
    client_cpu: float = 0.0,
) -> WindowSummary:
    duration = duration_ns if duration_ns is not None else end_ns - start_ns
    n = len(records)
    wanted = sorted({*REPORTED_PERCENTILES, *([percentile] if percentile > 0 else [])})
    if n == 0:
        return WindowSummary(
            start_ns,
            end_ns,
            0,
            0.0,
            0,
            0,
            dict.fromkeys(wanted, 0),
            0,
            0,
            0,
            sent_count=sent_count,
            duration_ns=duration,
            client_cpu=client_cpu,
        )
    extra: dict[str, Any] = {}
    firsts = _firsts(records)
    if firsts.any():  # generate_stream: time to first response, as latency is reported
        ordered = np.sort(firsts)
        extra["first_response_avg_ns"] = int(ordered.sum() // n)
        extra["first_response_p50_ns"] = int(ordered[percentile_index(50, n)])
        extra["first_response_p99_ns"] = int(ordered[percentile_index(99, n)])
    latencies = np.sort(records.latency)
    avg = int(latencies.sum() // n)
    std = int(np.sqrt(np.sum((latencies - latencies.mean()) ** 2) / (n - 1))) if n > 1 else 0
    percentiles = {p: int(latencies[percentile_index(p, n)]) for p in wanted}
    throughput = n * batch_size / (duration / 1e9) if duration > 0 else 0.0
    return WindowSummary(
        start_ns=start_ns,
        end_ns=end_ns,
        request_count=n,
        throughput=throughput,
        avg_latency_ns=avg,
        std_latency_ns=std,
        percentiles_ns=percentiles,
        stabilizing_latency_ns=percentiles[percentile] if percentile > 0 else avg,
        avg_send_ns=int(records.send.sum() // n),
        avg_recv_ns=int(records.recv.sum() // n),
        sequence_count=int(records.sequence_end.sum()),
        delayed_count=int(records.delayed.sum()),
        sent_count=sent_count,
        duration_ns=duration,
        client_cpu=client_cpu,
        extra=extra,
        response_count=int(_responses(records).sum()),
    )


def _within(values: Sequence[float], threshold: float) -> bool:
    low, high = min(values), max(values)
    return low > 0 and high / low <= 1.0 + threshold


def is_stable(
    windows: Sequence[WindowSummary], stability_percentage: float, check_latency: bool = True
) -> bool:
    """perf_analyzer's rule over the last three windows."""
    if len(windows) < STABILITY_WINDOW:
        return False
    last = windows[-STABILITY_WINDOW:]
    threshold = stability_percentage / 100.0
    throughputs = [w.throughput for w in last]
    if any(t == 0 for t in throughputs) or not _within(throughputs, threshold):
        return False
    if not check_latency:
        return True
    return _within([float(w.stabilizing_latency_ns) for w in last], threshold)


def exceeds_latency_threshold(windows: Sequence[WindowSummary], threshold_ms: float) -> bool:
    """True when any of the last three windows' stabilizing latency is >= the threshold."""
    if threshold_ms <= 0 or len(windows) < STABILITY_WINDOW:
        return False
    limit = threshold_ms * 1e6
    return any(w.stabilizing_latency_ns >= limit for w in windows[-STABILITY_WINDOW:])


def merge_windows(
    windows: Sequence[WindowSummary],
    records: Sequence[RecordBatch],
    *,
    batch_size: int,
    percentile: int = -1,
) -> WindowSummary:
    """One summary over several windows: all their records over the sum of their durations."""
    duration = sum(w.duration_ns for w in windows)
    seconds = duration / 1e9
    cpu = sum(w.client_cpu * w.duration_s for w in windows) / seconds if seconds else 0.0
    merged = summarize_window(
        RecordBatch.concat(records),
        windows[0].start_ns,
        windows[-1].end_ns,
        batch_size=batch_size,
        percentile=percentile,
        sent_count=sum(w.sent_count for w in windows),
        duration_ns=duration,
        client_cpu=cpu,
    )
    return merged
