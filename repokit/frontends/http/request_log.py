"""tritonserver's verbose line for each HTTP request (``--log-verbose 1``):
``HTTP request: <method> <path>``, the method as libevhtp numbers it (GET 0, POST 2, ...),
on the inference port and the metrics port alike."""

from __future__ import annotations

import logging

from repokit.core.server_log import VERBOSE

_log = logging.getLogger("repokit.http.requests")

# libevhtp's htp_method values (what Triton's HTTP server prints)
EVHTP_METHODS = {
    "GET": 0,
    "HEAD": 1,
    "POST": 2,
    "PUT": 3,
    "DELETE": 4,
    "OPTIONS": 8,
    "TRACE": 13,
    "CONNECT": 14,
    "PATCH": 15,
}
UNKNOWN_METHOD = 16  # htp_method_UNKNOWN


def log_request(method: str, path: str) -> None:
    """The verbose request line (one level check when verbose logging is off)."""
    if _log.isEnabledFor(VERBOSE):
        _log.log(VERBOSE, "HTTP request: %d %s", EVHTP_METHODS.get(method, UNKNOWN_METHOD), path)


def request_logging() -> bool:
    """Whether :func:`log_request` logs."""
    return _log.isEnabledFor(VERBOSE)
