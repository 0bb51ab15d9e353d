"""Linear and binary searches over load levels, alone and driving the profiler."""

from __future__ import annotations

import pytest

from repokit.perf.errors import PerfError
from repokit.perf.options import ConcurrencyRange, RateRange
from repokit.perf.search import BinarySearch, LinearSearch
from tests.perf.fakes import FakeTransport
from tests.perf.test_profiler import _options, _run


def _walk(search: LinearSearch | BinarySearch, limit: float) -> list[float]:
    """Levels measured when a level stays within the threshold iff it is <= limit."""
    seen: list[float] = []
    value = search.first()
    while value is not None:
        seen.append(value)
        value = search.after(value, value <= limit)
    return seen


def test_linear_search_stops_after_the_first_level_over_the_threshold() -> None:
    assert _walk(LinearSearch([1, 2, 3, 4, 5]), limit=2) == [1, 2, 3]
    assert _walk(LinearSearch([1, 2, 3]), limit=10) == [1, 2, 3]
    assert _walk(LinearSearch([]), limit=10) == []


def test_binary_search_as_perf_analyzer_bisects() -> None:
    # start within, end over, then midpoints (integer division) until within step
    assert _walk(BinarySearch(1, 64, 1, integer=True), limit=20) == [1, 64, 32, 16, 24, 20, 22, 21]
    assert _walk(BinarySearch(1, 64, 8, integer=True), limit=20) == [1, 64, 32, 16, 24]
    # start already over: stop; end within: stop
    assert _walk(BinarySearch(4, 64, 1, integer=True), limit=2) == [4]
    assert _walk(BinarySearch(1, 64, 1, integer=True), limit=100) == [1, 64]
    # request rates bisect in floats
    assert _walk(BinarySearch(100, 500, 50, integer=False), limit=260) == [100, 500, 300, 200, 250]


def test_binary_search_finds_the_highest_concurrency_within_the_threshold() -> None:
    transport = FakeTransport(latency=lambda now, inflight: inflight * 0.001)  # 1 ms per request
    options = _options(
        concurrency_range=ConcurrencyRange(1, 16, 1), latency_threshold_ms=5.5, binary_search=True
    )
    report = _run(options, transport)
    assert report.exit_code == 0
    assert [r.value for r in report.results] == [1, 4, 5, 6, 8, 16]  # level order
    assert report.warnings[-1] == (
        "binary search: concurrency 5 is the highest level within --latency-threshold 5.5 ms "
        "(6 levels measured)"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"concurrency_range": ConcurrencyRange(1, 8, 1)}, "needs -l/--latency-threshold"),
        (
            {"concurrency_range": ConcurrencyRange(1, 0, 1), "latency_threshold_ms": 5},
            "needs the range's start and end",
        ),
        ({"latency_threshold_ms": 5}, "needs the range's start and end"),
        (
            {"request_rate_range": RateRange(10, 0, 10), "latency_threshold_ms": 5},
            "needs the range's start and end",
        ),
    ],
)
def test_binary_search_option_errors(changes: dict[str, object], message: str) -> None:
    options = _options(binary_search=True, **changes)
    with pytest.raises(PerfError) as info:
        _run(options, FakeTransport(latency=lambda now, inflight: 0.001))
    assert info.value.exit_code == 3 and message in info.value.message


def _jumpy(now: float, inflight: int) -> float:
    """1 ms alone; with company 10 or 20 ms by turns: never stable, always over 5 ms."""
    return 0.001 if inflight <= 1 else 0.010 * (1 + int(now * 5) % 2)


def test_levels_over_the_threshold_need_not_be_stable() -> None:
    options = _options(
        concurrency_range=ConcurrencyRange(1, 4, 1), latency_threshold_ms=5, binary_search=True
    )
    report = _run(options, FakeTransport(latency=_jumpy))
    assert report.exit_code == 0, report.message
    assert [r.value for r in report.results] == [1, 2, 4]
    assert [r.stable for r in report.results] == [True, False, False]
    assert "concurrency 1 is the highest level within" in report.warnings[-1]
    linear = _run(
        _options(concurrency_range=ConcurrencyRange(1, 4, 1), latency_threshold_ms=5),
        FakeTransport(latency=_jumpy),
    )
    assert linear.exit_code == 0 and [r.value for r in linear.results] == [1, 2]
    assert "stopped at concurrency 2: latency reached --latency-threshold 5 ms" in linear.warnings
