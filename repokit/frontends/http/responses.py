"""Small response builders shared by the HTTP endpoints."""

from __future__ import annotations

from typing import Any

import orjson
from sanic import HTTPResponse

JSON = "application/json"


def error_response(status: int, message: str) -> HTTPResponse:
    """Triton's ``{"error": "<message>"}`` body."""
    return HTTPResponse(orjson.dumps({"error": message}), status=status, content_type=JSON)


def json_response(payload: Any, status: int = 200) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(payload), status=status, content_type=JSON)


def empty_response(status: int = 200, content_type: str = "text/plain") -> HTTPResponse:
    """Health-style replies: no body (Triton sends evhtp's default text/plain)."""
    return HTTPResponse(b"", status=status, content_type=content_type)
