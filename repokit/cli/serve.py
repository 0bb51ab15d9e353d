"""``repokit serve [REPO ...]``: serve model repositories over KServe v2 HTTP/REST, gRPC and
Prometheus metrics, with tritonserver's flags.

Boolean flags take tritonserver's explicit values (``--allow-client-shm=true``,
``--strict-readiness false``). The server lifecycle lives in
:mod:`repokit.frontends.runner`; this module parses options and renders.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from repokit.cli.output import examples, make_console, print_error

# the words tritonserver 2.51 takes for a bool flag, in any case (its ParseOption<bool>)
_TRUE = {"true", "1", "on"}
_FALSE = {"false", "0", "off"}
# tritonserver reads repositories in S3, Google Cloud Storage and Azure Storage
CLOUD_REPOSITORY = re.compile(r"^(s3|gs|as):/+")


def parse_bool(value: str, flag: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise typer.BadParameter(
        f"{flag} expects true or false (or on/off, 1/0), got '{value}': "
        f"invalid value for bool option: {value}"
    )


def parse_verbose(value: str) -> int:
    """--log-verbose: a level, or true (1) / false (0) as tritonserver 2.51 takes it."""
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    try:
        level = int(lowered)
    except ValueError:
        raise typer.BadParameter(
            f"--log-verbose expects a level (0, 1, 2 ...) or true/false, got '{value}'"
        ) from None
    if level < 0:
        raise typer.BadParameter("--log-verbose must not be negative")
    return level


_INERT_PANEL = "tritonserver flags without effect here"
_Inert = Annotated[
    str | None, typer.Option(metavar="VALUE", rich_help_panel=_INERT_PANEL, show_default=False)
]
_InertList = Annotated[
    list[str] | None,
    typer.Option(metavar="VALUE", rich_help_panel=_INERT_PANEL, show_default=False),
]


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        import asyncio

        return asyncio.run(coro)
    return uvloop.run(coro)


def serve(
    repositories: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="REPOSITORY",
            help="Model repositories (default: the bundled sample repository).",
        ),
    ] = None,
    model_repository: Annotated[
        list[Path] | None,
        typer.Option(
            "--model-repository",
            "--model-store",
            metavar="PATH",
            help="tritonserver's spelling (repeatable).",
        ),
    ] = None,
    http_port: Annotated[int, typer.Option(help="0 picks a free port.")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="0 picks a free port.")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="0 picks a free port.")] = 8002,
    http_address: str = "0.0.0.0",
    grpc_address: str = "0.0.0.0",
    metrics_address: Annotated[str, typer.Option(help="Default: the HTTP address.")] = "",
    allow_http: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    allow_grpc: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    allow_metrics: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    model_control_mode: Annotated[str, typer.Option(help="none | explicit | poll")] = "none",
    repository_poll_secs: float = 15.0,
    load_model: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME", help="Repeatable; '*' loads every model (explicit mode)."),
    ] = None,
    strict_readiness: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    exit_on_error: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    exit_timeout_secs: float = 30.0,
    http_max_input_size: int = 1 << 26,
    http_restricted_api: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SPEC",
            help="<apis>:<key>=<value>, repeatable: requests to those APIs need the header"
            " <key>: <value> (else 403).",
        ),
    ] = None,
    grpc_restricted_protocol: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SPEC",
            help="<protocols>:<key>=<value>, repeatable: calls to those RPCs need the metadata"
            " triton-grpc-protocol-<key>: <value> (else UNAVAILABLE).",
        ),
    ] = None,
    http_header_forward_pattern: Annotated[
        str,
        typer.Option(
            metavar="REGEX", help="Headers whose name matches go to the model as parameters."
        ),
    ] = "",
    grpc_header_forward_pattern: Annotated[
        str,
        typer.Option(
            metavar="REGEX", help="Metadata whose name matches go to the model as parameters."
        ),
    ] = "",
    reuse_grpc_port: Annotated[str, typer.Option(metavar="BOOL")] = "false",
    grpc_use_ssl: Annotated[str, typer.Option(metavar="BOOL")] = "false",
    grpc_use_ssl_mutual: Annotated[str, typer.Option(metavar="BOOL")] = "false",
    grpc_server_cert: Annotated[str, typer.Option(help="PEM file.")] = "",
    grpc_server_key: Annotated[str, typer.Option(help="PEM file.")] = "",
    grpc_root_cert: Annotated[str, typer.Option(help="PEM file.")] = "",
    grpc_keepalive_time: Annotated[int, typer.Option(help="ms")] = 7_200_000,
    grpc_keepalive_timeout: Annotated[int, typer.Option(help="ms")] = 20_000,
    grpc_keepalive_permit_without_calls: Annotated[str, typer.Option(metavar="BOOL")] = "false",
    grpc_http2_max_pings_without_data: int = 2,
    grpc_http2_min_recv_ping_interval_without_data: Annotated[
        int, typer.Option(help="ms")
    ] = 300_000,
    grpc_http2_max_ping_strikes: int = 2,
    grpc_max_connection_age: Annotated[int, typer.Option(help="ms; 0 = unlimited")] = 0,
    grpc_max_connection_age_grace: Annotated[int, typer.Option(help="ms; 0 = unlimited")] = 0,
    grpc_infer_response_compression_level: Annotated[
        str, typer.Option(help="none | low | medium | high")
    ] = "none",
    grpc_transport: Annotated[
        str,
        typer.Option(help="native (repokit's own HTTP/2 server) | grpcio (grpc.aio)"),
    ] = "native",
    allow_client_shm: Annotated[str, typer.Option(metavar="BOOL")] = "false",
    strict_model_config: Annotated[str | None, typer.Option(metavar="BOOL")] = None,
    disable_auto_complete_config: bool = False,
    model_config_name: str | None = None,
    python_execute_timeout_secs: Annotated[
        float, typer.Option(help="Kill and restart a python instance whose execute runs longer.")
    ] = 0.0,
    server_id: Annotated[str, typer.Option("--id")] = "triton",
    log_verbose: Annotated[
        str,
        typer.Option(metavar="N", help="1 (or true): requests, batches, errors with their cause."),
    ] = "0",
    log_info: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    log_warning: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    log_error: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    log_format: Annotated[
        str, typer.Option(metavar="FORMAT", help="default | ISO8601")
    ] = "default",
    log_file: Annotated[
        str, typer.Option(metavar="PATH", help="Log to this file (default: stderr).")
    ] = "",
    model_load_thread_count: Annotated[
        int, typer.Option(metavar="N", help="Model versions loading at once.")
    ] = 4,
    model_load_retry_count: Annotated[
        int, typer.Option(metavar="N", help="Retries of a failed load.")
    ] = 0,
    backend_config: Annotated[
        list[str] | None,
        typer.Option(metavar="SETTING", help="<backend>,<setting>=<value>, repeatable."),
    ] = None,
    reuse_http_port: Annotated[str, typer.Option(metavar="BOOL")] = "false",
    allow_cpu_metrics: Annotated[str, typer.Option(metavar="BOOL")] = "true",
    metrics_interval_ms: Annotated[
        float, typer.Option(metavar="MS", help="How often CPU metrics are collected.")
    ] = 2000.0,
    rate_limit: Annotated[
        str,
        typer.Option(
            metavar="MODE",
            help="off | execution_count: instances run while their rate_limiter resources "
            "are free.",
        ),
    ] = "off",
    rate_limit_resource: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME:COUNT[:DEVICE]",
            help="A resource's count (on DEVICE, else on every device), repeatable.",
        ),
    ] = None,
    metrics_config: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SETTING",
            help="summary_latencies=true, counter_latencies=false, summary_quantiles=0.5:0.05,...",
        ),
    ] = None,
    trace_config: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SETTING",
            help="[triton|opentelemetry,]<setting>=<value>, repeatable: level=TIMESTAMPS, "
            "rate=N, count=N, mode=triton|opentelemetry, triton,file=PATH, "
            "triton,log-frequency=N, opentelemetry,url=URL, opentelemetry,resource=K=V.",
        ),
    ] = None,
    trace_file: Annotated[
        str | None, typer.Option(metavar="PATH", help="Deprecated: triton,file=PATH.")
    ] = None,
    trace_level: Annotated[
        list[str] | None, typer.Option(metavar="LEVEL", help="Deprecated: level=LEVEL.")
    ] = None,
    trace_rate: Annotated[str | None, typer.Option(metavar="N", help="Deprecated: rate=N.")] = None,
    trace_count: Annotated[
        str | None, typer.Option(metavar="N", help="Deprecated: count=N.")
    ] = None,
    trace_log_frequency: Annotated[
        str | None, typer.Option(metavar="N", help="Deprecated: triton,log-frequency=N.")
    ] = None,
    cache_config: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SETTING",
            help="<cache>,<setting>=<value>: local,size=<bytes> enables the response cache.",
        ),
    ] = None,
    response_cache_byte_size: Annotated[
        str | None,
        typer.Option(metavar="BYTES", help="Deprecated: --cache-config local,size=BYTES."),
    ] = None,
    workers: Annotated[
        str,
        typer.Option(
            metavar="N|auto",
            help="Processes doing the HTTP and gRPC work (auto: one per core).",
        ),
    ] = "1",
    model_namespacing: Annotated[
        str,
        typer.Option(
            metavar="BOOL",
            help="Let several repositories hold models of the same name (each repository is a"
            " namespace).",
        ),
    ] = "false",
    # tritonserver flags without effect here (each given one is logged once; serve_flags.py)
    enable_peer_access: _Inert = None,
    http_thread_count: _Inert = None,
    grpc_infer_allocation_pool_size: _Inert = None,
    allow_sagemaker: _Inert = None,
    sagemaker_port: _Inert = None,
    sagemaker_safe_port_range: _Inert = None,
    sagemaker_thread_count: _Inert = None,
    allow_vertex_ai: _Inert = None,
    vertex_ai_port: _Inert = None,
    vertex_ai_thread_count: _Inert = None,
    vertex_ai_default_model: _Inert = None,
    allow_gpu_metrics: _Inert = None,
    backend_directory: _Inert = None,
    repoagent_directory: _Inert = None,
    cache_directory: _Inert = None,
    pinned_memory_pool_byte_size: _Inert = None,
    cuda_memory_pool_byte_size: _InertList = None,
    cuda_virtual_address_size: _InertList = None,
    min_supported_compute_capability: _Inert = None,
    buffer_manager_thread_count: _Inert = None,
    host_policy: _InertList = None,
    model_load_gpu_limit: _InertList = None,
) -> None:
    """Serve model repositories like tritonserver (KServe v2 HTTP + gRPC + metrics)."""
    from repokit.cli.serve_workers import parse_workers

    try:
        worker_count = parse_workers(workers)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--workers'") from None
    from repokit.cli.serve_flags import (
        backend_config_notes,
        inert_flag_notes,
        parse_backend_config,
        parse_metrics_config,
        response_cache_notes,
        strict_model_config_warnings,
    )
    from repokit.core import server_log
    from repokit.core.response_cache import parse_cache_config
    from repokit.core.settings import LogSettings, ServerSettings
    from repokit.core.tracing.options import parse_trace_flags
    from repokit.frontends.grpc.options import parse_restricted_protocols
    from repokit.frontends.header_forwarding import forwarding
    from repokit.frontends.restricted_apis import parse_restricted_apis
    from repokit.frontends.runner import ServeSettings
    from repokit.paths import default_sample_repository
    from repokit.scheduler.rate_limiter import parse_rate_limit, parse_resource_flags

    given = {f"--{name.replace('_', '-')}": value for name, value in locals().items()}
    strict = None
    if strict_model_config is not None:
        strict = parse_bool(strict_model_config, "--strict-model-config")
    for warning in strict_model_config_warnings(strict, disable_auto_complete_config):
        sys.stderr.write(warning + "\n")  # as tritonserver, before its log starts
    repos = [*(repositories or []), *(model_repository or [])]
    if not repos:
        repos = [default_sample_repository()]
    for repo in repos:
        cloud = CLOUD_REPOSITORY.match(str(repo))  # Path made s3://b/p into s3:/b/p
        if cloud and not repo.is_dir():
            url = f"{cloud.group(1)}://{str(repo)[cloud.end() :]}"
            raise typer.BadParameter(
                f"model repository '{url}' is in cloud storage, which repokit does not read:"
                " copy the repository to a local directory and serve that"
            )
        if not repo.is_dir():
            raise typer.BadParameter(f"model repository '{repo}' is not a directory")
    if http_max_input_size <= 0:
        raise typer.BadParameter("--http-max-input-size must be greater than 0")
    if log_format not in ("default", "ISO8601"):
        raise typer.BadParameter(f"invalid argument for --log-format, got: {log_format}")
    verbose = parse_verbose(log_verbose)
    if model_config_name == "":
        raise typer.BadParameter("empty argument for --model-config-name")
    if load_model and model_control_mode.lower() != "explicit":
        raise typer.BadParameter(  # tritonserver's message
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
        )
    try:
        parse_restricted_apis(http_restricted_api or [])
        parse_restricted_protocols(grpc_restricted_protocol or [])
        forwarding(http_header_forward_pattern, "http-header-forward-pattern")
        forwarding(grpc_header_forward_pattern, "grpc-header-forward-pattern")
        if response_cache_byte_size is not None and not cache_config:
            try:
                int(response_cache_byte_size.strip())
            except ValueError:
                raise ValueError(
                    f"--response-cache-byte-size: invalid option value. Got "
                    f"{response_cache_byte_size}"
                ) from None
        response_cache = parse_cache_config(
            cache_config or [], response_cache_byte_size, cache_directory or ""
        )
        backends = parse_backend_config(backend_config or [])
        metrics, metrics_notes = parse_metrics_config(
            metrics_config or [],
            parse_bool(allow_cpu_metrics, "--allow-cpu-metrics"),
            metrics_interval_ms,
        )
        trace = parse_trace_flags(
            trace_config or [],
            trace_file=trace_file,
            trace_level=trace_level or [],
            trace_rate=trace_rate,
            trace_count=trace_count,
            trace_log_frequency=trace_log_frequency,
        )
        log = LogSettings(
            log_file=log_file,
            log_info=parse_bool(log_info, "--log-info"),
            log_warning=parse_bool(log_warning, "--log-warning"),
            log_error=parse_bool(log_error, "--log-error"),
            log_verbose_level=verbose,
            log_format=log_format,  # type: ignore[arg-type]
        )
        core = ServerSettings(
            repositories=repos,
            model_control_mode=model_control_mode.lower(),  # type: ignore[arg-type]
            load_models=list(load_model or []),
            strict_readiness=parse_bool(strict_readiness, "--strict-readiness"),
            exit_timeout_secs=exit_timeout_secs,
            strict_model_config=disable_auto_complete_config or bool(strict),
            model_config_name=model_config_name or "",
            allow_client_shm=parse_bool(allow_client_shm, "--allow-client-shm"),
            http_max_input_size=http_max_input_size,
            repository_poll_secs=repository_poll_secs,
            exit_on_error=parse_bool(exit_on_error, "--exit-on-error"),
            python_execute_timeout_secs=python_execute_timeout_secs,
            server_id=server_id,
            log=log,
            model_load_thread_count=model_load_thread_count,
            model_load_retry_count=model_load_retry_count,
            backend_config=backends,
            metrics=metrics,
            trace=trace,
            response_cache=response_cache,
            model_namespacing=parse_bool(model_namespacing, "--model-namespacing"),
            rate_limit=parse_rate_limit(rate_limit.lower()),  # type: ignore[arg-type]
            rate_limit_resources=parse_resource_flags(rate_limit_resource or []),
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = ServeSettings(
        core=core,
        workers=worker_count,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        http_address=http_address,
        grpc_address=grpc_address,
        metrics_address=metrics_address,
        allow_http=parse_bool(allow_http, "--allow-http"),
        allow_grpc=parse_bool(allow_grpc, "--allow-grpc"),
        allow_metrics=parse_bool(allow_metrics, "--allow-metrics"),
        http_restricted_api=list(http_restricted_api or []),
        grpc_restricted_protocol=list(grpc_restricted_protocol or []),
        http_header_forward_pattern=http_header_forward_pattern,
        grpc_header_forward_pattern=grpc_header_forward_pattern,
        access_log=False,  # requests are logged at --log-verbose 1 (repokit.core.service)
        reuse_http_port=parse_bool(reuse_http_port, "--reuse-http-port"),
        reuse_grpc_port=parse_bool(reuse_grpc_port, "--reuse-grpc-port"),
        grpc_use_ssl=parse_bool(grpc_use_ssl, "--grpc-use-ssl"),
        grpc_use_ssl_mutual=parse_bool(grpc_use_ssl_mutual, "--grpc-use-ssl-mutual"),
        grpc_server_cert=grpc_server_cert,
        grpc_server_key=grpc_server_key,
        grpc_root_cert=grpc_root_cert,
        grpc_keepalive_time=grpc_keepalive_time,
        grpc_keepalive_timeout=grpc_keepalive_timeout,
        grpc_keepalive_permit_without_calls=parse_bool(
            grpc_keepalive_permit_without_calls, "--grpc-keepalive-permit-without-calls"
        ),
        grpc_http2_max_pings_without_data=grpc_http2_max_pings_without_data,
        grpc_http2_min_recv_ping_interval_without_data=(
            grpc_http2_min_recv_ping_interval_without_data
        ),
        grpc_http2_max_ping_strikes=grpc_http2_max_ping_strikes,
        grpc_max_connection_age=grpc_max_connection_age,
        grpc_max_connection_age_grace=grpc_max_connection_age_grace,
        grpc_infer_response_compression_level=grpc_infer_response_compression_level,
        grpc_transport=grpc_transport,
        stop_on_load_failure=core.exit_on_error,
    )
    if grpc_infer_response_compression_level not in ("none", "low", "medium", "high"):
        raise typer.BadParameter(
            "--grpc-infer-response-compression-level expects none, low, medium or high, got "
            f"'{grpc_infer_response_compression_level}'"
        )
    if grpc_transport not in ("native", "grpcio"):
        raise typer.BadParameter(
            f"--grpc-transport expects native or grpcio, got '{grpc_transport}'"
        )
    if (settings.grpc_use_ssl or settings.grpc_use_ssl_mutual) and not (
        grpc_server_cert and grpc_server_key
    ):
        raise typer.BadParameter("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
    try:
        handler = server_log.install(log)
    except OSError as exc:
        raise typer.BadParameter(f"--log-file: cannot open '{log_file}': {exc}") from None
    try:
        notes = [
            *trace.notes,
            *response_cache_notes(response_cache_byte_size),
            *inert_flag_notes(given),
            *backend_config_notes(backends),
            *metrics_notes,
        ]
        code = _serve(settings, notes)
    finally:
        server_log.uninstall(handler)
    if code:
        raise typer.Exit(code)


def _serve(settings: Any, notes: list[str]) -> int:
    """Run the server until a signal; the exit code (1: it could not start)."""
    import logging

    from repokit.cli.serve_tables import models_table, options_table
    from repokit.cli.startup_status import model_load_error, startup_error
    from repokit.core.server_log import RAW
    from repokit.frontends.runner import ModelsFailedToLoad, ServerHandle, run_server

    log = logging.getLogger("repokit.cli.serve")
    errors = make_console(stderr=True)
    for note in notes:
        log.info(note)
    core = settings.core

    async def on_ready(handle: ServerHandle) -> None:
        log.info(models_table(handle.service.repository_index()), extra={RAW: True})
        extensions = list(handle.service.server_metadata()["extensions"])
        log.info(options_table(core, extensions), extra={RAW: True})
        failed = startup_error(core.model_control_mode, handle.service.repository_index())
        if failed:  # --exit-on-error false: tritonserver says so and serves on
            log.error("%s", failed)
        names = {
            "HTTP": "HTTPService",
            "gRPC": "GRPCInferenceService",
            "Metrics": "Metrics Service",
        }
        for kind, address in handle.addresses():
            log.info("Started %s at %s", names[kind], address)

    clean = True
    try:
        clean = _run(run_server(settings, ready_callback=on_ready))
    except KeyboardInterrupt:
        pass
    except ModelsFailedToLoad as exc:  # --exit-on-error: tritonserver opens no port then
        log.info(models_table(exc.index), extra={RAW: True})
        known = [f for f in exc.failures if f.partition(": ")[0] not in exc.unknown]
        if core.model_control_mode == "explicit" and known:  # it names the --load-model
            name = known[0].partition(": ")[0]
            # a failure Triton finds per version names the versions' states
            message = f"Invalid argument - {model_load_error(name, exc.index)}"
        else:
            message = "Internal - failed to load all models"
        print_error(errors, f"creating server: {message}")
        for line in exc.failures:
            errors.out(f"  {line}", highlight=False)
        return 1
    except (OSError, ValueError) as exc:
        print_error(errors, f"creating server: {exc}")
        return 1
    return 0 if clean else 1  # tritonserver exits with 1 when the exit timeout expired


def register(app: typer.Typer) -> None:
    from repokit.cli.option_abbreviations import getopt_abbreviations, long_option_names

    app.command(
        "serve",
        # tritonserver's getopt_long takes unambiguous prefixes of its long options
        context_settings={"token_normalize_func": getopt_abbreviations(long_option_names(serve))},
        epilog=examples(
            "repokit serve ./models",
            "repokit serve --model-repository ./models --http-port 0 --grpc-port 0",
            "repokit serve ./models --model-control-mode explicit --load-model simple",
            "repokit serve ./models --grpc-use-ssl true --grpc-server-cert c.pem \\",
            "    --grpc-server-key k.pem",
            "repokit serve --model-store=/models --log-format=ISO8601 --log-verbose=1",
        ),
    )(serve)
