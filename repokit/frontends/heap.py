"""Give the memory of large requests back to the operating system once they are answered.

Measured (six 100 MiB ModelInfer requests to an unknown model, ``repokit serve``): the server
went from 110 to 1,439 MB and stayed there. Two things kept it:

- ``context.abort`` raises inside the handler; grpc.aio keeps the exception, whose traceback
  holds the handler's frame and with it the request's bytes, in a reference cycle that only
  the cyclic garbage collector frees (a bare grpc.aio server: 879 MB kept, 479 MB after
  ``gc.collect()``). ModelInfer therefore answers errors with ``set_code``/``set_details``
  instead (:mod:`repokit.frontends.grpc.servicer`).
- glibc's malloc keeps freed memory of the threads that allocated it (grpc's threads receive
  the message) for reuse instead of returning it (the bare server: 270 MB kept after the
  handler returned normally, 135 MB after ``malloc_trim(0)``).

:class:`HeapTrimmer` calls ``malloc_trim(0)`` in a worker thread shortly after a request of at
least ``threshold`` bytes was answered, at most one at a time (a trim walks the heap: a few
milliseconds). Where the C library has no ``malloc_trim`` (not glibc) it does nothing.

Only the grpc.aio transport trims. The native one (:mod:`repokit.frontends.grpc.h2`) receives
a large message into one buffer allocated on the event loop's thread, which the next message
reuses or, past glibc's mapping threshold, is unmapped when freed: forty 16-31 MiB requests at
four clients left its RSS within 5 MB of the trimmed server's, while a trim after every 16 MiB
request cost it about a sixth of its CPU per request (the memory given back is faulted in
again by the next request; ``benchmarks/README.md``).
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Callable

from repokit.libc import libc_function

TRIM_THRESHOLD_BYTES = 16 << 20  # requests at least this large trigger a trim
TRIM_DELAY_S = 0.05  # let the request's buffers go first


def _malloc_trim() -> Callable[[int], int] | None:
    trim: Callable[[int], int] | None = libc_function(
        "malloc_trim", (ctypes.c_size_t,), ctypes.c_int
    )
    return trim


class HeapTrimmer:
    def __init__(self, threshold: int = TRIM_THRESHOLD_BYTES) -> None:
        self.threshold = threshold
        self._trim = _malloc_trim()
        self._pending = False
        self.trims = 0  # how many ran (tests, diagnostics)

    @property
    def available(self) -> bool:
        return self._trim is not None

    def after(self, size: int) -> None:
        """A request of ``size`` bytes is being answered: trim soon if it was large."""
        if size < self.threshold or self._pending or self._trim is None:
            return
        self._pending = True
        asyncio.get_running_loop().call_later(TRIM_DELAY_S, self._start)

    def _start(self) -> None:
        task = asyncio.ensure_future(asyncio.to_thread(self._run))
        task.add_done_callback(lambda _: None)

    def _run(self) -> None:
        self._pending = False
        trim = self._trim
        if trim is not None:
            trim(0)
            self.trims += 1
