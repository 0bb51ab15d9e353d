"""Files of Triton's repositories, taken from their git dirs at run time (never committed)."""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path


def extract(git_dir: Path, ref: str, paths: Sequence[str], into: Path) -> None:
    """``paths`` of ``ref`` in the repository at ``git_dir`` (a bare git dir or a clone),
    written below ``into`` as they are in the tree (``git archive``)."""
    archive = subprocess.run(
        ["git", "-C", str(git_dir), "archive", "--format=tar", ref, *paths],
        check=True,
        capture_output=True,
    )
    tar_path = into / "archive.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    tar_path.unlink()
