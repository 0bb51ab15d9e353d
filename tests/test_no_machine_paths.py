"""The repository stands on its own: no tracked file names a path of one particular machine (a
home folder, a checkout's parent, a scratch file under the temp folder), since nothing outside
the repository may be needed and such a path means nothing on another machine.

System paths (``/dev/shm``, ``/proc``, ``/usr/bin/env``), URL paths (``/v2/...``), one-letter
placeholders used as test input (``/tmp/x``) and KServe's model folder inside a container (the
same in every pod: ``repokit deploy kserve`` writes it) are not machine paths.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Written with character classes so that this file does not match itself.
_START = r"(?<![\w.~/-])"  # a path starts the token (not the middle of a URL or a relative path)
MACHINE_PATH = re.compile(
    _START
    + r"(?:/w[o]rk/|/r[o]ot/|/h[o]me/[\w.-]+|/U[s]ers/[\w.-]+|/m[n]t/|/s[c]ratch/"
    + r"|/t[m]p/[\w-]{2,}|/v[a]r/tmp/[\w-]{2,}|[A-Za-z]:\\U[s]ers\\)"
)
KSERVE_MODEL_DIR = re.compile(r"/m[n]t/models\b")  # inside the container, set by KServe
SKIPPED_SUFFIXES = (".onnx", ".plan", ".png", ".bin", ".pb", ".npy", ".so")


def tracked_files() -> list[Path]:
    """What git tracks (the files a clone gets); a tree without git (an unpacked sdist) is
    walked instead."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        ignored = {".git", ".venv", ".nox", "__pycache__", ".mypy_cache", ".ruff_cache"}
        return [
            path
            for path in ROOT.rglob("*")
            if path.is_file() and not ignored.intersection(path.relative_to(ROOT).parts)
        ]
    return [ROOT / name for name in out.decode().split("\0") if name]


def machine_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) of every machine path in ``text``."""
    return [
        (number, match.group(0))
        for number, line in enumerate(text.splitlines(), 1)
        for match in MACHINE_PATH.finditer(line)
        if not KSERVE_MODEL_DIR.match(line, match.start())
    ]


def test_no_tracked_file_names_a_machine_path() -> None:
    files = tracked_files()
    assert len(files) > 100, "the repository's files were not found"
    found: list[str] = []
    for path in files:
        if path.suffix in SKIPPED_SUFFIXES or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue  # binary
        for number, hit in machine_paths(data.decode("utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{number}: {hit}")
    assert not found, "absolute paths of one machine in the repository:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "script = Path('/" + "work/shared/tools/triton-reference.sh')",
        'SHARED_VENV = Path("/' + 'tmp/triton-reference-venv")',
        "measured with (``/" + "tmp/prof_core.py``)",
        "see /" + "root/.cache/repokit",
        "cd /" + "home/alice/src/repokit",
        "open /" + "Users/bob/models",
        "LD_LIBRARY_PATH=/lib:/" + "root/lib",
        "mount /" + "mnt/data/models",
    ],
)
def test_machine_paths_are_found(line: str) -> None:
    assert machine_paths(line), line


@pytest.mark.parametrize(
    "line",
    [
        'Case("logging_file", "POST", "/v2/logging", _json({"log_file": "/tmp/x"}))',
        '["file:../x.py", "file:1/../../x.py", "file:/tmp/x.py"]',
        "shared memory under /dev/shm/triton_abc",
        "GET /v2/models/add_sub/ready",
        "#!/usr/bin/env bash",
        "https://example.com/home/work/x",
        "mounted at the model's folder, e.g. models/work/1",
        "Triton's default cache folder /opt/tritonserver/caches",
        "the user's cache folder, ~/.cache/repokit",
        "--model-repository=/" + "mnt/models (KServe's storage initializer)",
    ],
)
def test_other_paths_are_not_machine_paths(line: str) -> None:
    assert not machine_paths(line), line
