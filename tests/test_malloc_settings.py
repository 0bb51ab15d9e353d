"""keep_freed_memory: tensor-sized buffers freed and allocated again reuse their pages instead of
being faulted in anew (minor page faults counted by the kernel, in a fresh process each)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# four 1 MiB buffers alive at once, written, freed, twenty times: the server's pattern with
# 1 MiB tensors (a message buffer, the tensor back from the instance, ...)
_PROGRAM = """
import resource, sys
import numpy as np
from repokit.malloc_settings import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def round_():
    buffers = [np.empty(1 << 20, dtype=np.uint8) for _ in range(4)]
    for b in buffers:
        b.fill(1)
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="needs glibc's mallopt")
def test_freed_buffers_are_reused_without_page_faults() -> None:
    pages = 20 * 4 * (1 << 20) // 4096
    default, kept = _faults("default"), _faults("keep")
    assert default > pages // 2, f"the default allocator faulted {default} pages in"
    assert kept < pages // 50, f"{kept} page faults for {pages} pages written"
