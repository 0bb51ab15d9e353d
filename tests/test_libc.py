"""repokit.libc: the C library's functions, or None where they are missing."""

from __future__ import annotations

import ctypes
import sys

import pytest

from repokit.libc import libc, libc_function


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C library of Linux")
def test_a_present_function_is_typed_and_callable() -> None:
    getpid = libc_function("getpid", (), ctypes.c_int)
    assert getpid is not None
    import os

    assert getpid() == os.getpid()
    assert getpid.restype is ctypes.c_int


def test_a_missing_function_is_none() -> None:
    if libc() is None:
        pytest.skip("no C library to load on this platform")
    assert libc_function("no_such_function_in_any_libc", (), ctypes.c_int) is None


def test_the_library_is_loaded_once() -> None:
    assert libc() is libc()
