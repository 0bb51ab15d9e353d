"""``repokit.lock.json``: what a compiled repository was built from, with what, and into what.

Per model: the hash of its source directory, the hash of the build options that affect it, the
hash of the compiled directory, its profiles, engine details and warmup files. A model whose
source hash and options hash match the lock, and whose compiled directory still hashes to the
recorded value, is up to date and is not rebuilt. The document is validated against
``schemas/compiled_manifest.schema.json`` when written and when read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from repokit.paths import schemas_dir

LOCK_FILE = "repokit.lock.json"
LOCK_FORMAT = "repokit-lock/1"
SCHEMA_FILE = "compiled_manifest.schema.json"
TIMING_CACHE_FILE = "repokit.timing.cache"
_TOOLS = ("repokit", "onnx", "onnxruntime", "polygraphy", "numpy", "protobuf")


class LockError(Exception):
    """The lock file exists but is unreadable or does not match its schema."""


def hash_tree(root: Path) -> str:
    """sha256 over every file below ``root``: relative paths and contents, in sorted order."""
    digest = hashlib.sha256()
    files: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        files.extend(Path(directory) / n for n in names)
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        relative = path.relative_to(root).as_posix()
        digest.update(relative.encode() + b"\0")
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` by its relative path."""
    out: dict[str, str] = {}
    for directory, _subdirs, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            out[path.relative_to(root).as_posix()] = hash_file(path)
    return dict(sorted(out.items()))


def hash_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def hash_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def tool_versions(tensorrt_version: str) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _TOOLS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["tensorrt"] = tensorrt_version or None
    return versions


def _validator() -> Any:
    schema = json.loads((schemas_dir() / SCHEMA_FILE).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def lock_problems(document: Any) -> list[str]:
    """Schema violations of a lock document, as "path: message" lines."""
    out = []
    for error in sorted(_validator().iter_errors(document), key=lambda e: list(e.absolute_path)):
        where = "$" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        )
        out.append(f"{where}: {error.message}")
    return out


def read_lock(output: Path) -> dict[str, Any] | None:
    """The lock of a compiled repository, None when there is none; LockError when broken."""
    path = output / LOCK_FILE
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LockError(f"{path} cannot be read: {exc}") from None
    problems = lock_problems(document)
    if problems:
        raise LockError(f"{path} does not match {SCHEMA_FILE}: {problems[0]}")
    assert isinstance(document, dict)
    return document


def write_lock(output: Path, document: dict[str, Any]) -> Path:
    problems = lock_problems(document)
    if problems:  # a bug in build, not a user error
        raise ValueError(f"refusing to write an invalid lock file: {'; '.join(problems[:3])}")
    path = output / LOCK_FILE
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def new_lock(
    source: Path, output: Path, in_place: bool, options: dict[str, Any], tensorrt_version: str
) -> dict[str, Any]:
    return {
        "format": LOCK_FORMAT,
        "source": str(source),
        "output": str(output),
        "in_place": in_place,
        "tools": tool_versions(tensorrt_version),
        "options": options,
        "models": {},
    }
