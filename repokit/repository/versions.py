"""Version folders as Triton reads them (core ``model_lifecycle.cc`` ``VersionsToLoad``).

Triton's quirks are kept on purpose so that repokit sees the same versions:

- ``warmup``, ``initial_state`` and ``configs`` are skipped silently;
- a name longer than one character that starts with ``0`` is skipped (``01``, ``007``), ``0`` is
  version 0;
- the rest goes through ``std::stoll``, which parses a leading numeric prefix: ``1abc`` is version
  1, ``-3`` is -3, ``+5`` is 5, `` 7`` is 7; a name without such a prefix is skipped;
- a prefix outside the int64 range makes ``stoll`` throw ``out_of_range``, which Triton does not
  catch.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from repokit.protocol.generated import model_config_pb2 as mc

SKIPPED_FOLDERS = frozenset({"warmup", "initial_state", "configs"})
_STOLL_PREFIX = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class VersionDirKind(enum.Enum):
    VERSION = "version"  # a clean decimal name such as "1" or "0"
    PREFIX_PARSED = "prefix-parsed"  # counted, but not a clean name ("1abc", "+5", "-3")
    SKIPPED_SPECIAL = "skipped-special"  # warmup / initial_state / configs
    LEADING_ZEROS = "leading-zeros"  # "01": skipped with a warning
    NOT_NUMERIC = "not-numeric"  # "abc": skipped with a warning
    OUT_OF_RANGE = "out-of-range"  # stoll throws out_of_range (Triton does not catch it)


@dataclass(frozen=True)
class VersionDir:
    name: str
    kind: VersionDirKind
    version: int | None = None  # set for VERSION and PREFIX_PARSED

    @property
    def counts(self) -> bool:
        """True when Triton counts this folder as an existing version."""
        return self.version is not None


def parse_version_dir(name: str) -> VersionDir:
    """Classify one subdirectory of a model directory the way Triton does."""
    if name in SKIPPED_FOLDERS:
        return VersionDir(name, VersionDirKind.SKIPPED_SPECIAL)
    if len(name) > 1 and name[0] == "0":
        return VersionDir(name, VersionDirKind.LEADING_ZEROS)
    match = _STOLL_PREFIX.match(name)
    if match is None:
        return VersionDir(name, VersionDirKind.NOT_NUMERIC)
    value = int(match.group(1))
    if not _INT64_MIN <= value <= _INT64_MAX:
        return VersionDir(name, VersionDirKind.OUT_OF_RANGE)
    clean = match.end() == len(name) and name == str(value) and value >= 0
    kind = VersionDirKind.VERSION if clean else VersionDirKind.PREFIX_PARSED
    return VersionDir(name, kind, value)


def existing_versions(subdirs: Iterable[str]) -> set[int]:
    return {v.version for v in map(parse_version_dir, subdirs) if v.version is not None}


@dataclass(frozen=True)
class VersionSelection:
    versions: list[int]  # ascending
    missing_specific: list[int]  # versions named by a `specific` policy without a folder


def select_versions(policy: mc.ModelVersionPolicy, existing: set[int]) -> VersionSelection:
    """Apply a version policy to the existing versions (an absent policy means latest 1)."""
    choice = policy.WhichOneof("policy_choice")
    if choice == "specific":
        wanted = list(policy.specific.versions)
        chosen = sorted({v for v in wanted if v in existing})
        missing = [v for v in dict.fromkeys(wanted) if v not in existing]
        return VersionSelection(chosen, missing)
    if choice == "all":
        return VersionSelection(sorted(existing), [])
    count = policy.latest.num_versions if choice == "latest" else 1
    newest = sorted(existing, reverse=True)[:count]
    return VersionSelection(sorted(newest), [])


def version_folder_name(version: int) -> str:
    """The folder a backend opens for ``version``: Triton formats it as an unsigned 64-bit
    number, so version -3 (from a folder named ``-3``) is looked up as 18446744073709551613."""
    return str(version % 2**64)
