"""Functions of the C library through ctypes, looked up in one place.

``libc()`` is the process's C library (errno kept for ``ctypes.get_errno``), or None where
it cannot be found (not Linux-like, no ``libc`` to load). ``libc_function`` gives one of its
functions with its argument and result types set, or None when the library lacks it (glibc
extensions such as ``mallopt`` and ``malloc_trim`` on another C library). Callers treat None
as "not available here" and carry on without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Sequence
from typing import Any


@functools.cache
def libc() -> ctypes.CDLL | None:
    if sys.platform == "win32":
        return None
    name = ctypes.util.find_library("c") or ("libc.so.6" if sys.platform == "linux" else None)
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


def libc_function(name: str, argtypes: Sequence[Any], restype: Any) -> Any | None:
    """The C library's function ``name`` with its types set, or None where it is missing."""
    library = libc()
    if library is None:
        return None
    try:
        function = getattr(library, name)
    except AttributeError:
        return None
    function.argtypes = list(argtypes)
    function.restype = restype
    return function
