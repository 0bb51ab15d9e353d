"""tritonserver 2.51 flags that ``repokit serve`` accepts but that mean nothing on this server
(GPU memory, caches, other frontends, ...), and the startup tables tritonserver logs.

A launch line written for tritonserver must run unchanged: each flag below is accepted with
its tritonserver value syntax, and each one given is logged once with why it has no effect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from repokit.core.latency_summary import parse_quantiles
from repokit.core.settings import MetricsSettings

# flag -> why it has no effect here (the README's table says the same)
INERT_FLAGS: dict[str, str] = {
    "--enable-peer-access": "no GPUs are used",
    "--reuse-http-port": "",  # honoured: SO_REUSEPORT on the HTTP socket (not inert)
    "--http-thread-count": "HTTP requests are served on the server's event loop",
    "--grpc-infer-allocation-pool-size": "gRPC messages are not pooled",
    "--allow-sagemaker": "there is no SageMaker endpoint",
    "--sagemaker-port": "there is no SageMaker endpoint",
    "--sagemaker-safe-port-range": "there is no SageMaker endpoint",
    "--sagemaker-thread-count": "there is no SageMaker endpoint",
    "--allow-vertex-ai": "there is no Vertex AI endpoint",
    "--vertex-ai-port": "there is no Vertex AI endpoint",
    "--vertex-ai-thread-count": "there is no Vertex AI endpoint",
    "--vertex-ai-default-model": "there is no Vertex AI endpoint",
    "--allow-gpu-metrics": "no GPUs are used",
    "--backend-directory": "backends are built in",
    "--repoagent-directory": "repository agents are not supported",
    "--cache-directory": "the local response cache is built in",
    "--pinned-memory-pool-byte-size": "no GPUs are used",
    "--cuda-memory-pool-byte-size": "no GPUs are used",
    "--cuda-virtual-address-size": "no GPUs are used",
    "--min-supported-compute-capability": "no GPUs are used",
    "--buffer-manager-thread-count": "tensors are not copied between devices",
    "--host-policy": "instances are not pinned to NUMA nodes or cores",
    "--model-load-gpu-limit": "no GPUs are used",
}

# python backend settings of --backend-config python,<setting>=<value> that mean nothing here
INERT_PYTHON_SETTINGS: dict[str, str] = {
    "shm-default-byte-size": "tensors travel over a socket, not a shared-memory region",
    "shm-growth-byte-size": "tensors travel over a socket, not a shared-memory region",
    "shm-region-prefix-name": "tensors travel over a socket, not a shared-memory region",
    "stub-timeout-seconds": "",  # honoured (see repokit.backends.python.backend)
}

# settings of --backend-config [onnxruntime,]<setting>=<value> the onnxruntime backend uses
HONOURED_SETTINGS = frozenset({"default-max-batch-size"})


def parse_metrics_config(
    specs: Iterable[str], allow_cpu: bool, interval_ms: float
) -> tuple[MetricsSettings, list[str]]:
    """``--metrics-config <setting>=<value>`` (summary_latencies, counter_latencies,
    summary_quantiles) with the CPU flags; the notes for settings without effect here."""
    settings = MetricsSettings(allow_cpu_metrics=allow_cpu, interval_ms=interval_ms)
    notes: list[str] = []
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            raise ValueError(f"--metrics-config option format is '<setting>=<value>'. Got {spec}")
        if key in ("summary_latencies", "counter_latencies"):
            lowered = value.strip().lower()
            if lowered not in ("true", "false", "1", "0"):
                raise ValueError(f"--metrics-config {key} expects true or false, got '{value}'")
            setattr(settings, key, lowered in ("true", "1"))
        elif key == "summary_quantiles":
            settings.summary_quantiles = parse_quantiles(value)
        else:
            notes.append(f"--metrics-config {key} has no effect on this server")
    return settings, notes


def inert_flag_notes(given: dict[str, Any]) -> list[str]:
    """One line per inert flag given (value not None), in the order of the table."""
    notes = []
    for flag, why in INERT_FLAGS.items():
        value = given.get(flag)
        if why and value is not None and value != []:
            notes.append(f"{flag} has no effect on this server: {why}")
    return notes


def strict_model_config_warnings(strict: bool | None, disable_auto_complete: bool) -> list[str]:
    """tritonserver's stderr lines for the deprecated ``--strict-model-config`` (given: not
    None), and for ``--disable-auto-complete-config`` overriding it when it said false."""
    if strict is None:
        return []
    warnings = [
        "Warning: '--strict-model-config' has been deprecated! Please use "
        "'--disable-auto-complete-config' instead."
    ]
    if disable_auto_complete and not strict:
        warnings.append(
            "Warning: Overriding deprecated '--strict-model-config' from False to True in favor "
            "of '--disable-auto-complete-config'!"
        )
    return warnings


def response_cache_notes(byte_size: str | None) -> list[str]:
    """tritonserver's deprecation warning for ``--response-cache-byte-size``."""
    if byte_size is None:
        return []
    return [
        "'--response-cache-byte-size' has been deprecated! This will default to the 'local' "
        "cache implementation with the provided byte size for its config. Please use "
        "'--cache-config' instead. The equivalent --cache-config CLI args would be: "
        f"'--cache-config=local,size={byte_size.strip()}'"
    ]


def parse_backend_config(specs: Iterable[str]) -> dict[str, dict[str, str]]:
    """``--backend-config <backend>,<setting>=<value>`` (or ``<setting>=<value>`` for every
    backend, kept under ""), as tritonserver parses it: the backend name ends at the first
    comma, the setting at the first ``=`` after it; an empty backend name (a leading comma),
    setting or value is refused with tritonserver's message."""
    parsed: dict[str, dict[str, str]] = {}
    for spec in specs:
        comma = spec.find(",")
        if comma == 0:
            raise ValueError(
                "No backend specified. --backend-config option format is <backend name>,"
                f"<setting>=<value> or <setting>=<value>. Got {spec}"
            )
        equals = spec.find("=", comma + 1)
        setting, value = spec[comma + 1 : equals], spec[equals + 1 :]
        if equals < 0 or not setting or not value:
            raise ValueError(
                f"--backend-config option format is '<backend name>,<setting>=<value>'. Got {spec}"
            )
        backend = spec[:comma] if comma > 0 else ""
        parsed.setdefault(backend, {})[setting] = value
    return parsed


def backend_config_notes(config: dict[str, dict[str, str]]) -> list[str]:
    notes = []
    for setting in config.get("python", {}):
        why = INERT_PYTHON_SETTINGS.get(setting)
        if why:
            notes.append(f"--backend-config python,{setting} has no effect on this server: {why}")
    for backend, settings in config.items():
        if backend == "python":
            continue
        for setting in settings:
            if setting in HONOURED_SETTINGS and backend in ("", "onnxruntime"):
                continue
            where = f"{backend},{setting}" if backend else setting
            notes.append(f"--backend-config {where} has no effect on this server")
    return notes
