"""How often a client may ping the server, as grpc's server transport polices it (Triton's
``--grpc-http2-min-recv-ping-interval-without-data``, ``--grpc-http2-max-ping-strikes`` and
``--grpc-keepalive-permit-without-calls``).

A ping that comes sooner than the allowed interval after the previous one is a strike; the
interval is the configured one while calls run, or two hours on a connection without calls
unless pings without calls are permitted. Once the strikes exceed the maximum (0: no limit), the
connection ends with GOAWAY ENHANCE_YOUR_CALM "too_many_pings". Sending headers or data clears
the strikes and the time of the last ping. The server's own keepalive pings stop after
``--grpc-http2-max-pings-without-data`` of them (0: no limit) until it sends headers or data
again. Checked against Triton 2.51: four pings in a row on
an idle connection get four ACKs, then the GOAWAY; three pings, a call, three pings do not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

IDLE_INTERVAL = 7200.0  # seconds between pings on a connection without calls (TCP keepalive's)


class PingPolicy:
    def __init__(
        self,
        min_interval: float,
        max_strikes: int,
        permit_without_calls: bool,
        clock: Callable[[], float] = time.monotonic,
        max_sent_without_data: int = 0,
    ) -> None:
        self.min_interval = max(0.0, min_interval)
        self.max_strikes = max(0, max_strikes)
        self.permit_without_calls = permit_without_calls
        self._clock = clock
        self._last = -math.inf
        self.strikes = 0
        self.max_sent_without_data = max(0, max_sent_without_data)
        self.sent_without_data = 0

    def may_send(self) -> bool:
        """Whether the server may send a keepalive ping now."""
        limit = self.max_sent_without_data
        return limit == 0 or self.sent_without_data < limit

    def sent(self) -> None:
        self.sent_without_data += 1

    def received(self, calls_running: bool) -> bool:
        """Count a ping from the client; True when it is one strike too many."""
        now = self._clock()
        if calls_running or self.permit_without_calls:
            interval = self.min_interval
        else:
            interval = IDLE_INTERVAL
        allowed = self._last + interval
        self._last = now
        if allowed <= now:
            return False
        self.strikes += 1
        return self.max_strikes != 0 and self.strikes > self.max_strikes

    def reset(self) -> None:
        """The server sent headers or data: the counts start over."""
        self._last = -math.inf
        self.strikes = 0
        self.sent_without_data = 0
