"""The measurement loop on a virtual-time event loop with a fake transport."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from repokit.perf.errors import GENERIC_ERROR, STABILITY_ERROR, PerfError
from repokit.perf.options import ConcurrencyRange, PerfOptions, RateRange
from repokit.perf.profiler import run_perf
from repokit.perf.report import PerfReport
from tests.perf.fakes import FakeTransport, VirtualTimeLoop, run_virtual

MS = 1_000_000


def _run(options: PerfOptions, transport: FakeTransport, observer: Any = None) -> PerfReport:
    async def go() -> PerfReport:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        return await run_perf(
            options, observer, clock=loop.clock_ns, cpu_clock=lambda: 0.0, transport=transport
        )

    return run_virtual(go())


def _options(**kwargs: Any) -> PerfOptions:
    defaults: dict[str, Any] = {"model": "add_sub", "measurement_interval_ms": 100.0}
    defaults.update(kwargs)
    return PerfOptions(**defaults)


def test_constant_latency_is_stable_after_three_windows() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001)
    report = _run(_options(concurrency_range=ConcurrencyRange(2, 2, 1)), transport)
    assert report.exit_code == 0
    [result] = report.results
    assert result.stable and len(result.windows) == 3
    # 2 workers x 1 ms requests over 100 ms windows: 100 each, ends on the boundary count
    assert [w.request_count for w in result.windows] == [200, 200, 200]
    assert result.summary.throughput == pytest.approx(2000.0)
    assert result.summary.avg_latency_ns == 1 * MS
    assert result.summary.percentiles_ns[99] == 1 * MS
    assert (result.summary.avg_send_ns, result.summary.avg_recv_ns) == (1000, 2000)
    # server-side breakdown is the delta of the fake's cumulative statistics
    assert result.server is not None
    assert result.server.success_count == 600
    assert result.server.queue_ns == pytest.approx(0.25 * MS, rel=0.01)
    assert result.server.compute_infer_ns == pytest.approx(0.75 * MS, rel=0.01)


def test_batch_size_multiplies_throughput() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001)
    report = _run(_options(batch_size=4), transport)
    assert report.results[0].summary.throughput == pytest.approx(4000.0)


def test_fluctuating_latency_never_stabilizes_exit_2() -> None:
    def latency(now: float, inflight: int) -> float:
        return 0.001 if int(now * 10) % 2 == 0 else 0.004  # changes every 100 ms window

    transport = FakeTransport(latency=latency)
    report = _run(_options(max_trials=5, concurrency_range=ConcurrencyRange(1, 4, 1)), transport)
    assert report.exit_code == STABILITY_ERROR
    assert len(report.results) == 1  # the sweep stops at the unstable level
    assert not report.results[0].stable
    assert len(report.results[0].windows) == 5
    assert (
        "Failed to obtain stable measurement within 5 measurement windows for "
        "concurrency 1" in report.message
    )


def test_open_loop_accepts_stable_throughput_with_a_warning() -> None:
    def latency(now: float, inflight: int) -> float:
        return 0.001 if int(now * 10) % 2 == 0 else 0.003  # latency changes every window

    transport = FakeTransport(latency=latency)
    options = _options(request_rate_range=RateRange(500, 500, 1), max_trials=4)
    report = _run(options, transport)
    result = report.results[0]
    assert result.stable and report.exit_code == 0
    assert result.warnings[0] == (
        "Request latency is not stabilizing. Please try lowering the request rate."
    )
    assert len(result.windows) == 4
    # the same latencies in closed loop (concurrency) are a stability failure
    report = _run(_options(max_trials=4), FakeTransport(latency=latency))
    assert report.exit_code == STABILITY_ERROR


def test_latency_threshold_ends_an_open_ended_sweep() -> None:
    transport = FakeTransport(latency=lambda now, inflight: inflight * 0.001)
    options = _options(concurrency_range=ConcurrencyRange(1, 0, 1), latency_threshold_ms=2.5)
    report = _run(options, transport)
    assert [r.value for r in report.results] == [1, 2, 3]
    assert report.results[-1].summary.avg_latency_ns == pytest.approx(3 * MS, rel=0.02)
    assert any("latency-threshold" in w for w in report.warnings)


def test_count_windows_wait_for_the_request_count() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.010)
    options = _options(
        measurement_mode="count_windows", measurement_request_count=250, count_window_poll_s=1.0
    )
    report = _run(options, transport)
    result = report.results[0]
    # 100 requests/s: polled each second, a window closes after 3 s (300 >= 250)
    assert [w.request_count for w in result.windows] == [300, 300, 300]
    assert result.summary.throughput == pytest.approx(100.0)


def test_request_rate_constant_and_delayed_requests() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001)
    options = _options(request_rate_range=RateRange(500, 1000, 500))
    report = _run(options, transport)
    assert [r.value for r in report.results] == [500, 1000]
    assert report.results[0].summary.throughput == pytest.approx(500, rel=0.02)
    assert report.results[1].summary.throughput == pytest.approx(1000, rel=0.02)
    assert report.results[1].summary.delayed_count == 0
    # one connection, 5 ms answers, 1000 req/s: requests wait for the connection
    slow = FakeTransport(latency=lambda now, inflight: 0.005)
    report = _run(
        _options(request_rate_range=RateRange(1000, 1000, 1), max_threads=1, max_trials=3), slow
    )
    result = report.results[0]
    assert result.summary.delayed_count > 0
    assert any("unable to keep up" in w for w in result.warnings)


def test_poisson_rate_averages_the_rate() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.0005)
    options = _options(
        request_rate_range=RateRange(2000, 2000, 1),
        request_distribution="poisson",
        measurement_interval_ms=500,
        stability_percentage=25,
    )
    report = _run(options, transport)
    assert report.results[0].summary.throughput == pytest.approx(2000, rel=0.1)


def test_request_intervals_file(tmp_path: Any) -> None:
    intervals = tmp_path / "intervals.txt"
    intervals.write_text("1000\n3000\n")  # average 2 ms -> 500 req/s
    transport = FakeTransport(latency=lambda now, inflight: 0.0005)
    report = _run(_options(request_intervals=intervals), transport)
    assert report.mode == "request_intervals"
    assert report.results[0].value == pytest.approx(500)
    assert report.results[0].summary.throughput == pytest.approx(500, rel=0.03)


def test_bad_request_intervals_file_is_an_option_error(tmp_path: Any) -> None:
    intervals = tmp_path / "intervals.txt"
    intervals.write_text("1000\nsoon\n")
    with pytest.raises(PerfError) as info:
        _run(_options(request_intervals=intervals), FakeTransport(lambda n, i: 0.001))
    assert info.value.exit_code == 3
    assert "intervals.txt:2" in info.value.message and "'soon'" in info.value.message


def test_failed_request_stops_with_exit_99_and_the_server_message() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001, fail_after=50)
    with pytest.raises(PerfError) as info:
        _run(_options(), transport)
    assert info.value.exit_code == GENERIC_ERROR
    assert "injected failure" in info.value.message
    assert "concurrency 1" in info.value.message


def test_warmup_requests_are_sent_but_not_measured() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001)
    report = _run(_options(warmup_request_count=37), transport)
    result = report.results[0]
    measured = sum(w.request_count for w in result.windows)
    assert len(transport.sent) >= 37 + measured
    assert transport.sent[36][0] < result.windows[0].start_ns


def test_sequence_requests_carry_start_end_and_ids() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001)
    transport.config = {"name": "add_sub", "max_batch_size": 8, "sequence_batching": {}}
    options = _options(
        concurrency_range=ConcurrencyRange(2, 2, 1),
        sequence_length=5,
        sequence_length_variation=0,
        sequence_id_range=(100, 103),
    )
    report = _run(options, transport)
    assert report.exit_code == 0
    flags = [f for _, f in transport.sent if f is not None]
    assert len(flags) == len(transport.sent)
    by_id: dict[int, list[Any]] = {}
    for f in flags:
        assert 100 <= f.sequence_id <= 103
        by_id.setdefault(f.sequence_id, []).append(f)
    for steps in by_id.values():
        # each sequence is START, 3 middles, END (ids wrap around within the range); the
        # sequences open when the load stops are ended early with an END request
        assert steps[0].start and steps[-1].end
        starts = [i for i, f in enumerate(steps) if f.start]
        ends = [i for i, f in enumerate(steps) if f.end]
        assert len(starts) == len(ends)
        lengths = [e - s + 1 for s, e in zip(starts, ends, strict=True)]
        assert all(n == 5 for n in lengths[:-1]) and 1 <= lengths[-1] <= 5
    assert report.results[0].summary.sequence_count > 0


def test_observer_sees_progress_and_windows() -> None:
    events: list[str] = []

    class Recorder:
        def level_started(self, label: str) -> None:
            events.append(f"start {label}")

        def window_progress(self, progress: Any) -> None:
            events.append("tick")

        def window_done(self, progress: Any, summary: Any) -> None:
            events.append(f"window {progress.trial}")

        def level_done(self, result: Any) -> None:
            events.append("done")

    _run(_options(measurement_interval_ms=1000), FakeTransport(lambda n, i: 0.001), Recorder())
    assert events[0] == "start concurrency 1"
    assert events[-1] == "done"
    assert [e for e in events if e.startswith("window")] == ["window 1", "window 2", "window 3"]
    assert events.count("tick") >= 3 * 4  # 0.25 s ticks over 1 s windows


def _run_with_cpu(transport: FakeTransport, busy_fraction: float) -> PerfReport:
    """The client process is busy ``busy_fraction`` of the (virtual) wall time."""

    async def go() -> PerfReport:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        return await run_perf(
            _options(),
            clock=loop.clock_ns,
            cpu_clock=lambda: loop.time() * busy_fraction,
            transport=transport,
        )

    return run_virtual(go())


def test_client_overhead_warnings_from_cpu_time() -> None:
    # 1 ms requests at concurrency 1: 1000 requests/s
    quiet = _run_with_cpu(FakeTransport(latency=lambda now, inflight: 0.001), 0.1)
    assert quiet.results[0].summary.client_cpu == pytest.approx(0.1)
    assert quiet.results[0].warnings == []  # 100 us of CPU per 1 ms request
    heavy = _run_with_cpu(FakeTransport(latency=lambda now, inflight: 0.001), 0.5)
    [warning] = heavy.results[0].warnings
    assert warning.startswith("the client spent 500 us of CPU per request, 50% of the average")
    assert "client overhead is high" in warning
    saturated = _run_with_cpu(FakeTransport(latency=lambda now, inflight: 0.001), 0.95)
    assert saturated.results[0].warnings[0].startswith("client CPU was busy 95% of the time")
    assert len(saturated.results[0].warnings) == 2
