"""Where bundled data lives: in a source checkout, or inside an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    source = _PACKAGE.parent / name
    if source.is_dir():
        return source
    return _PACKAGE / "_bundled" / name


def sample_repos_dir() -> Path:
    return _bundled("sample_repos")


def default_sample_repository() -> Path:
    """The valid sample repository that ``repokit serve`` serves by default."""
    return sample_repos_dir() / "models"


def schemas_dir() -> Path:
    return _bundled("schemas")


def protos_dir() -> Path:
    return _bundled("protos")
