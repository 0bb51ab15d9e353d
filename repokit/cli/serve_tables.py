"""The tables tritonserver logs at startup (models, server options), drawn as it draws them."""

from __future__ import annotations

from typing import Any

from repokit.core.server_log import table
from repokit.core.settings import ServerSettings

_MODES = {"none": "MODE_NONE", "explicit": "MODE_EXPLICIT", "poll": "MODE_POLL"}


def models_table(index: list[dict[str, Any]]) -> str:
    """One row per model version: READY, or UNAVAILABLE with the reason. As tritonserver's,
    it leaves out the models nothing tried to load (explicit mode: those not named by
    --load-model), which the repository index lists without a state."""
    rows = []
    tried = [entry for entry in index if "state" in entry]
    for entry in sorted(tried, key=lambda e: (str(e.get("name")), str(e.get("version", "")))):
        state = str(entry.get("state", "UNKNOWN"))
        reason = entry.get("reason")
        status = f"{state}: {reason}" if reason else state
        rows.append((entry.get("name", ""), entry.get("version", ""), status))
    return table(("Model", "Version", "Status"), rows)


def options_table(settings: ServerSettings, extensions: list[str]) -> str:
    rows: list[tuple[str, Any]] = [
        ("server_id", settings.server_id),
        ("server_version", settings.server_version),
        ("server_extensions", " ".join(extensions)),
    ]
    rows += [(f"model_repository_path[{i}]", p) for i, p in enumerate(settings.repositories)]
    rows += [
        ("model_control_mode", _MODES[settings.model_control_mode]),
    ]
    if settings.model_control_mode == "explicit":  # tritonserver's set of --load-model names
        startup = sorted(set(settings.load_models))
        rows += [(f"startup_models_{i}", name) for i, name in enumerate(startup)]
    rows += [
        ("strict_model_config", int(settings.strict_model_config)),
        ("model_config_name", settings.model_config_name),
        ("rate_limit", "EXEC_COUNT" if settings.rate_limit == "execution_count" else "OFF"),
    ]
    rows += [
        (
            f"rate_limit_resource[{i}]",
            f'{{"name":"{r.name}", "count":{r.count} "device":{r.device}}}',
        )
        for i, r in enumerate(settings.rate_limit_resources)
    ]
    rows += [
        ("strict_readiness", int(settings.strict_readiness)),
        ("exit_timeout", f"{settings.exit_timeout_secs:g}"),
        ("cache_enabled", int(settings.response_cache is not None)),
    ]
    return table(("Option", "Value"), rows)
