"""The measurement loop: warm up, then for each load level measure windows until stable.

:func:`run_perf` is the plain entry point (``repokit perf`` calls it and renders the result).
The clock (ns), the CPU clock and the transport are injectable, so tests drive the whole loop
with a fake transport on a virtual-time event loop. Per level: start the load, then repeat
windows (time: ``--measurement-interval``; count: until ``--measurement-request-count`` requests
ended, polled every second as perf_analyzer does) up to ``--max-trials``, until the last three
are stable (:func:`repokit.perf.statistics.is_stable`) or, with ``--latency-threshold``, one of
them reaches it. Windows are back to back; a request counts in the window in which it ends.
The stable windows are merged; server statistics are the delta over the merged windows.
Observers see each window's progress (live view); exit code 2 when a level never stabilizes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from repokit.perf.errors import GENERIC_ERROR, STABILITY_ERROR, PerfError
from repokit.perf.load import (
    ConcurrencyLoad,
    ScheduleLoad,
    ThreadedConcurrencyLoad,
    constant_intervals,
    file_intervals,
    poisson_intervals,
    supports_threads,
)
from repokit.perf.metrics import MetricsScraper
from repokit.perf.options import PerfOptions, validate_options
from repokit.perf.report import EndpointResult, LevelResult, PerfReport
from repokit.perf.search import BinarySearch, LinearSearch
from repokit.perf.server_stats import ServerCounters, parse_statistics, window_breakdown
from repokit.perf.setup import Session, prepare_session
from repokit.perf.split import deal_intervals, split_concurrency, split_connections
from repokit.perf.statistics import (
    STABILITY_WINDOW,
    RecordBatch,
    RequestLog,
    WindowAccountant,
    WindowSummary,
    exceeds_latency_threshold,
    is_stable,
    merge_windows,
    summarize_window,
)
from repokit.perf.transports import create_transport
from repokit.perf.transports.base import Transport, TransportOptions

TICK_S = 0.25
CPU_WARN_FRACTION = 0.9  # client process busy >= 90% of one core
OVERHEAD_WARN_FRACTION = 0.3  # client CPU per request / average latency
DELAY_WARN_FRACTION = 0.01  # perf_analyzer's DELAY_PCT_THRESHOLD


@dataclass
class WindowProgress:
    level_label: str
    trial: int
    max_trials: int
    elapsed_s: float
    target: str  # "5.0 s" or "50 requests"
    completed: int
    throughput: float
    windows: list[WindowSummary] = field(default_factory=list)


class Observer(Protocol):
    def level_started(self, label: str) -> None: ...

    def window_progress(self, progress: WindowProgress) -> None: ...

    def window_done(self, progress: WindowProgress, summary: WindowSummary) -> None: ...

    def level_done(self, result: LevelResult) -> None: ...


class NullObserver:
    def level_started(self, label: str) -> None:
        pass

    def window_progress(self, progress: WindowProgress) -> None:
        pass

    def window_done(self, progress: WindowProgress, summary: WindowSummary) -> None:
        pass

    def level_done(self, result: LevelResult) -> None:
        pass


def read_intervals(options: PerfOptions) -> list[int]:
    from repokit.perf.errors import option_error

    assert options.request_intervals is not None
    values: list[int] = []
    for number, line in enumerate(options.request_intervals.read_text().splitlines(), 1):
        text = line.strip()
        if not text:
            continue
        try:
            value = int(text)
        except ValueError:
            raise option_error(
                f"{options.request_intervals}:{number}: expected an interval in microseconds, "
                f"got '{text}'"
            ) from None
        if value < 0:
            raise option_error(f"{options.request_intervals}:{number}: negative interval {value}")
        values.append(value)
    if not values or sum(values) == 0:
        raise option_error(f"{options.request_intervals}: no positive intervals")
    return values


@dataclass
class Endpoint:
    """One endpoint of the run: its URL, its transport and the session prepared on it."""

    url: str
    transport: Transport
    session: Session


@dataclass
class _EndpointRun:
    """One endpoint while a level runs: its requests, load driver, windows and statistics."""

    endpoint: Endpoint
    log: RequestLog
    load: Any
    accountant: WindowAccountant = field(default_factory=WindowAccountant)
    windows: list[WindowSummary] = field(default_factory=list)
    batches: list[RecordBatch] = field(default_factory=list)
    snapshots: list[dict[str, ServerCounters]] = field(default_factory=list)
    sent_start: int = 0


class _Loads:
    """The load drivers of all endpoints seen as one: one failure event, the first failure."""

    def __init__(self, loads: list[Any]) -> None:
        self.loads = loads
        self.failed = asyncio.Event()
        for load in loads:
            load.failed = self.failed

    @property
    def failure(self) -> str | None:
        return next((load.failure for load in self.loads if load.failure is not None), None)


def _sum_snapshots(snapshots: list[dict[str, ServerCounters]]) -> dict[str, ServerCounters]:
    total: dict[str, ServerCounters] = {}
    for snapshot in snapshots:
        for name, counters in snapshot.items():
            total[name] = total[name] + counters if name in total else counters
    return total


class Profiler:
    def __init__(
        self,
        options: PerfOptions,
        endpoints: list[Endpoint],
        observer: Observer,
        clock: Callable[[], int],
        cpu_clock: Callable[[], float],
    ) -> None:
        self.o = options
        self.endpoints = endpoints
        self.session = endpoints[0].session  # model facts: the same on every endpoint
        self.include_server_stats = all(
            endpoint.session.include_server_stats for endpoint in endpoints
        )
        self.observer = observer
        self.clock = clock
        self.cpu_clock = cpu_clock

    async def _server_snapshot(self, endpoint: Endpoint) -> dict[str, ServerCounters]:
        if not self.include_server_stats:
            return {}
        model = None if self.session.composing_models else self.o.model
        return parse_statistics(await endpoint.transport.model_statistics(model, self.o.version))

    def _new_load(self, endpoint: Endpoint, schedule: bool, log: RequestLog) -> Any:
        cls: type[Any] = ConcurrencyLoad
        if schedule:
            cls = ScheduleLoad
        elif not self.o.async_mode and supports_threads(endpoint.transport):
            cls = ThreadedConcurrencyLoad
        return cls(
            endpoint.transport,
            endpoint.session.workload,
            log,
            self.clock,
            endpoint.session.sequences,
        )

    async def warmup(self) -> None:
        count = self.o.warmup_request_count
        if count <= 0:
            return
        concurrency = self.o.effective_concurrency().start if self.o.mode == "concurrency" else 1
        loads: list[ConcurrencyLoad] = []
        for endpoint, share in zip(
            self.endpoints, split_concurrency(count, len(self.endpoints)), strict=True
        ):
            if share == 0:
                continue
            session = endpoint.session
            load = ConcurrencyLoad(
                endpoint.transport, session.workload, RequestLog(), self.clock, session.sequences
            )
            await load.start(max(min(concurrency, share), 1), request_limit=share, record=False)
            loads.append(load)
        for load in loads:
            await load.wait_done()
            await load.stop()
            if load.failure is not None:
                raise PerfError(f"a warmup request failed: {load.failure}", GENERIC_ERROR)

    async def _wait_window(
        self,
        loads: _Loads,
        completed: Callable[[], int],
        start: int,
        progress: WindowProgress,
    ) -> None:
        o = self.o
        count_mode = o.measurement_mode == "count_windows"
        interval_ns = int(o.measurement_interval_ms * 1e6)
        poll_s = o.count_window_poll_s if count_mode else TICK_S
        while True:
            now = self.clock()
            if count_mode:
                if now > start and completed() >= o.measurement_request_count:
                    return
                step = poll_s
            else:
                remaining = (start + interval_ns - now) / 1e9
                if remaining <= 0:
                    return
                step = min(poll_s, remaining)
            waiter = asyncio.ensure_future(loads.failed.wait())
            done, _ = await asyncio.wait({waiter}, timeout=step)
            if not done:
                waiter.cancel()
            if loads.failure is not None:
                return
            elapsed = (self.clock() - start) / 1e9
            progress.elapsed_s = elapsed
            progress.completed = completed()
            progress.throughput = progress.completed * o.batch_size / elapsed if elapsed else 0.0
            self.observer.window_progress(progress)

    async def _start_loads(
        self, runs: list[_EndpointRun], value: float, intervals: Iterator[int] | None
    ) -> None:
        """The level's load, split over the endpoints (see :mod:`repokit.perf.split`); with
        ``--request-count`` each endpoint sends its share of exactly that many requests."""
        parts = len(runs)
        count = self.o.request_count
        limits: list[int | None] = (
            list(split_concurrency(count, parts)) if count else [None] * parts
        )
        if intervals is None:
            for run, share, limit in zip(
                runs, split_concurrency(int(value), parts), limits, strict=True
            ):
                await run.load.start(share, limit)
            return
        streams = deal_intervals(intervals, parts)
        # a sequence model keeps --num-of-sequences sequences going (one connection each, one
        # request at a time), as perf_analyzer's request-rate modes do; more would hold more
        # of the server's sequence slots than it may have (a backlogged sequence then idles
        # past max_sequence_idle_microseconds and its next request lacks START)
        sequences = self.session.sequences is not None
        connections = split_connections(
            self.o.num_of_sequences if sequences else self.o.max_threads, parts
        )
        for run, stream, connection_limit, limit in zip(
            runs, streams, connections, limits, strict=True
        ):
            await run.load.start(stream, connection_limit, limit)

    def _close_window(
        self, run: _EndpointRun, start: int, end: int, client_cpu: float
    ) -> tuple[RecordBatch, WindowSummary]:
        o = self.o
        records = run.accountant.close_window(run.log, start, end)
        summary = summarize_window(
            records,
            start,
            end,
            batch_size=o.batch_size,
            percentile=o.percentile,
            sent_count=run.log.sent - run.sent_start,
            client_cpu=client_cpu,
        )
        run.sent_start = run.log.sent
        run.windows.append(summary)
        run.batches.append(records)
        return records, summary

    async def measure_level(
        self,
        mode: str,
        value: float,
        intervals: Iterator[int] | None,
    ) -> LevelResult:
        o = self.o
        label = f"concurrency {int(value)}" if mode == "concurrency" else f"request rate {value:g}"
        self.observer.level_started(label)
        runs: list[_EndpointRun] = []
        for endpoint in self.endpoints:
            log = RequestLog()
            runs.append(
                _EndpointRun(endpoint, log, self._new_load(endpoint, intervals is not None, log))
            )
        loads = _Loads([run.load for run in runs])
        scraper = None
        if o.collect_metrics:
            scraper = MetricsScraper(
                o.metrics_url or _default_metrics_url(o), o.metrics_interval_ms, self.clock
            )
            await scraper.start()
        await self._start_loads(runs, value, intervals)
        windows: list[WindowSummary] = []
        batches: list[RecordBatch] = []
        for run in runs:
            run.snapshots.append(await self._server_snapshot(run.endpoint))
        boundaries: list[int] = []
        start = self.clock()
        boundaries.append(start)
        cpu_start = self.cpu_clock()
        for run in runs:
            run.sent_start = run.log.sent
        stable = False
        count_target = f"{o.measurement_request_count} requests"
        target = (
            count_target
            if o.measurement_mode == "count_windows"
            else f"{o.measurement_interval_ms / 1000:g} s"
        )

        def completed() -> int:
            return sum(len(run.log) for run in runs)

        try:
            for trial in range(1, o.max_trials + 1):
                progress = WindowProgress(label, trial, o.max_trials, 0.0, target, 0, 0.0, windows)
                await self._wait_window(loads, completed, start, progress)
                if loads.failure is not None:
                    break
                end = self.clock()
                cpu_end = self.cpu_clock()
                client_cpu = (cpu_end - cpu_start) / max((end - start) / 1e9, 1e-9)
                parts = [self._close_window(run, start, end, client_cpu) for run in runs]
                if len(parts) == 1:
                    records, summary = parts[0]
                else:
                    records = RecordBatch.concat([p[0] for p in parts])
                    summary = summarize_window(
                        records,
                        start,
                        end,
                        batch_size=o.batch_size,
                        percentile=o.percentile,
                        sent_count=sum(p[1].sent_count for p in parts),
                        client_cpu=client_cpu,
                    )
                for run in runs:
                    run.snapshots.append(await self._server_snapshot(run.endpoint))
                windows.append(summary)
                batches.append(records)
                boundaries.append(end)
                self.observer.window_done(progress, summary)
                start, cpu_start = end, cpu_end
                # --request-count: its one count window is the measurement, as in perf_analyzer
                stable = bool(o.request_count) or is_stable(windows, o.stability_percentage)
                if stable or exceeds_latency_threshold(windows, o.latency_threshold_ms):
                    break
        finally:
            for run in runs:
                await run.load.stop()
            if scraper is not None:
                await scraper.stop()
        if loads.failure is not None:
            raise PerfError(
                f"Failed to maintain requested inference load at {label}: {loads.failure}",
                GENERIC_ERROR,
            )
        warnings: list[str] = []
        if (
            not stable
            and (o.async_mode or mode != "concurrency")
            and is_stable(windows, o.stability_percentage, check_latency=False)
        ):
            warnings.append(
                "Request latency is not stabilizing. Please try lowering the request rate."
            )
            stable = True
        used = min(STABILITY_WINDOW, len(windows))
        merged = merge_windows(
            windows[-used:], batches[-used:], batch_size=o.batch_size, percentile=o.percentile
        )
        server = None
        composing = self.session.composing_models
        if self.include_server_stats:
            server = window_breakdown(
                _sum_snapshots([run.snapshots[-used - 1] for run in runs]),
                _sum_snapshots([run.snapshots[-1] for run in runs]),
                o.model,
                composing,
                self.session.bls_models,
            )
        per_endpoint = []
        if len(runs) > 1:
            for run in runs:
                endpoint_server = None
                if self.include_server_stats:
                    endpoint_server = window_breakdown(
                        run.snapshots[-used - 1],
                        run.snapshots[-1],
                        o.model,
                        composing,
                        self.session.bls_models,
                    )
                per_endpoint.append(
                    EndpointResult(
                        run.endpoint.url,
                        merge_windows(
                            run.windows[-used:],
                            run.batches[-used:],
                            batch_size=o.batch_size,
                            percentile=o.percentile,
                        ),
                        endpoint_server,
                    )
                )
            idle = [run.endpoint.url for run in runs if not any(run.batches[-used:])]
            if idle:
                warnings.append(
                    f"{label} kept {', '.join(idle)} idle: a level below the number of "
                    "endpoints leaves some without load"
                )
        metrics = scraper.summary(boundaries[-used - 1], boundaries[-1]) if scraper else {}
        if scraper is not None and scraper.error:
            warnings.append(f"metrics scraping failed: {scraper.error}")
        warnings.extend(self._overhead_warnings(merged, mode))
        result = LevelResult(
            mode=mode,
            value=value,
            stable=stable,
            summary=merged,
            windows=windows,
            server=server,
            metrics=metrics,
            warnings=warnings,
            records=RecordBatch.concat(batches[-used:]) if o.profile_export_file else None,
            window_boundaries=boundaries[-used - 1 :],
            endpoints=per_endpoint,
        )
        self.observer.level_done(result)
        return result

    def _overhead_warnings(self, merged: WindowSummary, mode: str) -> list[str]:
        out: list[str] = []
        if merged.client_cpu >= CPU_WARN_FRACTION:
            out.append(
                f"client CPU was busy {merged.client_cpu:.0%} of the time: the client may be "
                "the bottleneck; numbers may understate the server"
            )
        requests_per_s = merged.request_count / merged.duration_s if merged.duration_ns else 0.0
        if merged.avg_latency_ns > 0 and requests_per_s > 0:
            # the client's CPU time per request against the request's latency; send/recv times
            # are no guide on loopback (a send wakes the server, which may preempt the client)
            cpu_ns = merged.client_cpu / requests_per_s * 1e9
            share = cpu_ns / merged.avg_latency_ns
            if share >= OVERHEAD_WARN_FRACTION:
                out.append(
                    f"the client spent {cpu_ns / 1000:.0f} us of CPU per request, {share:.0%} "
                    "of the average latency: client overhead is high; numbers may understate "
                    "the server"
                )
        if mode != "concurrency" and merged.request_count:
            delayed = merged.delayed_count / merged.request_count
            if delayed > DELAY_WARN_FRACTION:
                out.append(
                    f"{delayed:.1%} of the requests were delayed: the client is unable to keep "
                    "up with the desired load; the results may not be accurate"
                )
        return out


def _default_metrics_url(o: PerfOptions) -> str:
    from repokit.perf.transports.http import split_url

    host, _ = split_url(o.server_url, 8000)
    return f"{host}:8002/metrics"


def _rate_intervals(rate: float, poisson: bool, seed: int) -> Iterator[int]:
    return poisson_intervals(rate, seed) if poisson else constant_intervals(rate)


Level = tuple[str, float, "Callable[[], Iterator[int]] | None"]


def _level(o: PerfOptions, value: float) -> Level:
    """(mode, value, interval source) of one level of the sweep."""
    if o.mode == "request_rate":
        poisson = o.request_distribution == "poisson"
        return ("request_rate", value, functools.partial(_rate_intervals, value, poisson, o.seed))
    return ("concurrency", value, None)


def _search(o: PerfOptions) -> LinearSearch | BinarySearch:
    if o.binary_search:
        if o.request_rate_range is not None:
            r = o.request_rate_range
            return BinarySearch(r.start, r.end, r.step, integer=False)
        c = o.effective_concurrency()
        return BinarySearch(c.start, c.end, c.step, integer=True)
    if o.mode == "request_rate":
        assert o.request_rate_range is not None
        return LinearSearch(o.request_rate_range.levels())
    return LinearSearch([float(c) for c in o.effective_concurrency().levels()])


async def run_perf(
    options: PerfOptions,
    observer: Observer | None = None,
    *,
    clock: Callable[[], int] = time.monotonic_ns,
    cpu_clock: Callable[[], float] = time.process_time,
    transport: Transport | None = None,
    transports: list[Transport] | None = None,
) -> PerfReport:
    """Run the whole measurement; raises PerfError for option (3) and generic (99) errors.

    ``transport`` (one endpoint) or ``transports`` (one per ``-u`` endpoint) replace the ones
    built from the options (tests inject fakes)."""
    validate_options(options)
    if options.plot_file is not None:  # a missing matplotlib fails before measuring
        from repokit.perf.plot import check_plot_available

        check_plot_available(options.plot_file)
    intervals_level: Level | None = None
    if options.mode == "request_intervals":
        values = read_intervals(options)
        rate = 1e6 * len(values) / sum(values)
        intervals_level = ("request_intervals", rate, lambda: file_intervals(values))
    urls = options.server_urls
    owned = transport is None and transports is None
    if transports is None:
        transports = (
            [transport]
            if transport is not None
            else [
                create_transport(
                    TransportOptions(
                        options.protocol,
                        url,
                        dict(options.headers),
                        options.input_tensor_format,
                        options.output_tensor_format,
                        options.streaming,
                        options.tls,
                        endpoint=options.endpoint,
                        request_parameters=dict(options.request_parameters),
                        compression=options.grpc_compression,
                    ),
                    clock,
                )
                for url in urls
            ]
        )
    if len(transports) != len(urls):
        raise ValueError(f"{len(transports)} transports for {len(urls)} endpoints")
    sessions: list[Session] = []
    report = PerfReport(
        options.model,
        options.version,
        options.protocol,
        ",".join(urls),
        options.mode,
        options.batch_size,
        options.percentile,
    )
    opened: list[Transport] = []
    try:
        for url, each in zip(urls, transports, strict=True):
            await each.open()
            opened.append(each)
            wire_problem = getattr(each, "wire_problem", None)
            if wire_problem and not options.async_mode and options.mode == "concurrency":
                server = url if len(urls) > 1 else "this server"
                report.warnings.append(
                    f"gRPC: the built-in HTTP/2 client cannot talk to {server} "
                    f"({wire_problem}); using the grpc library, which costs more client CPU per "
                    "request"
                )
            if options.trace_settings:
                await each.update_trace_settings(options.trace_settings)
            sessions.append(await _prepare_endpoint(options, each, url, len(urls) > 1))
        session = sessions[0]
        for other in sessions[1:]:  # one correlation-ID series for the whole service
            other.sequences = session.sequences
        report.version = session.info.version
        report.include_server_stats = all(s.include_server_stats for s in sessions)
        report.decoupled = session.info.decoupled
        report.response_cache = session.info.response_cache
        report.composing_models = session.composing_models
        report.collect_metrics = options.collect_metrics
        endpoints = [
            Endpoint(*endpoint) for endpoint in zip(urls, transports, sessions, strict=True)
        ]
        if options.mode == "periodic_concurrency":
            from repokit.perf.periodic import PeriodicRun

            if session.sequences is not None:
                raise PerfError(
                    "--periodic-concurrency-range sends independent requests: the model must "
                    "not use sequence batching",
                    GENERIC_ERROR,
                )
            result = await PeriodicRun(options, transports[0], session.workload, clock).run()
            (observer or NullObserver()).level_done(result)
            report.results.append(result)
            if options.csv_file is not None:
                report.warnings.append(
                    "-f: no CSV in periodic concurrency mode (perf_analyzer writes none); the "
                    "requests' timestamps are in --profile-export-file"
                )
            return report
        profiler = Profiler(options, endpoints, observer or NullObserver(), clock, cpu_clock)
        await profiler.warmup()
        search = _search(options)
        next_value = intervals_level[1] if intervals_level else search.first()
        while next_value is not None:
            mode, value, make_intervals = intervals_level or _level(options, next_value)
            result = await profiler.measure_level(
                mode, value, make_intervals() if make_intervals else None
            )
            report.results.append(result)
            over = exceeds_latency_threshold(result.windows, options.latency_threshold_ms)
            # a level whose windows reached -l ends there, stable or not: it is over the
            # threshold, which is all a sweep or a search needs to know of it
            if not result.stable and not over:
                report.exit_code = STABILITY_ERROR
                report.message = (
                    f"Failed to obtain stable measurement within {options.max_trials} "
                    f"measurement windows for {result.label}. Please try to increase the "
                    "--measurement-interval."
                )
                break
            if intervals_level is not None:
                break
            if over and not options.binary_search:
                report.warnings.append(
                    f"stopped at {result.label}: latency reached --latency-threshold "
                    f"{options.latency_threshold_ms:g} ms"
                )
            next_value = search.after(value, not over)
        if options.binary_search:
            report.results.sort(key=lambda r: r.value)
            report.warnings.append(_search_outcome(report, options))
    finally:
        for each_session in sessions:
            if each_session.shm is not None:
                await each_session.shm.close()
        if owned:
            for each in opened:
                await each.close()
    return report


async def _prepare_endpoint(
    options: PerfOptions, transport: Transport, url: str, name_it: bool
) -> Session:
    """The session on one endpoint; with several, an error says which endpoint it came from."""
    try:
        return await prepare_session(options, transport)
    except PerfError as error:
        if not name_it:
            raise
        raise PerfError(f"{url}: {error.message}", error.exit_code) from None


def _search_outcome(report: PerfReport, o: PerfOptions) -> str:
    limit = o.latency_threshold_ms
    within = [r for r in report.results if not exceeds_latency_threshold(r.windows, limit)]
    if not within:
        return (
            f"binary search: even {report.results[0].label} exceeds --latency-threshold "
            f"{o.latency_threshold_ms:g} ms"
        )
    return (
        f"binary search: {within[-1].label} is the highest level within --latency-threshold "
        f"{o.latency_threshold_ms:g} ms ({len(report.results)} levels measured)"
    )


def run_perf_blocking(options: PerfOptions, observer: Observer | None = None) -> PerfReport:
    """:func:`run_perf` on a fresh event loop (uvloop when installed), then write the outputs."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        report = runner.run(run_perf(options, observer))
    write_outputs(report, options)
    return report


def write_outputs(report: PerfReport, options: PerfOptions) -> None:
    from repokit.perf.export import write_csv, write_profile_export
    from repokit.perf.plot import write_plot

    try:
        if options.csv_file is not None and options.mode != "periodic_concurrency":
            write_csv(report, options.csv_file, options.verbose_csv)
        if options.profile_export_file is not None:
            write_profile_export(report, options.profile_export_file)
        if options.plot_file is not None and report.results:
            write_plot(report, options.plot_file)
    except OSError as exc:
        raise PerfError(f"cannot write results: {exc}", GENERIC_ERROR) from None
