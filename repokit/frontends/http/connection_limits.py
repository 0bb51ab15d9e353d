"""What one HTTP connection may hold, and how many connections there may be.

Defaults (Triton 2.51 has no flags for these; its HTTP server keeps slow connections open):

- a request head must arrive within :data:`HEADER_TIMEOUT_S` seconds of its first byte;
- a request body must keep arriving: at most :data:`BODY_TIMEOUT_S` seconds without a byte;
- an idle keep-alive connection is closed after :data:`KEEPALIVE_TIMEOUT_S` seconds;
- running the request (the model) has :data:`RESPONSE_TIMEOUT_S` (models may take long);
- at most :func:`default_max_connections` connections: the process's soft descriptor limit
  minus :data:`RESERVED_DESCRIPTORS` (model files, instance processes, gRPC, metrics). A new
  connection beyond it closes the connection that has been idle (or sending a partial
  request) the longest, so slow or idle clients cannot lock others out; when every connection
  is running a request, the new one is closed at once.

All of them are ``ServeSettings`` fields (``http_header_timeout_secs`` ...).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Protocol

HEADER_TIMEOUT_S = 60.0
BODY_TIMEOUT_S = 60.0
KEEPALIVE_TIMEOUT_S = 75.0
RESPONSE_TIMEOUT_S = 3600.0
RESERVED_DESCRIPTORS = 128
MIN_CONNECTIONS = 16


def default_max_connections() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(MIN_CONNECTIONS, int(soft) - RESERVED_DESCRIPTORS)


class LimitSettings(Protocol):
    """The serving settings' limit fields (``repokit.frontends.runner.ServeSettings``)."""

    @property
    def http_header_timeout_secs(self) -> float: ...
    @property
    def http_body_timeout_secs(self) -> float: ...
    @property
    def http_keepalive_timeout_secs(self) -> float: ...
    @property
    def http_response_timeout_secs(self) -> float: ...
    @property
    def http_max_connections(self) -> int: ...


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S
    response_timeout_s: float = RESPONSE_TIMEOUT_S
    max_connections: int = 0  # 0 = default_max_connections()

    @classmethod
    def from_settings(cls, settings: LimitSettings) -> ConnectionLimits:
        """The ``http_*`` limit fields of the serving settings (0 connections: from the
        descriptor limit)."""
        maximum = settings.http_max_connections
        return cls(
            header_timeout_s=settings.http_header_timeout_secs,
            body_timeout_s=settings.http_body_timeout_secs,
            keepalive_timeout_s=settings.http_keepalive_timeout_secs,
            response_timeout_s=settings.http_response_timeout_secs,
            max_connections=maximum if maximum > 0 else default_max_connections(),
        )
