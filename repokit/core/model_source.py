"""Read one model directory the way the server loads it: config, normalisation, versions.

The seam between the serving core and the repository/config modules: the ModelManager asks
``read_model`` for a model's normalised config and the versions its policy selects, and gets a
``ModelLoadError`` carrying Triton's reason text when the model cannot load. Config files are
found as Triton does (``configs/<name>.pbtxt`` with ``--model-config-name``, else
``config.pbtxt``); a load-API override replaces the file.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from repokit.config.parse import ConfigParseError, parse_file
from repokit.core.config_defaults import normalize_for_serving, validate_for_serving
from repokit.protocol.generated import model_config_pb2 as mc

_SKIPPED_VERSION_DIRS = frozenset({"warmup", "initial_state", "configs"})
_LEADING_INT = re.compile(r"^\s*([+-]?\d+)")


class ModelLoadError(Exception):
    """The model cannot load; ``reason`` is the text the repository index shows."""

    def __init__(self, reason: str, *, config_ok: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.config_ok = config_ok  # the config was fine; only the version policy found nothing


@dataclass(frozen=True)
class ModelDefinition:
    name: str
    directory: Path  # where the backend loads from (the model dir or a private copy)
    config: mc.ModelConfig  # normalised
    versions: tuple[int, ...]  # the versions the policy selects, ascending


def model_directories(repositories: list[Path]) -> dict[str, list[Path]]:
    """Every subdirectory of every repository (hidden ones too, as Triton), by name."""
    found: dict[str, list[Path]] = {}
    for repository in repositories:
        try:
            entries = sorted(os.scandir(repository), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir():
                found.setdefault(entry.name, []).append(Path(entry.path))
    return found


def fingerprint(directory: Path) -> str:
    """A digest of every file's path, size and mtime under ``directory`` (poll mode)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")  # written by python models
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def version_directories(model_dir: Path) -> dict[int, Path]:
    """Numeric version folders by Triton's rules (§5.1): prefix parsing, no leading zeros."""
    versions: dict[int, Path] = {}
    try:
        entries = list(os.scandir(model_dir))
    except OSError:
        return versions
    for entry in entries:
        name = entry.name
        if not entry.is_dir() or name in _SKIPPED_VERSION_DIRS:
            continue
        if len(name) > 1 and name.startswith("0"):
            continue
        match = _LEADING_INT.match(name)
        if match is None:
            continue
        versions.setdefault(int(match.group(1)), Path(entry.path))
    return versions


def select_versions(name: str, config: mc.ModelConfig, available: list[int]) -> list[int]:
    policy = config.version_policy
    kind = policy.WhichOneof("policy_choice")
    ordered = sorted(available)
    if kind == "all":
        chosen = ordered
    elif kind == "specific":
        wanted = set(policy.specific.versions)
        chosen = [v for v in ordered if v in wanted]
    else:
        count = policy.latest.num_versions if kind == "latest" else 1
        chosen = ordered[-count:] if count > 0 else []
    if not chosen:
        raise ModelLoadError(
            f"at least one version must be available under the version policy of model '{name}'",
            config_ok=True,
        )
    return chosen


def config_path(model_dir: Path, config_name: str) -> Path:
    if config_name:
        custom = model_dir / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / "config.pbtxt"


def read_model(
    name: str,
    directory: Path,
    *,
    override: mc.ModelConfig | None = None,
    config_name: str = "",
    strict: bool = False,
) -> ModelDefinition:
    """Read, normalise and validate ``directory``; ModelLoadError with Triton's reason."""
    if override is not None:
        config = mc.ModelConfig()
        config.CopyFrom(override)
    else:
        path = config_path(directory, config_name)
        if path.is_file():
            try:
                config = parse_file(path)
            except ConfigParseError as exc:
                where = f"{exc.line}:{exc.column}: " if exc.line else ""
                raise ModelLoadError(
                    f"failed to read text proto from {path}: {where}{exc.message}"
                ) from exc
            except OSError as exc:
                raise ModelLoadError(f"failed to open text file for read {path}: {exc}") from exc
        elif strict:
            raise ModelLoadError(
                f"failed to open text file for read {path}: No such file or directory"
            )
        else:
            config = mc.ModelConfig()
    available = version_directories(directory)
    normalize_for_serving(config, name, directory, available)
    problem = validate_for_serving(config, name, directory)
    if problem:
        raise ModelLoadError(problem)
    versions = select_versions(name, config, list(available))
    return ModelDefinition(name, directory, config, tuple(versions))
