"""Several -u endpoints: how a level's load is split, and the profiler's per-endpoint and merged
figures on a virtual-time loop with one fake server per endpoint."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from repokit.perf.errors import OPTION_ERROR, PerfError
from repokit.perf.export import csv_text, endpoint_report, write_csv
from repokit.perf.options import ConcurrencyRange, PerfOptions, RateRange, validate_options
from repokit.perf.profiler import run_perf
from repokit.perf.report import PerfReport
from repokit.perf.split import deal_intervals, split_concurrency, split_connections
from tests.perf.fakes import FakeTransport, VirtualTimeLoop, run_virtual

MS = 1_000_000
URLS = "a:8000,b:8000"


def test_concurrency_is_split_evenly_the_first_endpoints_taking_the_rest() -> None:
    assert split_concurrency(8, 2) == [4, 4]
    assert split_concurrency(5, 2) == [3, 2]
    assert split_concurrency(1, 3) == [1, 0, 0]
    assert split_connections(1, 3) == [1, 1, 1]  # every endpoint keeps a connection
    assert split_connections(16, 3) == [6, 5, 5]


def test_dealt_intervals_replay_the_whole_schedule_round_robin() -> None:
    gaps = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
    streams = deal_intervals(iter(gaps * 10), 3)
    # consumers pull at different paces; each still gets every third send time
    times: list[list[int]] = [[], [], []]
    for owner in (0, 0, 0, 2, 1, 2, 0, 1, 1, 2, 2, 1):
        last = times[owner][-1] if times[owner] else 0
        times[owner].append(last + next(streams[owner]))
    sends = list(itertools.accumulate(gaps))
    for owner in range(3):
        assert times[owner] == sends[owner::3][: len(times[owner])]
    assert sorted(t for each in times for t in each) == sends


def test_one_endpoint_keeps_its_schedule_untouched() -> None:
    source = iter([1, 2, 3])
    assert deal_intervals(source, 1) == [source]


def _run(options: PerfOptions, transports: list[FakeTransport]) -> PerfReport:
    async def go() -> PerfReport:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        return await run_perf(
            options,
            clock=loop.clock_ns,
            cpu_clock=lambda: 0.0,
            transports=list(transports),  # type: ignore[arg-type]
        )

    return run_virtual(go())


def _options(**kwargs: Any) -> PerfOptions:
    values: dict[str, Any] = {"model": "add_sub", "url": URLS, "measurement_interval_ms": 100.0}
    values.update(kwargs)
    return PerfOptions(**values)


def test_concurrency_split_reports_each_endpoint_and_the_merge() -> None:
    fast = FakeTransport(latency=lambda now, inflight: 0.001)
    slow = FakeTransport(latency=lambda now, inflight: 0.004)
    report = _run(_options(concurrency_range=ConcurrencyRange(4, 4, 1)), [fast, slow])
    assert report.exit_code == 0 and report.url == URLS
    [result] = report.results
    a, b = result.endpoints
    assert (a.url, b.url) == ("a:8000", "b:8000")
    # 2 workers on each: 2 x 1 ms and 2 x 4 ms requests per 100 ms window
    assert a.summary.throughput == pytest.approx(2000.0)
    assert b.summary.throughput == pytest.approx(500.0)
    assert result.summary.throughput == pytest.approx(2500.0)
    assert a.summary.percentiles_ns[99] == 1 * MS and b.summary.percentiles_ns[99] == 4 * MS
    assert result.summary.percentiles_ns[50] == 1 * MS  # 4 of 5 requests are the fast ones
    assert result.summary.percentiles_ns[99] == 4 * MS
    assert result.summary.request_count == a.summary.request_count + b.summary.request_count
    # the breakdown of each endpoint is its own statistics' delta; the merge is their sum
    assert a.server is not None and b.server is not None and result.server is not None
    assert a.server.compute_infer_ns == pytest.approx(0.75 * MS, rel=0.01)
    assert b.server.compute_infer_ns == pytest.approx(3.0 * MS, rel=0.01)
    assert result.server.success_count == a.server.success_count + b.server.success_count
    total_infer = (
        a.server.compute_infer_ns * a.server.success_count
        + b.server.compute_infer_ns * b.server.success_count
    )
    assert result.server.compute_infer_ns == pytest.approx(
        total_infer / result.server.success_count, rel=0.01
    )
    assert fast.connections == 2 and slow.connections == 2
    # the JSON form keeps each endpoint's figures
    again = PerfReport.from_dict(report.to_dict())
    assert [e.url for e in again.results[0].endpoints] == ["a:8000", "b:8000"]
    assert again.results[0].endpoints[1].summary == b.summary


def test_a_level_below_the_endpoint_count_warns_of_the_idle_endpoint() -> None:
    first = FakeTransport(latency=lambda now, inflight: 0.001)
    second = FakeTransport(latency=lambda now, inflight: 0.001)
    report = _run(_options(concurrency_range=ConcurrencyRange(1, 1, 1)), [first, second])
    [result] = report.results
    assert result.endpoints[1].summary.request_count == 0 and not second.sent
    assert any("kept b:8000 idle" in w for w in result.warnings)


def test_request_rate_is_dealt_round_robin_over_the_endpoints() -> None:
    first = FakeTransport(latency=lambda now, inflight: 0.001)
    second = FakeTransport(latency=lambda now, inflight: 0.001)
    report = _run(_options(request_rate_range=RateRange(1000, 1000, 1)), [first, second])
    [result] = report.results
    assert result.summary.throughput == pytest.approx(1000.0, rel=0.02)
    for endpoint in result.endpoints:
        assert endpoint.summary.throughput == pytest.approx(500.0, rel=0.02)
    # the service as a whole sees one send every 1 ms, alternating between the endpoints
    sends = sorted([(t, 0) for t, _ in first.sent] + [(t, 1) for t, _ in second.sent])
    gaps = {later[0] - earlier[0] for earlier, later in itertools.pairwise(sends[:200])}
    assert gaps == {1 * MS}
    assert all(a[1] != b[1] for a, b in itertools.pairwise(sends[:200]))


def test_sequence_ids_are_one_series_over_the_endpoints() -> None:
    """A correlation ID is never live on two endpoints at once (two names of one server would
    otherwise mix two sequences in one slot), and each sequence stays on one endpoint."""
    transports = [FakeTransport(latency=lambda now, inflight: 0.001) for _ in range(2)]
    for transport in transports:
        transport.config = {"name": "add_sub", "max_batch_size": 8, "sequence_batching": {}}
    options = _options(
        concurrency_range=ConcurrencyRange(4, 4, 1), sequence_length=5,
        sequence_length_variation=0, sequence_id_range=(1, None),
    )  # fmt: skip
    assert _run(options, transports).exit_code == 0
    starts = [{f.sequence_id for _, f in t.sent if f is not None and f.start} for t in transports]
    assert starts[0] and starts[1] and not starts[0] & starts[1]
    for transport, started in zip(transports, starts, strict=True):
        ids = {f.sequence_id for _, f in transport.sent if f is not None}
        assert ids == started  # every request of a sequence went where its START went


def test_csv_writes_the_merge_and_one_file_per_endpoint(tmp_path: Path) -> None:
    fast = FakeTransport(latency=lambda now, inflight: 0.001)
    slow = FakeTransport(latency=lambda now, inflight: 0.004)
    report = _run(_options(concurrency_range=ConcurrencyRange(2, 4, 2)), [fast, slow])
    written = write_csv(report, tmp_path / "r.csv")
    assert [p.name for p in written] == ["r.csv", "a_8000.r.csv", "b_8000.r.csv"]
    assert written[0].read_text() == csv_text(report)
    b_rows = written[2].read_text().splitlines()
    assert b_rows[0].startswith("Concurrency,Inferences/Second,")
    assert [row.split(",")[1] for row in b_rows[1:]] == ["250", "500"]
    assert endpoint_report(report, 1).url == "b:8000"


def test_a_failing_endpoint_is_named() -> None:
    good = FakeTransport(latency=lambda now, inflight: 0.001)
    bad = FakeTransport(latency=lambda now, inflight: 0.001, config=None)
    bad.metadata = {"error": "Request for unknown model: 'add_sub' is not found"}
    with pytest.raises(PerfError) as caught:
        _run(_options(), [good, bad])
    assert caught.value.message.startswith("b:8000: ")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"url": "a:1,,b:2"}, "-u has an empty endpoint in 'a:1,,b:2'"),
        ({"url": "a:1,b:2,a:1"}, "-u names a:1 more than once"),
        ({"shared_memory": "system"}, "--shared-memory system registers regions on one server"),
        ({"collect_metrics": True}, "--collect-metrics scrapes one server's metrics"),
    ],
)
def test_endpoint_option_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(PerfError) as caught:
        validate_options(_options(**changes))
    assert caught.value.exit_code == OPTION_ERROR
    assert message in caught.value.message
