"""How one load level is split over several endpoints (``repokit perf -u host1:8000,host2:8000``).

A level is the load on the whole service, as it would be through a load balancer in front of
the replicas: ``--concurrency-range 8`` over two endpoints keeps 8 requests outstanding in all
(4 on each), ``--request-rate-range 400`` sends 400 requests/s in all. Concurrency is split as
evenly as possible, the first endpoints taking one more when it does not divide
(:func:`split_concurrency`). A request schedule (constant or Poisson rate, or
``--request-intervals``) is generated once for the whole service and its requests are dealt to
the endpoints in turn (:func:`deal_intervals`), so the service sees exactly the schedule it
would see through a round-robin balancer; each endpoint gets ``--max-threads`` divided among
them (at least one connection). Warmup requests are split like concurrency. Sequence models
draw correlation IDs from one series for the whole run (no ID is live on two endpoints), and
a sequence stays on the endpoint of its first request, as affinity routing would keep it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


def split_concurrency(total: int, parts: int) -> list[int]:
    """``total`` split over ``parts`` as evenly as possible, the first ones taking the rest."""
    base, rest = divmod(total, parts)
    return [base + (1 if i < rest else 0) for i in range(parts)]


def split_connections(max_connections: int, parts: int) -> list[int]:
    """``--max-threads`` split over the endpoints, each keeping at least one connection."""
    return [max(share, 1) for share in split_concurrency(max_connections, parts)]


class _Dealer:
    """Absolute send times of the whole schedule, handed out to ``parts`` consumers in turn."""

    def __init__(self, intervals: Iterator[int], parts: int) -> None:
        self._intervals = intervals
        self._parts = parts
        self._next_owner = 0
        self._time = 0
        self._pending: list[deque[int]] = [deque() for _ in range(parts)]

    def next_time(self, owner: int) -> int:
        pending = self._pending[owner]
        while not pending:
            self._time += next(self._intervals)
            self._pending[self._next_owner].append(self._time)
            self._next_owner = (self._next_owner + 1) % self._parts
        return pending.popleft()


def _dealt(dealer: _Dealer, owner: int) -> Iterator[int]:
    previous = 0
    while True:
        at = dealer.next_time(owner)
        yield at - previous
        previous = at


def deal_intervals(intervals: Iterator[int], parts: int) -> list[Iterator[int]]:
    """One interval stream per endpoint: the i-th, (i+parts)-th, ... requests of ``intervals``
    (ns between sends, the first counted from the start), each as gaps from its own previous
    send, so that all of them started together replay the whole schedule."""
    if parts == 1:
        return [intervals]
    dealer = _Dealer(intervals, parts)
    return [_dealt(dealer, owner) for owner in range(parts)]
