"""Transports of the load generator: one small interface, HTTP and gRPC implementations.

:func:`create_transport` picks one by protocol name and imports it lazily.
"""

from __future__ import annotations

from collections.abc import Callable

from repokit.perf.transports.base import Transport, TransportOptions


def create_transport(options: TransportOptions, clock: Callable[[], int]) -> Transport:
    if options.protocol == "grpc":
        from repokit.perf.transports.grpc import GrpcTransport

        return GrpcTransport(options, clock)
    from repokit.perf.transports.http import HttpTransport

    return HttpTransport(options, clock)
