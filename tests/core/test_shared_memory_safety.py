"""Client shared memory cannot crash the server or reach files outside it (issue 17, items 2
and 3).

A client may shrink its region after registering it: every access is checked against the
file's size at that moment and copied by the kernel (no mapping whose pages can vanish), so the
request gets a clear 400 and the server lives on. Keys are opened like glibc's ``shm_open``
(what Triton does): no symlinks, only regular files, one path component. The truncation cases
run in a child process so that a regression shows up as a failed test (SIGBUS) instead of
killing the test session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from repokit.core.shared_memory import SystemSharedMemory
from repokit.errors import Code, RepokitError
from repokit.protocol.types import SharedMemoryRef

TRUNCATION_CHILD = """
import json, os, sys
import numpy as np
from repokit.core.shared_memory import SystemSharedMemory
from repokit.errors import RepokitError
from repokit.protocol.types import SharedMemoryRef

root, size = sys.argv[1], int(sys.argv[2])
path = os.path.join(root, "x")
with open(path, "wb") as f:
    f.write(bytes(range(256)) * 16)
shm = SystemSharedMemory(True, root=root)
shm.register("r", "/x", 0, 4096)
before = shm.read(SharedMemoryRef("r", 0, 64)).tobytes() == bytes(range(64))
os.truncate(path, size)
answers = {"read_before": before}
for what, call in (
    ("read", lambda: shm.read(SharedMemoryRef("r", 4000, 64))),
    ("write", lambda: shm.write(SharedMemoryRef("r", 4000, 64), "OUT", b"z" * 64)),
):
    try:
        value = call()
        answers[what] = ["ok", bytes(value).hex() if value is not None else None]
    except RepokitError as exc:
        answers[what] = [exc.code.name, exc.message]
answers["size_after"] = os.stat(path).st_size
print(json.dumps(answers))
"""


def _run_child(root: Path, size: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRUNCATION_CHILD), str(root), str(size)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"child died ({done.returncode}): {done.stderr[-2000:]}"
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("size", [0, 100, 4001])
def test_truncated_region_is_refused_not_fatal(tmp_path: Path, size: int) -> None:
    answers = _run_child(tmp_path, size)
    assert answers["read_before"] is True
    expected = (
        f"shared memory region 'r' (key '/x') is {size} bytes now, too small for bytes "
        "[4000, 4064) of the request: the file was truncated after registration"
    )
    assert answers["read"] == ["INVALID_ARG", expected]
    assert answers["write"] == ["INVALID_ARG", expected]
    assert answers["size_after"] == size  # a refused write does not grow the file again


def test_region_grown_or_rewritten_is_read_at_access_time(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(b"\0" * 128)
    shm = SystemSharedMemory(True, root=str(tmp_path))
    shm.register("r", "/x", 64, 64)
    path.write_bytes(b"\1" * 64 + b"\2" * 64 + b"\3" * 64)  # rewritten in place, grown
    assert shm.read(SharedMemoryRef("r", 0, 64)).tobytes() == b"\2" * 64
    shm.write(SharedMemoryRef("r", 8, 4), "OUT", np.arange(2, dtype=np.int16).tobytes())
    assert path.read_bytes()[72:76] == b"\0\0\1\0"
    shm.close()


def _register_error(shm: SystemSharedMemory, key: str) -> tuple[Code, str]:
    with pytest.raises(RepokitError) as info:
        shm.register("r", key, 0, 16)
    return info.value.code, info.value.message


def test_symlinks_and_special_files_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "outside"
    secret.write_bytes(b"secret" * 100)
    root = tmp_path / "shm"
    root.mkdir()
    (root / "link").symlink_to(secret)
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    (root / "sub").mkdir()
    (root / "sub" / "file").write_bytes(b"\0" * 64)
    (root / "ok").write_bytes(b"\0" * 64)
    shm = SystemSharedMemory(True, root=str(root))
    for key in ("/link", "link", "//link", "/dir", "/fifo", "/sub/file", "/..", "/../outside",
                "..", "/", "", "/ok\0", "/o\0k"):  # fmt: skip
        assert _register_error(shm, key) == (
            Code.INTERNAL,
            f"Unable to open shared memory region: '{key}'",
        ), key
    assert shm.status() == []
    shm.register("fine", "/ok", 0, 64)  # a plain file in the root is still fine
    assert [r["key"] for r in shm.status()] == ["/ok"]
    shm.close()


def test_symlink_swapped_in_after_registration_is_not_followed(tmp_path: Path) -> None:
    """The region stays the file that was opened: replacing the name later changes nothing."""
    root = tmp_path / "shm"
    root.mkdir()
    secret = tmp_path / "outside"
    secret.write_bytes(b"S" * 64)
    (root / "k").write_bytes(b"\0" * 64)
    shm = SystemSharedMemory(True, root=str(root))
    shm.register("r", "/k", 0, 64)
    (root / "k").unlink()
    (root / "k").symlink_to(secret)
    shm.write(SharedMemoryRef("r", 0, 64), "OUT", b"w" * 64)
    assert secret.read_bytes() == b"S" * 64
    shm.close()


def test_regions_in_use_cannot_be_unregistered(tmp_path: Path) -> None:
    """As Triton: a region a request in flight reads or writes stays registered until the
    request is answered; unregistering all removes the others and names those in use."""
    (tmp_path / "x").write_bytes(bytes(256))
    shm = SystemSharedMemory(True, root=str(tmp_path))
    for name in ("c", "a", "b"):
        shm.register(name, "/x", 0, 64)
    held = shm.hold(("b", "c", "nope"))
    with pytest.raises(RepokitError) as error:
        shm.unregister("b")
    assert (error.value.code, error.value.message) == (
        Code.INTERNAL,
        "Cannot unregister shared memory region 'b', it is currently in use.",
    )
    with pytest.raises(RepokitError) as error:
        shm.unregister()
    assert (error.value.code, error.value.message) == (
        Code.INTERNAL,
        "Failed to unregister the following system shared memory regions: b ,c ,",
    )
    assert [r["name"] for r in shm.status()] == ["c", "b"]  # "a" went
    shm.release(held)
    shm.unregister("b")
    shm.unregister()
    assert shm.status() == []
