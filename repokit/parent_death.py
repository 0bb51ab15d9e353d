"""Child processes that die with their parent, even when the parent is killed (SIGKILL).

Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) is sent to a process when the thread
that started it ends: with its process (whatever killed it), or on its own. So a child must be
started from a thread that lives as long as its process: the main thread, or here a spawner
thread of its own (:func:`popen_tied` hands the start to it when called from any other thread,
so a server started from a worker thread of a pool does not die with that worker).

* :func:`popen_tied`: ``subprocess.Popen`` for programs we do not control (tritonserver, a
  ``repokit serve`` started by a tool): the signal is set between fork and exec (it survives
  the exec), and a child whose parent already died meanwhile exits at once.
* :func:`tie_to_parent`: called first thing by a Python child we start ourselves (repokit's
  model instance processes), which keeps ``subprocess``'s fast start (no ``preexec_fn``).

Elsewhere than on Linux both do nothing more than ``subprocess.Popen`` / nothing.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return function


def tie_to_parent(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Have this process get ``sig`` when the thread that started it ends; exit at once when
    the parent (``parent_pid``) is gone already. False where the system cannot do this."""
    prctl = _prctl()
    if prctl is None or prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent_pid:  # it died before the signal was set
        os._exit(1)
    return True


class _Spawner:
    """One thread, alive as long as the process, that starts the tied children of the other
    threads (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, start: Callable[[], subprocess.Popen[Any]]) -> subprocess.Popen[Any]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="spawner", daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[Any]] = Future()
        self._jobs.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._jobs.get()
            try:
                done.set_result(start())
            except BaseException as exc:
                done.set_exception(exc)


_SPAWNER = _Spawner()


def popen_tied(args: Any, sig: int = signal.SIGKILL, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)`` whose child gets ``sig`` when this process dies
    (see the module docstring); ``kwargs`` may not hold a ``preexec_fn`` of their own."""
    prctl = _prctl()
    if prctl is None:
        return subprocess.Popen(args, **kwargs)
    parent = os.getpid()

    def tie() -> None:  # in the child, between fork and exec
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    def start() -> subprocess.Popen[Any]:
        return subprocess.Popen(args, preexec_fn=tie, **kwargs)

    if threading.current_thread() is threading.main_thread():
        return start()
    return _SPAWNER.run(start)
