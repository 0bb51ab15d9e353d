"""Percentiles, window accounting and the stability rule, on hand-built records."""

from __future__ import annotations

import numpy as np

from repokit.perf.statistics import (
    RecordBatch,
    RequestLog,
    WindowAccountant,
    exceeds_latency_threshold,
    is_stable,
    merge_windows,
    percentile_index,
    summarize_window,
)

MS = 1_000_000


def _summary(throughput: float, latency_ns: int):  # type: ignore[no-untyped-def]
    n = 10
    records = RecordBatch(
        np.zeros(n, dtype=np.int64),
        np.full(n, latency_ns, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
    )
    return summarize_window(records, 0, int(n / throughput * 1e9), batch_size=1)


def test_percentile_index_rounds_half_away_from_zero() -> None:
    # p/100*(n-1): 0.5*3 = 1.5 -> 2 (C++ std::round), Python's round() would give 2 too but
    # 0.5*5 = 2.5 -> 3 where round() gives 2
    assert percentile_index(50, 4) == 2
    assert percentile_index(50, 6) == 3
    assert percentile_index(99, 100) == 98
    assert percentile_index(90, 1) == 0


def test_summary_latency_statistics() -> None:
    latencies = np.array([5, 1, 4, 2, 3, 10, 6, 7, 8, 9], dtype=np.int64) * MS
    n = latencies.size
    start = np.zeros(n, dtype=np.int64)
    records = RecordBatch(
        start, latencies, np.full(n, 1000), np.full(n, 3000), np.zeros(n, bool), np.zeros(n, bool)
    )
    s = summarize_window(records, 0, 2_000 * MS, batch_size=4, percentile=95)
    assert s.request_count == 10
    assert s.throughput == 10 * 4 / 2.0
    assert s.avg_latency_ns == 5_500_000
    assert s.std_latency_ns == int(np.std(latencies, ddof=1))
    # sorted 1..10 ms: p50 index round(4.5)=5 -> 6 ms; p90 index round(8.1)=8 -> 9 ms
    assert s.percentiles_ns[50] == 6 * MS
    assert s.percentiles_ns[90] == 9 * MS
    assert s.percentiles_ns[99] == 10 * MS
    assert s.stabilizing_latency_ns == s.percentiles_ns[95] == 10 * MS
    assert (s.avg_send_ns, s.avg_recv_ns) == (1000, 3000)


def test_window_counts_requests_by_end_time_and_carries_later_ones() -> None:
    log = RequestLog()
    log.add(start=0, end=5, send=0, recv=0)  # ended before the window: dropped
    log.add(start=5, end=10, send=0, recv=0)  # on the start boundary: counted
    log.add(start=8, end=20, send=0, recv=0)  # started before, ends inside: counted
    log.add(start=15, end=30, send=0, recv=0)  # on the end boundary: counted
    log.add(start=25, end=31, send=0, recv=0)  # ends after: next window
    accountant = WindowAccountant()
    first = accountant.close_window(log, 10, 30)
    assert first.end.tolist() == [10, 20, 30]
    log.add(start=32, end=40, send=0, recv=0)
    second = accountant.close_window(log, 30, 50)
    assert second.end.tolist() == [31, 40]
    assert len(accountant.close_window(log, 50, 70)) == 0


def test_stability_needs_three_windows_within_the_percentage() -> None:
    a, b, c = _summary(1000, 10 * MS), _summary(1050, 10 * MS), _summary(1090, 10 * MS)
    assert not is_stable([a, b], 10)
    assert is_stable([a, b, c], 10)
    assert not is_stable([a, b, c], 5)  # 1090/1000 = 1.09 > 1.05
    slow = _summary(1000, 12 * MS)
    assert not is_stable([a, b, slow], 10)  # latency 12/10 = 1.2
    assert is_stable([a, b, slow], 10, check_latency=False)
    # only the last three count
    assert is_stable([_summary(10, MS), a, b, c], 10)


def test_zero_throughput_window_is_never_stable() -> None:
    records = RecordBatch.empty()
    empty = summarize_window(records, 0, 1000 * MS, batch_size=1)
    a = _summary(1000, 10 * MS)
    assert empty.throughput == 0
    assert not is_stable([a, a, empty], 100)


def test_latency_threshold_checks_the_last_three_windows() -> None:
    low, high = _summary(100, 2 * MS), _summary(100, 6 * MS)
    assert not exceeds_latency_threshold([low, low, low], 5)
    assert exceeds_latency_threshold([low, high, low], 5)
    assert not exceeds_latency_threshold([low, high], 5)  # fewer than three windows
    assert not exceeds_latency_threshold([high, high, high], 0)  # no threshold


def test_merge_uses_all_records_over_the_summed_durations() -> None:
    def batch(latencies_ms: list[int]) -> RecordBatch:
        n = len(latencies_ms)
        end = np.array(latencies_ms, dtype=np.int64) * MS
        return RecordBatch(
            np.zeros(n, np.int64),
            end,
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, bool),
            np.zeros(n, bool),
        )

    batches = [batch([1, 1]), batch([2, 2, 2, 2]), batch([3])]
    windows = [
        summarize_window(b, i * 1000 * MS, (i + 1) * 1000 * MS, batch_size=2)
        for i, b in enumerate(batches)
    ]
    merged = merge_windows(windows, batches, batch_size=2)
    assert merged.request_count == 7
    assert merged.throughput == 7 * 2 / 3.0
    assert merged.avg_latency_ns == (2 * 1 + 4 * 2 + 3) * MS // 7
    assert merged.start_ns == 0 and merged.end_ns == 3000 * MS
