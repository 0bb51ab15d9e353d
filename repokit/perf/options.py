"""Options of ``repokit perf`` (perf_analyzer's names and defaults) and their validation.

:class:`PerfOptions` is plain data; :func:`parse_concurrency_range`, :func:`parse_rate_range`,
:func:`parse_shape` and :func:`parse_id_range` turn perf_analyzer's option strings into values;
:func:`validate_options` checks the combination and raises ``PerfError(exit 3)`` naming the
offending option. Defaults match perf_analyzer except ``--measurement-interval``, where time
windows last exactly the interval (perf_analyzer sleeps 1.2x the interval; throughput is divided
by the real duration in both, so results do not change).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from repokit.perf.errors import option_error
from repokit.perf.transports.tls import TlsOptions, validate_tls

DEFAULT_HTTP_URL = "localhost:8000"
DEFAULT_GRPC_URL = "localhost:8001"
PROTOCOLS = ("http", "grpc")
MEASUREMENT_MODES = ("time_windows", "count_windows")
DISTRIBUTIONS = ("constant", "poisson")
SHARED_MEMORY_KINDS = ("none", "system")
TENSOR_FORMATS = ("binary", "json")
COMPRESSIONS = ("none", "gzip", "deflate")


@dataclass(frozen=True)
class ConcurrencyRange:
    start: int
    end: int  # 0 = step up until --latency-threshold is reached
    step: int

    def levels(self, limit: int = 1024) -> list[int]:
        stop = self.end if self.end > 0 else limit
        return list(range(self.start, stop + 1, self.step))


@dataclass(frozen=True)
class RateRange:
    start: float
    end: float  # 0 = step up until --latency-threshold is reached
    step: float

    def levels(self, limit: int = 1000) -> list[float]:
        if self.end == 0:
            return [self.start + i * self.step for i in range(limit)]
        count = math.floor((self.end - self.start) / self.step + 1e-9) + 1
        return [self.start + i * self.step for i in range(max(count, 1))]


@dataclass
class PerfOptions:
    model: str
    version: str = ""
    url: str = ""
    protocol: str = "http"
    batch_size: int = 1
    concurrency_range: ConcurrencyRange | None = None
    request_rate_range: RateRange | None = None
    request_distribution: str = "constant"
    request_intervals: Path | None = None
    latency_threshold_ms: float = 0.0
    max_threads: int = 16
    async_mode: bool = False
    streaming: bool = False
    endpoint: str = "infer"  # HTTP: infer, generate or generate_stream (see parse_endpoint)
    measurement_mode: str = "time_windows"
    measurement_interval_ms: float = 5000.0
    measurement_request_count: int = 50
    count_window_poll_s: float = 1.0
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int = -1
    warmup_request_count: int = 0
    shapes: dict[str, list[int]] = field(default_factory=dict)
    input_data: list[str] = field(default_factory=list)
    string_length: int = 128
    string_data: str | None = None
    sequence_length: int = 20
    sequence_length_specified: bool = False
    sequence_length_variation: float = 20.0
    sequence_id_range: tuple[int, int | None] = (1, None)
    num_of_sequences: int = 4
    shared_memory: str = "none"
    output_shared_memory_size: int = 100 * 1024
    input_tensor_format: str = "binary"
    output_tensor_format: str = "binary"
    headers: dict[str, str] = field(default_factory=dict)
    csv_file: Path | None = None
    verbose_csv: bool = False
    profile_export_file: Path | None = None
    collect_metrics: bool = False
    metrics_url: str = ""
    metrics_interval_ms: float = 1000.0
    plot_file: Path | None = None
    binary_search: bool = False  # bisect the range for the highest level within -l
    verbose: int = 0  # -v: every window's figures and each level's server figures
    tls: TlsOptions = field(default_factory=TlsOptions)
    workers: int = 1
    seed: int = 0
    forced_sync: bool = False  # --sync: only checked against -a (sync is the default)
    serial_sequences: bool = False  # --serial-sequences: a sequence's requests never overlap
    request_parameters: dict[str, tuple[str, str]] = field(default_factory=dict)
    trace_settings: dict[str, str] = field(default_factory=dict)  # --trace-level etc.
    request_count: int = 0  # --request-count: one count window of exactly this many requests
    grpc_compression: str = "none"  # --grpc-compression-algorithm
    bls_composing_models: list[str] = field(default_factory=list)  # their server stats too
    # --periodic-concurrency-range / --request-period (repokit.perf.periodic)
    periodic_concurrency_range: ConcurrencyRange | None = None
    request_period: int = 10

    @property
    def server_urls(self) -> list[str]:
        """The endpoints to load: ``-u`` split at commas (repeated ``-u`` are joined with
        commas by the CLI), or the protocol's default."""
        if self.url:
            return [part.strip() for part in self.url.split(",")]
        return [DEFAULT_GRPC_URL if self.protocol == "grpc" else DEFAULT_HTTP_URL]

    @property
    def server_url(self) -> str:
        """The first (usually the only) endpoint."""
        return self.server_urls[0]

    @property
    def mode(self) -> str:
        if self.periodic_concurrency_range is not None:
            return "periodic_concurrency"
        if self.request_intervals is not None:
            return "request_intervals"
        if self.request_rate_range is not None:
            return "request_rate"
        return "concurrency"

    def effective_concurrency(self) -> ConcurrencyRange:
        return self.concurrency_range or ConcurrencyRange(1, 1, 1)


def _numbers(text: str, option: str) -> list[str]:
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or any(p.strip() == "" for p in parts):
        raise option_error(f"{option} must be <start>[:<end>[:<step>]], got '{text}'")
    return parts


def parse_concurrency_range(text: str) -> ConcurrencyRange:
    parts = _numbers(text, "--concurrency-range")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise option_error(
            f"--concurrency-range takes integers <start>:<end>:<step>, got '{text}'"
        ) from None
    start = values[0]
    end = values[1] if len(values) > 1 else start
    step = values[2] if len(values) > 2 else 1
    return ConcurrencyRange(start, end, step)


def parse_rate_range(text: str) -> RateRange:
    parts = _numbers(text, "--request-rate-range")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise option_error(
            f"--request-rate-range takes numbers <start>:<end>:<step>, got '{text}'"
        ) from None
    start = values[0]
    end = values[1] if len(values) > 1 else start
    step = values[2] if len(values) > 2 else 1.0
    return RateRange(start, end, step)


def parse_shape(text: str) -> tuple[str, list[int]]:
    name, sep, dims_text = text.rpartition(":")
    if not sep or not name or not dims_text:
        raise option_error(f"--shape must be <input name>:<d1>,<d2>,..., got '{text}'")
    try:
        dims = [int(d) for d in dims_text.split(",")]
    except ValueError:
        raise option_error(f"--shape dims must be integers, got '{text}'") from None
    if any(d < 0 for d in dims):
        raise option_error(f"--shape dims must be non-negative, got '{text}'")
    return name, dims


def parse_id_range(text: str) -> tuple[int, int | None]:
    parts = text.split(":")
    try:
        start = int(parts[0])
        end = int(parts[1]) if len(parts) > 1 and parts[1] != "" else None
    except ValueError:
        raise option_error(f"--sequence-id-range must be <start>[:<end>], got '{text}'") from None
    if len(parts) > 2:
        raise option_error(f"--sequence-id-range must be <start>[:<end>], got '{text}'")
    return start, end


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise option_error(f"-H must be 'Header:Value', got '{text}'")
    return name.strip(), value.strip()


REQUEST_PARAMETER_TYPES = ("string", "int", "bool")
TRACE_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


def parse_request_parameter(text: str) -> tuple[str, tuple[str, str]]:
    """``--request-parameter name:value:type`` (type string, int or bool)."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise option_error(f"--request-parameter must be <name>:<value>:<type>, got '{text}'")
    name, value, kind = parts[0], parts[1], parts[2].lower()
    if kind not in REQUEST_PARAMETER_TYPES:
        raise option_error(
            f"--request-parameter type must be string, int or bool, got '{parts[2]}' in '{text}'"
        )
    if kind == "int":
        try:
            int(value)
        except ValueError:
            raise option_error(f"--request-parameter {name}: '{value}' is not an int") from None
    if kind == "bool" and value.lower() not in ("true", "false"):
        raise option_error(f"--request-parameter {name}: '{value}' is not true or false")
    return name, (value, kind)


def deprecated_concurrency(
    concurrency_range: str | None, threads: int | None, max_concurrency: int | None, dynamic: bool
) -> ConcurrencyRange | None:
    """perf_analyzer's deprecated ``-t N`` (N concurrent requests), ``-d`` (step the concurrency
    up from ``-t`` to ``-c``, 0 = until ``-l``) and ``-c``; not with ``--concurrency-range``."""
    if threads is None and max_concurrency is None and not dynamic:
        return parse_concurrency_range(concurrency_range) if concurrency_range else None
    if concurrency_range:
        raise option_error("Cannot use deprecated options (-t, -c, -d) with --concurrency-range")
    start = 1 if threads is None else threads
    if start < 1:
        raise option_error(f"-t (concurrent requests) must be at least 1, got {start}")
    if not dynamic:
        return ConcurrencyRange(start, start, 1)
    end = max_concurrency or 0
    if end < 0:
        raise option_error(f"-c (maximum concurrency) must not be negative, got {end}")
    return ConcurrencyRange(start, end, 1)


def _check_choice(value: str, choices: tuple[str, ...], option: str) -> None:
    if value not in choices:
        raise option_error(f"{option} must be one of {', '.join(choices)}; got '{value}'")


def _check_binary_search(o: PerfOptions) -> None:
    """perf_analyzer's rules: a range with an explicit end, and a latency threshold."""
    if o.request_intervals is not None:
        raise option_error("--binary-search does not apply to --request-intervals")
    if o.latency_threshold_ms <= 0:
        raise option_error("--binary-search needs -l/--latency-threshold (the latency to stay in)")
    ends = [r.end for r in (o.concurrency_range, o.request_rate_range) if r is not None]
    if not ends or ends[0] == 0:
        raise option_error(
            "--binary-search needs the range's start and end, e.g. --concurrency-range 1:64:1 "
            "(the step is the precision)"
        )


def _check_endpoints(o: PerfOptions) -> None:
    """Several ``-u`` endpoints: each named once, and no option that assumes one server."""
    urls = o.server_urls
    if any(not url for url in urls):
        raise option_error(f"-u has an empty endpoint in '{o.url}' (endpoints: host:port,...)")
    repeated = sorted({url for url in urls if urls.count(url) > 1})
    if repeated:
        raise option_error(
            f"-u names {', '.join(repeated)} more than once: each endpoint's statistics would "
            "be counted twice"
        )
    if len(urls) > 1:
        if o.shared_memory != "none":
            raise option_error(
                "--shared-memory system registers regions on one server: use it with one -u "
                "endpoint"
            )
        if o.collect_metrics:
            raise option_error(
                "--collect-metrics scrapes one server's metrics: use it with one -u endpoint"
            )


def _check_request_count(o: PerfOptions) -> None:
    """perf_analyzer's rules for ``--request-count``: one level, at least as many requests as
    the concurrency (or the rate)."""
    if o.request_count < 0:
        raise option_error(f"--request-count must not be negative, got {o.request_count}")
    if not o.request_count:
        return
    c = o.concurrency_range
    if c is not None:
        if o.request_count < c.start:
            raise option_error("--request-count can not be less than the concurrency")
        if c.end != c.start:
            raise option_error("--request-count needs a single concurrency, not a range")
    r = o.request_rate_range
    if r is not None:
        if o.request_count < int(r.start):
            raise option_error("--request-count can not be less than the request rate")
        if r.end != r.start:
            raise option_error("--request-count needs a single request rate, not a range")


def validate_options(o: PerfOptions) -> None:
    """Raise ``PerfError(exit 3)`` for the first invalid option or combination."""
    if not o.model:
        raise option_error("-m (model name) is required")
    _check_choice(o.protocol, PROTOCOLS, "-i")
    _check_choice(o.measurement_mode, MEASUREMENT_MODES, "--measurement-mode")
    _check_choice(o.request_distribution, DISTRIBUTIONS, "--request-distribution")
    _check_choice(o.shared_memory, SHARED_MEMORY_KINDS, "--shared-memory")
    _check_choice(o.input_tensor_format, TENSOR_FORMATS, "--input-tensor-format")
    _check_choice(o.output_tensor_format, TENSOR_FORMATS, "--output-tensor-format")
    if o.batch_size < 1:
        raise option_error(f"-b (batch size) must be at least 1, got {o.batch_size}")
    _check_endpoints(o)
    modes = [
        o.concurrency_range is not None,
        o.request_rate_range is not None,
        o.request_intervals is not None,
    ]
    if sum(modes) > 1:
        raise option_error(
            "--concurrency-range, --request-rate-range and --request-intervals are exclusive"
        )
    if o.concurrency_range is not None:
        c = o.concurrency_range
        if c.start < 1 or c.step < 1 or c.end < 0:
            raise option_error(
                "--concurrency-range needs start >= 1, step >= 1 and end >= 0 "
                f"(got {c.start}:{c.end}:{c.step})"
            )
        if c.end != 0 and c.end < c.start:
            raise option_error(f"--concurrency-range end {c.end} is below start {c.start}")
        if c.end == 0 and o.latency_threshold_ms <= 0:
            raise option_error("--concurrency-range with end 0 needs --latency-threshold")
    if o.request_rate_range is not None:
        r = o.request_rate_range
        if r.start <= 0 or r.step <= 0 or r.end < 0:
            raise option_error(
                "--request-rate-range needs start > 0, step > 0 and end >= 0 "
                f"(got {r.start:g}:{r.end:g}:{r.step:g})"
            )
        if r.end != 0 and r.end < r.start:
            raise option_error(f"--request-rate-range end {r.end:g} is below start {r.start:g}")
        if r.end == 0 and o.latency_threshold_ms <= 0:
            raise option_error("--request-rate-range with end 0 needs --latency-threshold")
    if o.binary_search:
        _check_binary_search(o)
    if o.async_mode and o.forced_sync:
        raise option_error("Cannot specify --async and --sync simultaneously")
    _check_choice(o.grpc_compression, COMPRESSIONS, "--grpc-compression-algorithm")
    if o.grpc_compression != "none" and o.protocol != "grpc":
        raise option_error("--grpc-compression-algorithm is only allowed with -i grpc")
    if o.request_parameters and o.protocol != "grpc":
        raise option_error("--request-parameter is only supported with -i grpc")
    level = o.trace_settings.get("trace_level")
    if level is not None and level not in TRACE_LEVELS:
        raise option_error(f"--trace-level must be one of {', '.join(TRACE_LEVELS)}; got '{level}'")
    _check_request_count(o)
    from repokit.perf.periodic import check_periodic

    check_periodic(o)
    validate_tls(o.tls, o.protocol)
    if o.request_intervals is not None and not o.request_intervals.is_file():
        raise option_error(f"--request-intervals file '{o.request_intervals}' does not exist")
    if o.endpoint != "infer":
        if o.protocol != "http":
            raise option_error(f"--endpoint {o.endpoint} is only available with -i http")
        if o.shared_memory != "none":
            raise option_error(f"--endpoint {o.endpoint} sends JSON: use --shared-memory none")
    elif o.streaming and o.protocol != "grpc":
        raise option_error(
            "--streaming is only available with -i grpc (or with --endpoint generate)"
        )
    if o.measurement_interval_ms <= 0:
        raise option_error("--measurement-interval must be positive")
    if o.measurement_request_count < 1:
        raise option_error("--measurement-request-count must be at least 1")
    if o.stability_percentage <= 0:
        raise option_error("--stability-percentage must be positive")
    if o.max_trials < 1:
        raise option_error("--max-trials must be at least 1")
    if o.percentile != -1 and not 1 <= o.percentile <= 99:
        raise option_error(f"--percentile must be between 1 and 99, got {o.percentile}")
    if o.warmup_request_count < 0:
        raise option_error("--warmup-request-count must not be negative")
    if o.max_threads < 1:
        raise option_error("--max-threads must be at least 1")
    if o.workers < 1:
        raise option_error("--workers must be at least 1")
    if o.sequence_length < 1:
        raise option_error("--sequence-length must be at least 1")
    if not 0 <= o.sequence_length_variation < 100:
        raise option_error("--sequence-length-variation must be in [0, 100)")
    start, end = o.sequence_id_range
    if start < 1 or (end is not None and end < start):
        raise option_error(
            f"--sequence-id-range must be 1 <= start <= end, got {start}:{end if end else ''}"
        )
    if o.num_of_sequences < 1:
        raise option_error("--num-of-sequences must be at least 1")
    if o.string_length < 0:
        raise option_error("--string-length must not be negative")
    if o.output_shared_memory_size < 1:
        raise option_error("--output-shared-memory-size must be positive")
    if o.metrics_interval_ms <= 0:
        raise option_error("--metrics-interval must be positive")
    if o.profile_export_file is not None and o.profile_export_file.is_dir():
        raise option_error(f"--profile-export-file '{o.profile_export_file}' is a directory")
    if o.csv_file is not None and o.csv_file.is_dir():
        raise option_error(f"-f '{o.csv_file}' is a directory")


ENDPOINTS = ("infer", "generate", "generate_stream")


def parse_endpoint(text: str, streaming: bool = False) -> str:
    """``--endpoint``: infer, generate or generate_stream, or a path that ends in one
    (``v2/models/<model>/generate_stream``, as perf_analyzer's tools spell it); generate with
    ``--streaming`` is generate_stream."""
    name = text.strip().strip("/").rsplit("/", 1)[-1] or "infer"
    if name not in ENDPOINTS:
        raise option_error(
            "--endpoint must be infer, generate or generate_stream (or a path ending in one), "
            f"got '{text}'"
        )
    return "generate_stream" if streaming and name == "generate" else name
