"""Scanning a model repository on disk: every subdirectory is a model (hidden ones included, as
in Triton's ``GetDirectorySubdirs``), files at the root are ignored.

One ``os.scandir`` per model directory; version folders are classified once, here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from repokit.repository.versions import VersionDir, parse_version_dir

CONFIG_FILENAME = "config.pbtxt"
CONFIGS_FOLDER = "configs"


@dataclass
class ModelDir:
    """One model directory and what Triton looks at in it."""

    name: str
    path: Path
    subdirs: list[str] = field(default_factory=list)  # sorted (byte order, like std::set)
    files: list[str] = field(default_factory=list)  # sorted
    version_dirs: list[VersionDir] = field(default_factory=list)  # one per subdir, same order
    readable: bool = True

    @property
    def hidden(self) -> bool:
        return self.name.startswith(".")

    def config_path(self, model_config_name: str = "") -> Path:
        """``configs/<name>.pbtxt`` when --model-config-name is set and that file exists,
        else ``config.pbtxt`` (Triton's ``GetModelConfigFullPath``)."""
        if model_config_name:
            custom = self.path / CONFIGS_FOLDER / f"{model_config_name}.pbtxt"
            if custom.is_file():
                return custom
        return self.path / CONFIG_FILENAME

    @property
    def existing_versions(self) -> set[int]:
        return {v.version for v in self.version_dirs if v.version is not None}


def scan_model_dir(path: Path, name: str | None = None) -> ModelDir:
    model = ModelDir(name=name if name is not None else path.name, path=path)
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                (model.subdirs if entry.is_dir() else model.files).append(entry.name)
    except OSError:
        model.readable = False
    model.subdirs.sort()
    model.files.sort()
    model.version_dirs = [parse_version_dir(d) for d in model.subdirs]
    return model


def list_model_names(root: Path) -> list[str]:
    """Names of the model directories of a repository (raises OSError if unreadable)."""
    with os.scandir(root) as entries:
        return sorted(e.name for e in entries if e.is_dir())


def scan_repository(root: Path) -> list[ModelDir]:
    """Every model directory of ``root``, sorted by name; raises OSError if ``root`` is
    unreadable."""
    return [scan_model_dir(root / name, name) for name in list_model_names(root)]


def looks_like_model_dir(path: Path) -> bool:
    """A directory holding config.pbtxt or a numeric version folder is a model, not a
    repository (used to accept a single model directory on the command line)."""
    if (path / CONFIG_FILENAME).is_file():
        return True
    try:
        with os.scandir(path) as entries:
            return any(e.is_dir() and e.name.isdigit() for e in entries)
    except OSError:
        return False
