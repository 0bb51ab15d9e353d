"""The v1 ``ServerStatus`` built from the service: readiness, uptime, and per model its config
and per version its ready state and statistics.

Statistics come from the same counters as the v2 statistics extension (one set per model
version, shared by both APIs). v1 keyed ``infer_stats`` by batch size; v2 keeps per-batch-size
figures only for executions, so each ``infer_stats[b]`` carries the executions of batch size
``b`` (``success`` and ``compute``), and the request-level ``failed`` and ``queue`` totals,
which v2 does not split by batch size, are reported under the key 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repokit.core.service import InferenceService
from repokit.errors import RepokitError, not_found
from repokit.frontends.v1.request_status import SERVER_ID
from repokit.protocol.generated.v1 import server_status_pb2 as ss

_STATES = {
    "READY": ss.MODEL_READY,
    "UNAVAILABLE": ss.MODEL_UNAVAILABLE,
    "LOADING": ss.MODEL_LOADING,
    "UNLOADING": ss.MODEL_UNLOADING,
}


def _duration(stats: Mapping[str, Any]) -> ss.StatDuration:
    return ss.StatDuration(count=int(stats["count"]), total_time_ns=int(stats["ns"]))


def _sum(*items: Mapping[str, Any]) -> ss.StatDuration:
    return ss.StatDuration(
        count=max(int(i["count"]) for i in items), total_time_ns=sum(int(i["ns"]) for i in items)
    )


def _fill_statistics(status: ss.ModelVersionStatus, stats: Mapping[str, Any]) -> None:
    status.model_execution_count = int(stats["execution_count"])
    status.model_inference_count = int(stats["inference_count"])
    status.last_inference_timestamp_milliseconds = int(stats["last_inference"])
    totals = stats["inference_stats"]
    if totals["fail"]["count"]:
        status.infer_stats[0].failed.CopyFrom(_duration(totals["fail"]))
    if totals["queue"]["count"]:
        status.infer_stats[0].queue.CopyFrom(_duration(totals["queue"]))
    for batch in stats["batch_stats"]:
        entry = status.infer_stats[int(batch["batch_size"])]
        entry.compute.CopyFrom(
            _sum(batch["compute_input"], batch["compute_infer"], batch["compute_output"])
        )
        entry.success.CopyFrom(entry.compute)


def _model_status(service: InferenceService, name: str, entries: list[dict[str, Any]]) -> Any:
    model = ss.ModelStatus()
    try:
        model.config.CopyFrom(service.model_config(name))
    except RepokitError:
        model.config.name = name  # no READY version: the config is not loaded
    try:
        stats = {int(s["version"]): s for s in service.model_statistics(name)["model_stats"]}
    except RepokitError:
        stats = {}
    for entry in entries:
        if "version" not in entry:
            continue
        version = model.version_status[int(entry["version"])]
        version.ready_state = _STATES.get(entry.get("state", ""), ss.MODEL_UNKNOWN)
        if entry.get("reason"):
            version.ready_state_reason.message = entry["reason"]
        if int(entry["version"]) in stats:
            _fill_statistics(version, stats[int(entry["version"])])
    return model


def build_server_status(
    service: InferenceService, model: str, uptime_ns: int, request_stats: Mapping[str, Any]
) -> ss.ServerStatus:
    """The ServerStatus for every model, or just ``model`` (NOT_FOUND when unknown)."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for entry in service.repository_index():
        by_model.setdefault(entry["name"], []).append(entry)
    if model and model not in by_model:
        raise not_found(f"no status available for unknown model '{model}'")
    try:  # readiness of the models is in model_status; the server itself is up once live
        state = ss.SERVER_READY if service.server_live() else ss.SERVER_INITIALIZING
    except RepokitError:  # exiting
        state = ss.SERVER_EXITING
    status = ss.ServerStatus(
        id=SERVER_ID,
        version=service.settings.server_version,
        ready_state=state,
        uptime_ns=uptime_ns,
    )
    for name in [model] if model else sorted(by_model):
        status.model_status[name].CopyFrom(_model_status(service, name, by_model[name]))
    for field_name, duration in request_stats.items():
        getattr(status, field_name).success.CopyFrom(duration)
    return status
