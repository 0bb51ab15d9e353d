"""``repokit perf``: perf_analyzer-style load testing; ``repokit perf compare A.json B.json``.

Options keep perf_analyzer's names. Exit codes: 0 success, 2 no stable measurement, 3 bad
options or input data (including option parsing errors), 99 anything else. While a level is
measured a live view shows the current window, throughput so far and the stability of the last
three windows; a table of all levels follows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from repokit.cli.output import (
    Column,
    RepokitGroup,
    TableData,
    examples,
    make_console,
    print_error,
    print_table,
)
from repokit.cli.version_option import VersionOption
from repokit.perf.errors import GENERIC_ERROR, OPTION_ERROR, PerfError

if TYPE_CHECKING:  # the load generator (numpy, the transports) is imported when perf runs
    from repokit.perf.report import LevelResult, PerfReport
    from repokit.perf.server_stats import ServerBreakdown
    from repokit.perf.statistics import WindowSummary


class _PerfGroup(RepokitGroup):
    """Option parsing errors exit 3 (perf_analyzer's OPTION_ERROR), not click's 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except Exception as exc:  # click's UsageError (typer vendors click privately)
            _as_option_error(exc)
            raise

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """A stray word ('No such command') is a bad option too: exit 3, not click's 2
        (perf_analyzer's STABILITY_ERROR)."""
        try:
            return super().resolve_command(ctx, args)
        except Exception as exc:
            _as_option_error(exc)
            raise


def _as_option_error(exc: Exception) -> None:
    if getattr(exc, "exit_code", None) == 2:
        exc.exit_code = OPTION_ERROR  # type: ignore[attr-defined]


def _us(ns: float) -> str:
    return f"{ns / 1000:,.0f}"


def _spread(values: list[float]) -> str:
    from repokit.perf.statistics import STABILITY_WINDOW

    if len(values) < STABILITY_WINDOW or min(values) <= 0:
        return "-"
    last = values[-STABILITY_WINDOW:]
    return f"{(max(last) / min(last) - 1) * 100:.1f}%"


def pa_heading(label: str) -> str:
    """perf_analyzer's line before a level: 'Request concurrency: 4' or 'Request Rate: 40
    inference requests per seconds' (sic)."""
    kind, _, value = label.rpartition(" ")
    if kind == "concurrency":
        return f"Request concurrency: {value}"
    return f"Request Rate: {value} inference requests per seconds"


class LiveView:
    """Observer rendering the current window with rich.Live (cli is the only rich user)."""

    def __init__(self, console: Console, stability_percentage: float, verbose: int = 0) -> None:
        self.console = console
        self.threshold = stability_percentage
        self.verbose = verbose  # -v: every window's figures and each level's server figures
        self.live: Live | None = None

    def level_started(self, label: str) -> None:
        if self.verbose:  # perf_analyzer's heading of each level, which scripts grep for
            self.console.print(pa_heading(label), markup=False, highlight=False)
        if not self.console.is_terminal:  # piped: only the per-level lines and the table
            return
        self.live = Live(
            Text(f"{label}: starting"), console=self.console, refresh_per_second=4, transient=True
        )
        self.live.start()

    def _render(self, progress: Any) -> Group:
        from repokit.perf.statistics import STABILITY_WINDOW

        windows: list[WindowSummary] = progress.windows
        head = Text.assemble(
            (f"{progress.level_label}", "bold"),
            f"  window {progress.trial}/{progress.max_trials}  ",
            f"{progress.elapsed_s:.1f} s of {progress.target}  ",
            (f"{progress.throughput:,.1f} infer/s so far", "cyan"),
        )
        fraction = 0.0
        if progress.target.endswith(" s"):
            fraction = min(progress.elapsed_s / float(progress.target[:-2]), 1.0)
        else:
            fraction = min(progress.completed / max(int(progress.target.split()[0]), 1), 1.0)
        table = Table(box=None, pad_edge=False)
        for column in ("window", "infer/s", "avg us", "p99 us"):
            table.add_column(column, justify="right")
        for i, w in enumerate(windows[-STABILITY_WINDOW:], start=max(len(windows) - 2, 1)):
            table.add_row(
                str(i),
                f"{w.throughput:,.1f}",
                _us(w.avg_latency_ns),
                _us(w.percentiles_ns.get(99, 0)),
            )
        stability = Text(
            f"stability over last {STABILITY_WINDOW}: throughput "
            f"{_spread([w.throughput for w in windows])}, latency "
            f"{_spread([float(w.stabilizing_latency_ns) for w in windows])} "
            f"(need <= {self.threshold:g}%)"
        )
        # the bar sits in a one-row grid so that it ends its own line (a bare ProgressBar does
        # not, and the window table's header then ran on after it)
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=1.0, completed=fraction, width=50), f"{fraction:4.0%}")
        return Group(head, bar, table, stability)

    def window_progress(self, progress: Any) -> None:
        if self.live is not None:
            self.live.update(self._render(progress))

    def window_done(self, progress: Any, summary: WindowSummary) -> None:
        if self.verbose:  # printed above the live view on a terminal, as lines when piped
            self.console.print(
                f"  {progress.level_label} window {progress.trial}: "
                f"{summary.throughput:,.1f} infer/s, {summary.request_count} requests, latency "
                f"avg {_us(summary.avg_latency_ns)} us, p99 "
                f"{_us(summary.percentiles_ns.get(99, 0))} us",
                markup=False,
                highlight=False,
            )
        self.window_progress(progress)

    def level_done(self, result: LevelResult) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
        s = result.summary
        state = "stable" if result.stable else "[red]unstable[/red]"
        self.console.print(
            f"{result.label}: {s.throughput:,.1f} infer/s, latency avg {_us(s.avg_latency_ns)} "
            f"us, p99 {_us(s.percentiles_ns.get(99, 0))} us ({state}, {len(result.windows)} "
            "windows)"
        )
        for endpoint in result.endpoints:
            e = endpoint.summary
            self.console.print(
                f"  {endpoint.url}: {e.throughput:,.1f} infer/s, latency avg "
                f"{_us(e.avg_latency_ns)} us, p99 {_us(e.percentiles_ns.get(99, 0))} us",
                markup=False,
                highlight=False,
            )
        if "first_response_avg_ns" in s.extra:
            self.console.print(
                f"  time to first response: avg {_us(s.extra['first_response_avg_ns'])} us, "
                f"p50 {_us(s.extra['first_response_p50_ns'])} us, "
                f"p99 {_us(s.extra['first_response_p99_ns'])} us; "
                f"{s.response_throughput:,.1f} responses/s",
                markup=False,
                highlight=False,
            )
        if self.verbose and result.server is not None:
            b = result.server
            self.console.print(
                f"  server: {b.inference_count} inferences in {b.execution_count} executions "
                f"(avg batch {b.avg_batch_size:.2f}), request {_us(b.avg_request_ns)} us, queue "
                f"{_us(b.queue_ns)} us, compute input {_us(b.compute_input_ns)} us, infer "
                f"{_us(b.compute_infer_ns)} us, output {_us(b.compute_output_ns)} us",
                markup=False,
                highlight=False,
            )
        for warning in result.warnings:
            self.console.print(f"[yellow]warning:[/yellow] {warning}")


def _server_cells(b: ServerBreakdown) -> list[str]:
    """queue, compute in/infer/out (us), average batch size and execution count."""
    return [
        _us(b.queue_ns),
        _us(b.compute_input_ns),
        _us(b.compute_infer_ns),
        _us(b.compute_output_ns),
        f"{b.avg_batch_size:.2f}" if b.execution_count else "-",
        str(b.execution_count),
    ]


def _endpoint_cells(
    report: PerfReport, url: str, s: WindowSummary, b: ServerBreakdown | None
) -> list[str]:
    """One endpoint's row under its level (``-u`` with several endpoints)."""
    row = [f"  {url}", f"{s.throughput:,.1f}", _us(s.avg_latency_ns)]
    row += [_us(s.percentiles_ns.get(p, 0)) for p in (50, 90, 95, 99)]
    row += [_us(s.avg_send_ns), _us(s.avg_recv_ns)]
    if report.include_server_stats:
        row += _server_cells(b) if b else ["-"] * 6
    return row


def render_report(report: PerfReport, console: Console) -> None:
    title = f"{report.model} v{report.version} over {report.protocol} ({report.url})"
    by_count = report.mode in ("concurrency", "periodic_concurrency")
    level_name = "Concurrency" if by_count else "Request rate"
    columns = [level_name, "infer/s", "avg us", "p50", "p90", "p95", "p99", "send", "recv"]
    if report.include_server_stats:
        columns += ["queue", "compute in", "infer", "compute out", "batch", "execs"]
    table = TableData([Column(c, justify="right") for c in columns], title=title)
    for result in report.results:
        s = result.summary
        level = str(int(result.value)) if by_count else f"{result.value:g}"
        row = [level, f"{s.throughput:,.1f}", _us(s.avg_latency_ns)]
        row += [_us(s.percentiles_ns.get(p, 0)) for p in (50, 90, 95, 99)]
        row += [_us(s.avg_send_ns), _us(s.avg_recv_ns)]
        if report.include_server_stats:
            b = result.server
            row += _server_cells(b) if b else ["-"] * 6
        table.add_row(*row)
        for endpoint in result.endpoints:
            table.add_row(*_endpoint_cells(report, endpoint.url, endpoint.summary, endpoint.server))
        if b := result.server:
            for name, part in b.composing.items():
                blank = [""] * 6
                table.add_row(f"  {name}", "", _us(part.avg_request_ns), *blank,
                              *_server_cells(part))  # fmt: skip
    print_table(console, table)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if report.message:
        console.print(f"[red]{report.message}[/red]")


def render_compare(a: PerfReport, b: PerfReport, names: tuple[str, str], console: Console) -> None:
    from repokit.perf.export import compare_rows

    headers = ("level", "A infer/s", "B infer/s", "B/A", "A p99 us", "B p99 us", "B/A p99")
    table = TableData(
        [Column(c, justify="right") for c in headers], title=f"A = {names[0]}   B = {names[1]}"
    )

    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    for row in compare_rows(a, b):
        table.add_row(
            f"{row['value']:g}",
            num(row["a_throughput"], ",.1f"),
            num(row["b_throughput"], ",.1f"),
            num(row.get("throughput_ratio"), ".2f"),
            num(row["a_p99_us"], ",.0f"),
            num(row["b_p99_us"], ",.0f"),
            num(row.get("p99_ratio"), ".2f"),
        )
    print_table(console, table)


def _fail(console: Console, error: PerfError) -> None:
    print_error(console, error.message)
    raise typer.Exit(error.exit_code)


def register(app: typer.Typer) -> None:
    perf_app = typer.Typer(
        cls=_PerfGroup,
        invoke_without_command=True,
        no_args_is_help=False,
        help="Load-test a model on any KServe v2 server (perf_analyzer "
        "options; `repokit perf compare A.json B.json`).",
        rich_markup_mode=None,
        epilog=examples(
            "repokit perf -m simple -u localhost:8000 --concurrency-range 1:8:2",
            "repokit perf -m simple -u host1:8000,host2:8000 --concurrency-range 8",
            "repokit perf -m simple -u localhost:8001 -i grpc --request-rate-range 100:400:100",
            "repokit perf -m simple --profile-export-file after.json",
            "repokit perf -m simple --concurrency-range 1:64:1 --binary-search -l 20",
            "repokit perf -m simple --concurrency-range 1:16:2 --plot sweep.svg",
            "repokit perf -m simple -i grpc -u localhost:8001 --ssl-grpc-use-ssl \\",
            "    --ssl-grpc-root-certifications-file ca.pem",
            "repokit perf compare before.json after.json",
        ),
    )

    @perf_app.callback()
    def perf(
        ctx: typer.Context,
        model: Annotated[str, typer.Option("-m", "--model-name", help="model name")] = "",
        version: Annotated[str, typer.Option("-x", "--model-version")] = "",
        url: Annotated[
            list[str] | None,
            typer.Option(
                "-u",
                "--url",
                metavar="HOST:PORT",
                help="host:port; several (host1:8000,host2:8000 or -u repeated) share each "
                "level's load and are reported one by one and merged.",
            ),
        ] = None,
        protocol: Annotated[str, typer.Option("-i", "--protocol", help="http or grpc")] = "http",
        batch_size: Annotated[int, typer.Option("-b", "--batch-size")] = 1,
        concurrency_range: Annotated[str | None, typer.Option("--concurrency-range")] = None,
        request_rate_range: Annotated[str | None, typer.Option("--request-rate-range")] = None,
        periodic_concurrency_range: Annotated[
            str | None,
            typer.Option(
                "--periodic-concurrency-range",
                help="start:end:step: start requests, step more each time the latest ones have "
                "--request-period responses, end in all (gRPC streaming; needs "
                "--profile-export-file).",
            ),
        ] = None,
        request_period: Annotated[
            int,
            typer.Option(
                "--request-period",
                help="Responses each request gets before the next ones are sent (periodic "
                "concurrency mode).",
            ),
        ] = 10,
        request_distribution: Annotated[str, typer.Option("--request-distribution")] = "constant",
        request_intervals: Annotated[Path | None, typer.Option("--request-intervals")] = None,
        latency_threshold: Annotated[
            float,
            typer.Option(
                "-l",
                "--latency-threshold",
                help="Latency limit in ms: a sweep stops at the first level over it.",
            ),
        ] = 0.0,
        max_threads: Annotated[int, typer.Option("--max-threads")] = 16,
        async_mode: Annotated[bool, typer.Option("-a", "--async")] = False,
        streaming: Annotated[bool, typer.Option("--streaming")] = False,
        endpoint: Annotated[
            str,
            typer.Option(
                "--endpoint",
                help="HTTP endpoint: infer, generate or generate_stream (or a "
                "v2/models/<model>/... path ending in one); generate_stream reports the time "
                "to first response.",
            ),
        ] = "infer",
        measurement_mode: Annotated[str, typer.Option("--measurement-mode")] = "time_windows",
        measurement_interval: Annotated[
            float, typer.Option("-p", "--measurement-interval", help="ms")
        ] = 5000.0,
        measurement_request_count: Annotated[int, typer.Option("--measurement-request-count")] = 50,
        stability_percentage: Annotated[float, typer.Option("-s", "--stability-percentage")] = 10,
        max_trials: Annotated[int, typer.Option("-r", "--max-trials")] = 10,
        percentile: Annotated[int, typer.Option("--percentile")] = -1,
        warmup_request_count: Annotated[int, typer.Option("--warmup-request-count")] = 0,
        shape: Annotated[list[str] | None, typer.Option("--shape", metavar="NAME:SHAPE")] = None,
        input_data: Annotated[
            list[str] | None, typer.Option("--input-data", metavar="FILE|random|zero")
        ] = None,
        string_length: Annotated[int, typer.Option("--string-length")] = 128,
        string_data: Annotated[str | None, typer.Option("--string-data")] = None,
        sequence_length: Annotated[int | None, typer.Option("--sequence-length")] = None,
        sequence_length_variation: Annotated[
            float, typer.Option("--sequence-length-variation")
        ] = 20.0,
        sequence_id_range: Annotated[str, typer.Option("--sequence-id-range")] = "1",
        num_of_sequences: Annotated[int, typer.Option("--num-of-sequences")] = 4,
        shared_memory: Annotated[str, typer.Option("--shared-memory")] = "none",
        output_shared_memory_size: Annotated[
            int, typer.Option("--output-shared-memory-size")
        ] = 102400,
        input_tensor_format: Annotated[str, typer.Option("--input-tensor-format")] = "binary",
        output_tensor_format: Annotated[str, typer.Option("--output-tensor-format")] = "binary",
        header: Annotated[
            list[str] | None, typer.Option("-H", "--header", metavar="NAME:VALUE")
        ] = None,
        csv_file: Annotated[Path | None, typer.Option("-f", "--filename")] = None,
        verbose_csv: Annotated[bool, typer.Option("--verbose-csv")] = False,
        profile_export_file: Annotated[Path | None, typer.Option("--profile-export-file")] = None,
        collect_metrics: Annotated[bool, typer.Option("--collect-metrics")] = False,
        metrics_url: Annotated[str, typer.Option("--metrics-url")] = "",
        metrics_interval: Annotated[float, typer.Option("--metrics-interval", help="ms")] = 1000,
        plot: Annotated[
            Path | None,
            typer.Option(
                "--plot",
                help="Draw p50/p90/p99 latency against throughput per level into FILE (.png, "
                ".svg or .pdf; needs matplotlib: pip install 'repokit[plot]').",
            ),
        ] = None,
        binary_search: Annotated[
            bool,
            typer.Option(
                "--binary-search",
                help="Bisect the concurrency or request-rate range for the highest level within "
                "-l (the range's step is the precision).",
            ),
        ] = False,
        verbose: Annotated[
            int,
            typer.Option(
                "-v",
                "--verbose",
                count=True,
                help="Print every window and each level's server figures.",
            ),
        ] = 0,
        ssl_grpc_use_ssl: Annotated[
            bool, typer.Option("--ssl-grpc-use-ssl", help="gRPC over TLS.")
        ] = False,
        ssl_grpc_root_certifications_file: Annotated[
            Path | None,
            typer.Option(
                "--ssl-grpc-root-certifications-file", help="PEM root certificates (gRPC)."
            ),
        ] = None,
        ssl_grpc_private_key_file: Annotated[
            Path | None,
            typer.Option("--ssl-grpc-private-key-file", help="PEM client private key (gRPC)."),
        ] = None,
        ssl_grpc_certificate_chain_file: Annotated[
            Path | None,
            typer.Option(
                "--ssl-grpc-certificate-chain-file", help="PEM client certificate chain (gRPC)."
            ),
        ] = None,
        ssl_https_verify_peer: Annotated[
            int,
            typer.Option("--ssl-https-verify-peer", help="0: accept any server certificate."),
        ] = 1,
        ssl_https_verify_host: Annotated[
            int,
            typer.Option(
                "--ssl-https-verify-host", help="0: accept a certificate for another name."
            ),
        ] = 2,
        ssl_https_ca_certificates_file: Annotated[
            Path | None,
            typer.Option("--ssl-https-ca-certificates-file", help="CA bundle (HTTPS)."),
        ] = None,
        ssl_https_client_certificate_file: Annotated[
            Path | None,
            typer.Option("--ssl-https-client-certificate-file", help="Client certificate."),
        ] = None,
        ssl_https_client_certificate_type: Annotated[
            str, typer.Option("--ssl-https-client-certificate-type", help="PEM or DER.")
        ] = "PEM",
        ssl_https_private_key_file: Annotated[
            Path | None,
            typer.Option("--ssl-https-private-key-file", help="Client private key (HTTPS)."),
        ] = None,
        ssl_https_private_key_type: Annotated[
            str, typer.Option("--ssl-https-private-key-type", help="PEM (DER is refused).")
        ] = "PEM",
        sync: Annotated[
            bool, typer.Option("--sync", help="One connection per concurrent request (default).")
        ] = False,
        serial_sequences: Annotated[
            bool,
            typer.Option(
                "--serial-sequences",
                help="A sequence's requests never overlap (always so in repokit perf).",
            ),
        ] = False,
        request_count: Annotated[
            int,
            typer.Option(
                "--request-count", help="Measure one window of this many requests (no stability)."
            ),
        ] = 0,
        request_parameter: Annotated[
            list[str] | None,
            typer.Option(
                "--request-parameter",
                metavar="NAME:VALUE:TYPE",
                help="name:value:type (string, int, bool); gRPC only.",
            ),
        ] = None,
        trace_level: Annotated[
            str | None,
            typer.Option("--trace-level", help="Server trace level: OFF, TIMESTAMPS, TENSORS."),
        ] = None,
        grpc_compression_algorithm: Annotated[
            str,
            typer.Option(
                "--grpc-compression-algorithm",
                help="gRPC requests compressed: none, gzip, deflate.",
            ),
        ] = "none",
        bls_composing_models: Annotated[
            str,
            typer.Option(
                "--bls-composing-models",
                help="Models a BLS model calls (a,b): their server figures under its own.",
            ),
        ] = "",
        service_kind: Annotated[
            str,
            typer.Option("--service-kind", help="triton (KServe v2 over -i http or grpc) only."),
        ] = "triton",
        show_version: VersionOption = False,
        trace_rate: Annotated[int | None, typer.Option("--trace-rate")] = None,
        trace_count: Annotated[int | None, typer.Option("--trace-count")] = None,
        log_frequency: Annotated[int | None, typer.Option("--log-frequency")] = None,
        threads: Annotated[
            int | None, typer.Option("-t", help="Deprecated: --concurrency-range N.")
        ] = None,
        max_concurrency: Annotated[
            int | None, typer.Option("-c", help="Deprecated: the end of -d's range.")
        ] = None,
        dynamic: Annotated[
            bool, typer.Option("-d", help="Deprecated: --concurrency-range <-t>:<-c>.")
        ] = False,
        zero_input: Annotated[bool, typer.Option("-z", help="Deprecated: --input-data zero.")] = (
            False
        ),
        data_directory: Annotated[
            list[str] | None,
            typer.Option("--data-directory", metavar="DIR", help="Deprecated: --input-data."),
        ] = None,
    ) -> None:
        """Measure throughput and latency until stable (perf_analyzer's method)."""
        if ctx.invoked_subcommand is not None:
            return
        from repokit.perf.options import (
            PerfOptions,
            deprecated_concurrency,
            parse_endpoint,
            parse_header,
            parse_id_range,
            parse_rate_range,
            parse_request_parameter,
            parse_shape,
        )
        from repokit.perf.periodic import parse_periodic_range
        from repokit.perf.transports.tls import TlsOptions

        console = make_console()
        try:
            if not model:
                raise PerfError("-m (model name) is required", OPTION_ERROR)
            if service_kind != "triton":
                raise PerfError(
                    f"--service-kind {service_kind} is not supported: repokit perf loads KServe "
                    "v2 (Triton) servers over HTTP or gRPC (--service-kind triton)",
                    OPTION_ERROR,
                )
            sources = [*(input_data or []), *(data_directory or [])]
            if zero_input:
                if sources:
                    raise PerfError(
                        "-z cannot be combined with --input-data or --data-directory",
                        OPTION_ERROR,
                    )
                sources = ["zero"]
            trace = {
                key: str(value)
                for key, value in (
                    ("trace_level", trace_level),
                    ("trace_rate", trace_rate),
                    ("trace_count", trace_count),
                    ("log_frequency", log_frequency),
                )
                if value is not None
            }
            options = PerfOptions(
                model=model,
                version=version,
                url=",".join(url or []),
                protocol=protocol,
                batch_size=batch_size,
                concurrency_range=deprecated_concurrency(
                    concurrency_range, threads, max_concurrency, dynamic
                ),
                request_rate_range=parse_rate_range(request_rate_range)
                if request_rate_range
                else None,
                request_distribution=request_distribution,
                request_intervals=request_intervals,
                latency_threshold_ms=latency_threshold,
                max_threads=max_threads,
                async_mode=async_mode,
                streaming=streaming,
                endpoint=parse_endpoint(endpoint, streaming),
                measurement_mode="count_windows" if request_count > 0 else measurement_mode,
                measurement_interval_ms=measurement_interval,
                measurement_request_count=request_count or measurement_request_count,
                stability_percentage=stability_percentage,
                max_trials=1 if request_count > 0 else max_trials,
                percentile=percentile,
                warmup_request_count=warmup_request_count,
                shapes=dict(parse_shape(s) for s in shape or []),
                input_data=sources,
                string_length=string_length,
                string_data=string_data,
                sequence_length=sequence_length or 20,
                sequence_length_specified=sequence_length is not None,
                sequence_length_variation=sequence_length_variation,
                sequence_id_range=parse_id_range(sequence_id_range),
                num_of_sequences=num_of_sequences,
                shared_memory=shared_memory,
                output_shared_memory_size=output_shared_memory_size,
                input_tensor_format=input_tensor_format,
                output_tensor_format=output_tensor_format,
                headers=dict(parse_header(h) for h in header or []),
                csv_file=csv_file,
                verbose_csv=verbose_csv,
                profile_export_file=profile_export_file,
                collect_metrics=collect_metrics,
                metrics_url=metrics_url,
                metrics_interval_ms=metrics_interval,
                plot_file=plot,
                binary_search=binary_search,
                verbose=verbose,
                forced_sync=sync,
                serial_sequences=serial_sequences,
                request_parameters=dict(map(parse_request_parameter, request_parameter or [])),
                trace_settings=trace,
                request_count=request_count,
                periodic_concurrency_range=(
                    parse_periodic_range(periodic_concurrency_range)
                    if periodic_concurrency_range is not None
                    else None
                ),
                request_period=request_period,
                grpc_compression=grpc_compression_algorithm,
                bls_composing_models=[
                    name.strip() for name in bls_composing_models.split(",") if name.strip()
                ],
                tls=TlsOptions(
                    grpc_use_ssl=ssl_grpc_use_ssl,
                    grpc_root_certifications_file=ssl_grpc_root_certifications_file,
                    grpc_private_key_file=ssl_grpc_private_key_file,
                    grpc_certificate_chain_file=ssl_grpc_certificate_chain_file,
                    https_verify_peer=ssl_https_verify_peer,
                    https_verify_host=ssl_https_verify_host,
                    https_ca_certificates_file=ssl_https_ca_certificates_file,
                    https_client_certificate_file=ssl_https_client_certificate_file,
                    https_client_certificate_type=ssl_https_client_certificate_type.upper(),
                    https_private_key_file=ssl_https_private_key_file,
                    https_private_key_type=ssl_https_private_key_type.upper(),
                ),
            )
            from repokit.perf.profiler import run_perf_blocking

            report = run_perf_blocking(options, LiveView(console, stability_percentage, verbose))
        except PerfError as error:
            _fail(console, error)
            return
        except (OSError, RuntimeError, ValueError) as error:
            _fail(console, PerfError(f"unexpected failure: {error!r}", GENERIC_ERROR))
            return
        render_report(report, console)
        raise typer.Exit(report.exit_code)

    @perf_app.command("compare", epilog=examples("repokit perf compare before.json after.json"))
    def compare(
        first: Annotated[Path, typer.Argument(help="profile export of run A")],
        second: Annotated[Path, typer.Argument(help="profile export of run B")],
    ) -> None:
        """Show two runs (files from --profile-export-file) side by side."""
        from repokit.perf.export import load_report

        console = make_console()
        try:
            a, b = load_report(first), load_report(second)
        except PerfError as error:
            _fail(console, error)
            return
        render_compare(a, b, (str(first), str(second)), console)

    app.add_typer(perf_app, name="perf")
