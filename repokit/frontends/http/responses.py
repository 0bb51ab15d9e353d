"""Small response builders shared by the HTTP endpoints."""

from __future__ import annotations

import json
from typing import Any

import orjson

from repokit.frontends.http.messages import HttpResponse

JSON = "application/json"


def error_body(message: str) -> bytes:
    """Triton's ``{"error": "<message>"}``; never fails: a message that is not valid Unicode
    (a lone surrogate echoed from a request) is written with ``\\u`` escapes."""
    try:
        return orjson.dumps({"error": message})
    except TypeError:
        return json.dumps({"error": message}).encode()


def error_response(status: int, message: str) -> HttpResponse:
    """Triton's ``{"error": "<message>"}`` response."""
    return HttpResponse(error_body(message), status=status, content_type=JSON)


def json_response(payload: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(payload), status=status, content_type=JSON)


def empty_response(status: int = 200, content_type: str = "text/plain") -> HttpResponse:
    """Health-style replies: no body (Triton sends evhtp's default text/plain)."""
    return HttpResponse(b"", status=status, content_type=content_type)
