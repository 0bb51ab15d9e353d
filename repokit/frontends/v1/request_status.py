"""v1 ``RequestStatus``: core error codes -> ``RequestStatusCode`` and unique request ids."""

from __future__ import annotations

import itertools
from typing import Any

from google.protobuf import text_format

from repokit.errors import Code, RepokitError
from repokit.protocol.generated.v1 import request_status_pb2 as rs

SERVER_ID = "inference:0"

V1_CODE: dict[Code, Any] = {  # -> rs.RequestStatusCode
    Code.INTERNAL: rs.INTERNAL,
    Code.NOT_FOUND: rs.NOT_FOUND,
    Code.INVALID_ARG: rs.INVALID_ARG,
    Code.UNAVAILABLE: rs.UNAVAILABLE,
    Code.UNSUPPORTED: rs.UNSUPPORTED,
    Code.ALREADY_EXISTS: rs.ALREADY_EXISTS,
    Code.CANCELLED: rs.UNKNOWN,  # v1 had no CANCELLED
    Code.UNKNOWN: rs.UNKNOWN,
}


class RequestIds:
    """Hands out the ``request_id`` of every v1 request (unique per frontend, from 1)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def next(self) -> int:
        return next(self._next)


def success(request_id: int) -> rs.RequestStatus:
    return rs.RequestStatus(code=rs.SUCCESS, server_id=SERVER_ID, request_id=request_id)


def failure(request_id: int, error: RepokitError) -> rs.RequestStatus:
    # a message that echoes undecodable client bytes (lone surrogates) is escaped, so that the
    # status can still be serialized and sent
    message = error.message.encode("utf-8", "backslashreplace").decode("utf-8")
    return rs.RequestStatus(
        code=V1_CODE.get(error.code, rs.UNKNOWN),
        msg=message,
        server_id=SERVER_ID,
        request_id=request_id,
    )


def one_line(status: rs.RequestStatus) -> str:
    """The text form used in the ``NV-Status`` header."""
    return str(text_format.MessageToString(status, as_one_line=True))
