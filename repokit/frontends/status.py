"""The ONE table mapping core error codes to protocol statuses (Triton's ``HttpCodeFromError``
and ``GrpcStatusUtil::CodeToStatus``).

HTTP uses the integer status; gRPC uses the ``grpc.StatusCode`` member name so this module
does not import grpc (the gRPC frontend looks the name up:
``grpc.StatusCode[grpc_status_name(code)]``).
"""

from __future__ import annotations

from repokit.errors import Code

HTTP_STATUS: dict[Code, int] = {
    Code.INTERNAL: 500,
    Code.NOT_FOUND: 404,
    Code.UNAVAILABLE: 503,
    Code.UNSUPPORTED: 501,
    Code.INVALID_ARG: 400,
    Code.ALREADY_EXISTS: 400,
    Code.CANCELLED: 400,
    Code.UNKNOWN: 400,
}

GRPC_STATUS_NAME: dict[Code, str] = {
    Code.INTERNAL: "INTERNAL",
    Code.NOT_FOUND: "NOT_FOUND",
    Code.UNAVAILABLE: "UNAVAILABLE",
    Code.UNSUPPORTED: "UNIMPLEMENTED",
    Code.INVALID_ARG: "INVALID_ARGUMENT",
    Code.ALREADY_EXISTS: "ALREADY_EXISTS",
    Code.CANCELLED: "CANCELLED",
    Code.UNKNOWN: "UNKNOWN",
}


def http_status(code: Code) -> int:
    return HTTP_STATUS[code]


def grpc_status_name(code: Code) -> str:
    return GRPC_STATUS_NAME[code]
