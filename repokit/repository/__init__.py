"""The on-disk model repository: model directories, version folders, backends and files.

Public API (reused by ``validate`` and ``serve``)::

    scan_repository(root) -> list[ModelDir]
    scan_model_dir(path) -> ModelDir
    versions_to_load(config, model_dir) -> list[int]
    resolve_backend(config, model_dir) -> ModelConfig   (Triton's AutoCompleteBackendFields)
"""

from __future__ import annotations

from repokit.protocol.generated import model_config_pb2 as mc
from repokit.repository.backends import (
    ModelArtifact,
    autocomplete_backend_fields,
    expected_artifact,
)
from repokit.repository.layout import (
    ModelDir,
    list_model_names,
    looks_like_model_dir,
    scan_model_dir,
    scan_repository,
)
from repokit.repository.versions import (
    VersionDir,
    VersionDirKind,
    parse_version_dir,
    select_versions,
    version_folder_name,
)


def versions_to_load(config: mc.ModelConfig, model_dir: ModelDir) -> list[int]:
    """The versions Triton loads for ``config`` (ascending); [] means the load fails."""
    return select_versions(config.version_policy, model_dir.existing_versions).versions


def resolve_backend(config: mc.ModelConfig, model_dir: ModelDir) -> mc.ModelConfig:
    """A copy of ``config`` with name/platform/backend/default_model_filename filled in the way
    Triton does; raises ConfigError when the backend cannot be determined."""
    resolved = mc.ModelConfig()
    resolved.CopyFrom(config)
    autocomplete_backend_fields(resolved, model_dir.name, model_dir.path, model_dir.subdirs)
    return resolved


__all__ = [
    "ModelArtifact",
    "ModelDir",
    "VersionDir",
    "VersionDirKind",
    "autocomplete_backend_fields",
    "expected_artifact",
    "list_model_names",
    "looks_like_model_dir",
    "parse_version_dir",
    "resolve_backend",
    "scan_model_dir",
    "scan_repository",
    "select_versions",
    "version_folder_name",
    "versions_to_load",
]
