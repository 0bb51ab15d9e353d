"""Child processes that die with their parent, even when the parent is killed (SIGKILL).

Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) is sent to a process when the thread
that started it ends: with its process (whatever killed it), or on its own. So a child must be
started from a thread that lives as long as its process: the main thread, or here a spawner
thread of its own (:func:`popen_tied` hands the start to it when called from any other thread,
so a server started from a worker thread of a pool does not die with that worker).

* :func:`popen_tied`: ``subprocess.Popen`` for programs we do not control (tritonserver, a
  ``repokit serve`` started by a tool or a test): the child starts as a small Python program
  (isolated, without site: a few ms) that sets the signal and execs the command (the signal
  survives the exec; a child whose parent already died meanwhile exits at once). Not a
  ``preexec_fn``: that runs in the forked copy of a parent that may hold other threads'
  locks, and runs its at-fork hooks (gRPC's printed epoll errors there and a server did not
  start).
* :func:`tie_to_parent`: called first thing by a Python child we start ourselves (repokit's
  model instance processes).

Elsewhere than on Linux both do nothing more than ``subprocess.Popen`` / nothing.
"""

from __future__ import annotations

import ctypes
import os
import queue
import shutil
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


# argv: the signal, the parent's pid, the program (found by the parent), the command
_TIE_AND_EXEC = (
    "import ctypes, os, sys; "
    f"ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, int(sys.argv[1]), 0, 0, 0); "
    "os.getppid() == int(sys.argv[2]) or os._exit(1); "
    "os.execv(sys.argv[3], sys.argv[4:])"
)


def popen_tied(args: Any, sig: int = signal.SIGKILL, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)`` whose child gets ``sig`` when this process dies
    (see the module docstring). ``args`` is a command list (no shell); a program that is not
    found raises FileNotFoundError here, as Popen does."""
    if _prctl() is None or kwargs.get("shell") or "executable" in kwargs:
        return subprocess.Popen(args, **kwargs)
    command = [os.fspath(a) for a in ([args] if isinstance(args, (str, os.PathLike)) else args)]
    env = kwargs.get("env")
    search = env.get("PATH", os.defpath) if env is not None else None
    program = command[0]
    if os.sep not in program:
        found = shutil.which(program, path=search)
        if found is None:
            raise FileNotFoundError(2, "No such file or directory", program)
        program = found
    elif kwargs.get("cwd") is not None and not os.path.isabs(program):
        program = os.path.join(os.fspath(kwargs["cwd"]), program)
    wrapped = [sys.executable, "-I", "-S", "-c", _TIE_AND_EXEC, str(int(sig)), str(os.getpid())]
    wrapped += [program, *command]

    def start() -> subprocess.Popen[Any]:
        return subprocess.Popen(wrapped, **kwargs)

    if threading.current_thread() is threading.main_thread():
        return start()
    return _SPAWNER.run(start)
