"""Why a compiled model is out of date: the reasons ``repokit build --check`` prints (and a
build acts on). None means the lock entry, the options, the tools and the compiled copy all
still match.

The reasons name what changed: source files (added, removed, modified), build options (by their
flag), tool versions (onnxruntime, TensorRT, ...), or the compiled copy itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repokit.build.manifest import hash_tree

# fingerprint key -> the option a user types
_OPTION_FLAGS = {
    "profile": "--profile",
    "profiles": "--profiles",
    "split_at_preferred": "--split-at-preferred",
    "shapes": "--shape",
    "to": "--to",
    "engine": "--engine",
    "verify": "--verify",
    "workspace_mb": "--workspace",
    "fp16": "--fp16",
    "warmup_data": "--warmup-data",
    "seed": "the warmup seed",
    "default_max_batch_size": "the default max_batch_size",
    "sample_data": "--sample-data (its contents)",
    "tensorrt": "the TensorRT version",
}
_SHOWN = 4  # names listed before "and N more"


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _show(value: Any) -> str:
    return "(none)" if value in (None, "", []) else str(value)


def option_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            flag = _OPTION_FLAGS.get(key, key)
            out.append(f"{flag} {_show(old.get(key))} -> {_show(new.get(key))}")
    return out


def tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [
        f"{name} {_show(old.get(name))} -> {_show(new.get(name))}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]


def source_changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    changed = sorted(p for p in set(old) & set(new) if old[p] != new[p])
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    out = []
    if changed:
        out.append(f"modified {_listed(changed)}")
    if added:
        out.append(f"added {_listed(added)}")
    if removed:
        out.append(f"removed {_listed(removed)}")
    return out


def out_of_date_reason(
    entry: dict[str, Any] | None,
    source_hash: str,
    source_files: dict[str, str],
    compiled: Path,
    option_diff: list[str],
    tool_diff: list[str],
) -> str | None:
    """Why the model must be rebuilt (every reason found, "; "-separated), or None when it is
    up to date."""
    if entry is None:
        return "not built yet (no entry in the lock file)"
    reasons = []
    if tool_diff:
        reasons.append(f"tool versions changed: {'; '.join(tool_diff)}")
    if option_diff:
        reasons.append(f"build options changed: {'; '.join(option_diff)}")
    if not compiled.is_dir():
        reasons.append("the compiled copy is missing from the output")
    elif hash_tree(compiled) != entry.get("output_hash"):
        reasons.append("the compiled copy was modified after the build")
    if source_hash not in (entry.get("source_hash"), entry.get("output_hash")):
        recorded = entry.get("source_files")
        changes = source_changes(recorded, source_files) if isinstance(recorded, dict) else []
        reasons.append(
            f"source files changed: {'; '.join(changes)}"
            if changes
            else "the source directory changed since the build"
        )
    return "; ".join(reasons) or None
