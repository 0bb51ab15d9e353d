"""What tritonserver 2.51 says about models that failed to load while it started.

With ``--exit-on-error false`` it starts anyway and logs one error after its options table:
``Internal: failed to load all models`` (control modes none and poll), or, for the
``--load-model`` names of explicit mode, ``Invalid argument: `` then each failed model's load
error (``load failed for model 'm': version 1 is at UNAVAILABLE state: <reason>;`` and a line
break). With ``--exit-on-error`` (the default) the same failure stops the start:
``creating server: Invalid argument - load failed for model 'm': ...``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ALL_MODELS = "failed to load all models"


def failed_model_names(index: Iterable[Mapping[str, Any]]) -> list[str]:
    """The models of the repository index with a version (or the model) that failed."""
    names = [
        str(e["name"])
        for e in index
        if e.get("state") == "UNAVAILABLE" and e.get("reason", "unloaded") != "unloaded"
    ]
    return list(dict.fromkeys(names))


def model_load_error(name: str, index: Iterable[Mapping[str, Any]]) -> str:
    """The load error of one failed model as Triton words it (without the trailing line
    break): each failed version with its state and reason, or the model's own reason."""
    rows = [e for e in index if e.get("name") == name]
    versions = [e for e in rows if e.get("version")]
    if versions and all(e.get("state") == "UNAVAILABLE" for e in versions):
        states = "".join(
            f"version {e['version']} is at UNAVAILABLE state: {e.get('reason', '')};"
            for e in versions
        )
        return f"load failed for model '{name}': {states}"
    reason = next((str(e.get("reason", "")) for e in rows if e.get("reason")), "")
    return f"load failed for model '{name}': {reason}"


def startup_error(mode: str, index: Iterable[Mapping[str, Any]]) -> str:
    """The error tritonserver logs when models failed while it started ("" when none did)."""
    entries = list(index)
    failed = failed_model_names(entries)
    if not failed:
        return ""
    if mode != "explicit":
        return f"Internal: {ALL_MODELS}"
    return "Invalid argument: " + "".join(f"{model_load_error(n, entries)}\n" for n in failed)
