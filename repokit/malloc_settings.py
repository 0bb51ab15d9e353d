"""glibc's malloc keeps the memory of freed tensors for the next request.

By default glibc serves an allocation of 128 KiB or more with its own ``mmap`` and gives it
back to the system when freed, and raises that threshold only up to the largest block freed
so far, trimming the top of the heap past twice that. A server passing 1 MiB tensors then
gets fresh pages from the kernel for most of every request's buffers (the message it
receives, the tensor coming back from the instance process): the kernel zero-fills each page
on first touch, one page fault per 4 KiB. On a 2-core VM that was the largest single cost of a
1 MiB request: about 350 faults per request in the server and 80-100 in the python instance
process, and with the thresholds below none (``large_tensors_vs_triton.py``'s workloads,
repokit alone: CPU per request of the process tree 2.4-2.8 ms -> 1.2-1.4 ms over HTTP and
2.8-2.9 -> 1.8-1.9 ms over gRPC; figures in ``benchmarks/README.md``).

:func:`keep_freed_memory` sets the thresholds once per process (the server's and each python
instance's): blocks below :data:`MMAP_THRESHOLD` (glibc's largest allowed, 32 MiB) come from
the heap, and freed memory at its top goes back only past :data:`TRIM_THRESHOLD`. Larger
tensors are mapped and unmapped as before (the memory of a 64 MiB request goes back at once,
``tests/limits``). The price is that a process keeps up to :data:`TRIM_THRESHOLD` of freed
heap after a burst of large requests, for the next ones. Where the C library is not glibc
(no ``mallopt``, or one that ignores these) nothing changes.
"""

from __future__ import annotations

import ctypes

from repokit.libc import libc_function

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Set this process's malloc thresholds; whether the C library took both."""
    mallopt = libc_function("mallopt", (ctypes.c_int, ctypes.c_int), ctypes.c_int)
    if mallopt is None:
        return False
    mapped = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trimmed = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return bool(mapped and trimmed)
