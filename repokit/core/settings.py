"""ServerSettings: the one input of the composition root (``build_service``).

Field names and defaults follow tritonserver's command line (§10 of the behaviour reference):
``repositories`` = ``--model-repository`` (may repeat), ``model_control_mode`` =
``--model-control-mode``, ``load_models`` = ``--load-model`` and so on. The CLI builds one of
these and never reaches past it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from repokit.core.response_cache import CacheSettings
from repokit.core.tracing.options import TraceStartup
from repokit.scheduler.rate_limiter import ResourceLimit

ControlMode = Literal["none", "explicit", "poll"]
LogFormat = Literal["default", "ISO8601"]

SERVER_ID = "triton"
# The Triton release whose behaviour repokit follows (reported in server metadata).
SERVER_VERSION = "2.51.0"
DEFAULT_HTTP_MAX_INPUT_SIZE = 1 << 26  # 64 MiB, tritonserver's --http-max-input-size default


@dataclass
class LogSettings:
    """Triton's runtime log settings (GET/POST /v2/logging)."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: LogFormat = "default"


@dataclass
class MetricsSettings:
    """``--allow-cpu-metrics``, ``--metrics-interval-ms`` and ``--metrics-config``."""

    allow_cpu_metrics: bool = True
    interval_ms: float = 2000.0
    counter_latencies: bool = True  # the nv_inference_*_duration_us counters
    summary_latencies: bool = False  # the nv_inference_*_summary_us summaries
    summary_quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99, 0.999)


@dataclass
class ServerSettings:
    repositories: list[Path] = field(default_factory=list)
    model_control_mode: ControlMode = "none"
    load_models: list[str] = field(default_factory=list)  # --load-model; "*" = every model
    strict_readiness: bool = True
    exit_timeout_secs: float = 30.0
    strict_model_config: bool = False  # --strict-model-config / --disable-auto-complete-config
    model_config_name: str = ""  # --model-config-name
    allow_client_shm: bool = False  # --allow-client-shm
    http_max_input_size: int = DEFAULT_HTTP_MAX_INPUT_SIZE
    repository_poll_secs: float = 15.0  # --repository-poll-secs
    exit_on_error: bool = True  # --exit-on-error (the CLI decides what to do with failures)
    # --python-execute-timeout-secs: a python model instance whose execute takes longer is
    # killed and restarted (0 = no limit, the default: models may legitimately take long)
    python_execute_timeout_secs: float = 0.0
    server_id: str = SERVER_ID  # --id
    server_version: str = SERVER_VERSION
    log: LogSettings = field(default_factory=LogSettings)
    model_load_thread_count: int = 4  # --model-load-thread-count: models loading at once
    model_load_retry_count: int = 0  # --model-load-retry-count: attempts after a failed load
    # --backend-config <backend>,<setting>=<value> ("" = every backend)
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    # --trace-config and the deprecated --trace-* flags (repokit.core.tracing.options)
    trace: TraceStartup = field(default_factory=TraceStartup)
    # --cache-config local,size=N (or --response-cache-byte-size N); None = no response cache
    response_cache: CacheSettings | None = None
    # --rate-limit (off | execution_count) and --rate-limit-resource NAME:COUNT[:DEVICE]
    rate_limit: Literal["off", "execution_count"] = "off"
    rate_limit_resources: tuple[ResourceLimit, ...] = ()
    # --model-namespacing: a model name may be in several repositories (each repository is
    # its namespace); requests name a model that is in one, ensembles find their steps in
    # their own repository first
    model_namespacing: bool = False

    def __post_init__(self) -> None:
        self.repositories = [Path(p) for p in self.repositories]
        if self.model_control_mode not in ("none", "explicit", "poll"):
            raise ValueError(
                f"unexpected model control mode '{self.model_control_mode}', "
                "expected one of none, explicit, poll"
            )
        if self.metrics.interval_ms <= 0:
            raise ValueError("--metrics-interval-ms must be greater than 0")
        if self.model_load_thread_count < 1:
            raise ValueError("--model-load-thread-count must be at least 1")
        if self.model_load_retry_count < 0:
            raise ValueError("--model-load-retry-count must not be negative")
        if self.rate_limit not in ("off", "execution_count"):
            raise ValueError(f"invalid argument for --rate-limit: '{self.rate_limit}'")
        if "*" in self.load_models and len(self.load_models) > 1:
            raise ValueError(
                "Wildcard model name '*' must be the ONLY startup model if specified at all."
            )
