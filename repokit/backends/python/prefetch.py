"""Reading and preparing the next operation while the model runs (instance process).

Under load the server sends an instance its next batch while the current one executes (the
dynamic batcher hands over a batch that can no longer grow, see
:mod:`repokit.scheduler.dynamic_driver`). Receiving that message, unpickling it and building
the ``pb_utils`` requests then cost the instance about 135 us per batch of 32 between two
``execute`` calls; a model that sleeps, waits for a device or computes in a native library
releases the GIL meanwhile, so a helper thread can do that work during ``execute`` instead.

The main loop arms the helper only while operations come back to back: when the next
operation was already there as the previous one finished, and that one held batches to build
(not only requests of the wire lane, :mod:`repokit.core.wire_lane`, which have nothing to
prepare: there the handoff between the threads costs more than the read it takes over). The
helper then takes the next operation from the socket (reading for every thread while it
does, as in :class:`~repokit.backends.python.child_link.ChildLink`) and prepares it. When
operations do not queue up (a single client waiting for each answer), the main thread reads
for itself as before, so an idle instance answers a request without a thread handoff on the
way.

Only the reading and the building of requests move: ``execute``, the conversion of responses
(which copies output tensors the model may reuse) and the reply stay on the main thread, in
order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from repokit.backends.python.child_link import ChildLink


class Prefetcher:
    """One helper thread that fetches one operation each time it is armed."""

    def __init__(self, link: ChildLink, prepare: Callable[[Any], Any]) -> None:
        self._link = link
        self._prepare = prepare
        self._cond = threading.Condition(threading.Lock())
        self._armed = False
        self._fetched: list[tuple[bool, Any]] = []  # (ok, operation or exception), at most one
        self._thread: threading.Thread | None = None

    def arm(self) -> None:
        """Fetch and prepare the next operation now (the main thread takes it with
        :meth:`take`)."""
        with self._cond:
            self._armed = True
            self._cond.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
            self._thread.start()

    def take(self) -> tuple[Any, bool]:
        """The operation fetched since :meth:`arm`, and whether it was there already (the
        caller did not wait for it); raises what reading it raised."""
        with self._cond:
            waited = not self._fetched
            while not self._fetched:
                self._cond.wait()
            ok, value = self._fetched.pop()
        if not ok:
            raise value
        return value, not waited

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._armed:
                    cond.wait()
                self._armed = False
            fetched: tuple[bool, Any]
            try:
                fetched = (True, self._prepare(self._link.next_op()))
            except BaseException as exc:  # the server went away: the main thread ends
                fetched = (False, exc)
            with cond:
                self._fetched.append(fetched)
                cond.notify_all()
            if not fetched[0]:
                return
