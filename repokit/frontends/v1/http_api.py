"""The v1 HTTP API under ``/api/`` (Triton <= 20.06 ``HTTPAPIServer``), over :class:`V1Operations`.

Every response carries ``NV-Status`` (one-line text ``RequestStatus``). The HTTP status is 200
on success and 400 on any error, whose detail is in ``NV-Status`` (and, as plain text, in the
body); a path outside the v1 URL space is 404 and a wrong method 405, both with ``NV-Status``
too. Status, shared-memory status and repository-index bodies are text protos by default,
``?format=json`` / ``Accept: application/json`` for JSON and ``?format=binary`` for the
serialized message. Inference: see :mod:`.infer_codec`; the response body is the raw outputs
followed by the ``InferResponseHeader`` (text, or binary with ``?format=binary``), which is also
in the ``NV-InferResponse`` header.

The v2 app hands every ``/api/`` path here (a hook in ``HttpFrontend.dispatch``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from repokit.core.service import InferenceService
from repokit.errors import Code, RepokitError, invalid_arg
from repokit.frontends.http.messages import HttpRequest, HttpResponse
from repokit.frontends.http.responses import error_response
from repokit.frontends.restricted_apis import missing_header, restricted_message
from repokit.frontends.v1 import request_status as rstatus
from repokit.frontends.v1.infer_codec import RequestHeader
from repokit.frontends.v1.operations import V1Operations, model_version
from repokit.frontends.v1.restricted import HTTP_CATEGORIES

_API = re.compile(r"/api/(health|infer|status|modelcontrol|sharedmemorycontrol|repository)(.*)")
_INFER = re.compile(r"/([^/]+)(?:/(-?[0-9]+))?")
_STATUS = re.compile(r"(?:/([^/]+))?")
_CONTROL = re.compile(r"/(load|unload)/([^/]+)")
_SHM_REGISTER = re.compile(r"/register/([^/]+)/([^/]+)/([0-9]+)/([0-9]+)")
_SHM_CUDA = re.compile(r"/cudaregister/([^/]+)/([0-9]+)/([0-9]+)")
_SHM_UNREGISTER = re.compile(r"/unregister/([^/]+)")

REQUEST_HEADER = "NV-InferRequest"
RESPONSE_HEADER = "NV-InferResponse"
STATUS_HEADER = "NV-Status"
OCTET = "application/octet-stream"

_log = logging.getLogger(__name__)


class NotRouted(Exception):
    """A path outside the v1 URL space (404) or a wrong method (405)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _wants(request: HttpRequest) -> str:
    fmt = request.args.get("format", "")
    if fmt in ("json", "binary", "text"):
        return str(fmt)
    if fmt:
        raise invalid_arg(f"unknown format '{fmt}', expected text, json or binary")
    return "json" if "application/json" in request.headers.get("accept", "") else "text"


def _render(request: HttpRequest, message: Message) -> tuple[bytes, str]:
    fmt = _wants(request)
    if fmt == "binary":
        return message.SerializeToString(), OCTET
    if fmt == "json":
        text = json_format.MessageToJson(message, preserving_proto_field_name=True)
        return text.encode(), "application/json"
    return text_format.MessageToString(message).encode(), "text/plain"


def _method(request: HttpRequest, method: str) -> None:
    if request.method != method:
        raise NotRouted(405, f"method {request.method} not allowed, expected {method}")


def parse_request_header(text: str | None) -> Any:
    if text is None:
        raise invalid_arg(f"missing {REQUEST_HEADER} header (a text-format InferRequestHeader)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8, as the HTTP layer decoded them
        raise invalid_arg(f"failed to parse {REQUEST_HEADER} header: not valid UTF-8") from None
    header = RequestHeader()
    try:
        text_format.Parse(text, header)
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to parse {REQUEST_HEADER} header: {exc}") from None
    return header


class V1HttpFrontend:
    def __init__(
        self,
        service: InferenceService,
        restrictions: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.ops = V1Operations(service)
        self._ids = rstatus.RequestIds()
        self._restrictions = dict(restrictions or {})

    def _refusal(self, request: HttpRequest, request_id: int) -> HttpResponse | None:
        """The v2 restricted-API answer (403) when the path's categories need a header the
        request lacks (:mod:`.restricted`); unknown paths are left to the router (404)."""
        match = _API.fullmatch(request.path)
        if match is None:
            return None
        key = missing_header(
            self._restrictions, HTTP_CATEGORIES[match.group(1)], request.headers.get
        )
        if key is None:
            return None
        message = restricted_message(key)
        response = error_response(403, message)
        status = rstatus.failure(request_id, RepokitError(Code.UNAVAILABLE, message))
        response.headers[STATUS_HEADER] = rstatus.one_line(status)
        return response

    async def dispatch(self, request: HttpRequest) -> HttpResponse:
        request_id = self._ids.next()
        if self._restrictions:
            refusal = self._refusal(request, request_id)
            if refusal is not None:
                return refusal
        try:
            response = await self._route(request)
        except NotRouted as exc:
            code = Code.NOT_FOUND if exc.status == 404 else Code.UNSUPPORTED
            error = RepokitError(code, exc.message)
            return self._error(exc.status, rstatus.failure(request_id, error))
        except RepokitError as exc:
            return self._error(400, rstatus.failure(request_id, exc))
        except Exception as exc:  # a bug must not escape as a traceback
            _log.exception("v1 HTTP handler failed")
            error = RepokitError(Code.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
            return self._error(400, rstatus.failure(request_id, error))
        response.headers[STATUS_HEADER] = rstatus.one_line(rstatus.success(request_id))
        return response

    @staticmethod
    def _error(http_status: int, status: Any) -> HttpResponse:
        return HttpResponse(
            (status.msg + "\n").encode(),
            status=http_status,
            content_type="text/plain",
            headers={STATUS_HEADER: rstatus.one_line(status)},
        )

    async def _route(self, request: HttpRequest) -> HttpResponse:
        match = _API.fullmatch(request.path)
        if match is None:
            raise NotRouted(404, f"unknown v1 API path '{request.path}'")
        kind, rest = match.group(1), match.group(2)
        started = time.monotonic_ns()
        if kind == "infer":
            return await self._infer(request, rest)
        if kind == "health":
            _method(request, "GET")
            if rest not in ("/live", "/ready"):
                raise NotRouted(404, f"unknown health endpoint '/api/health{rest}'")
            healthy = self.ops.health(rest[1:])
            self.ops.record("health_stats", started)
            return HttpResponse(b"", status=200 if healthy else 400, content_type="text/plain")
        if kind == "status":
            _method(request, "GET")
            found = _STATUS.fullmatch(rest)
            if found is None:
                raise NotRouted(404, f"unknown status endpoint '/api/status{rest}'")
            status = self.ops.status(found.group(1) or "")
            self.ops.record("status_stats", started)
            return self._proto(request, status)
        if kind == "modelcontrol":
            _method(request, "POST")
            found = _CONTROL.fullmatch(rest)
            if found is None:
                raise NotRouted(404, f"unknown model control endpoint '/api/modelcontrol{rest}'")
            await self.ops.model_control(found.group(2), found.group(1) == "load")
            self.ops.record("model_control_stats", started)
            return HttpResponse(b"", content_type="text/plain")
        if kind == "sharedmemorycontrol":
            response = self._shared_memory(request, rest)
            self.ops.record("shm_control_stats", started)
            return response
        _method(request, "GET")  # repository
        if rest != "/index":
            raise NotRouted(404, f"unknown repository endpoint '/api/repository{rest}'")
        index = self.ops.repository_index()
        self.ops.record("repository_stats", started)
        return self._proto(request, index)

    @staticmethod
    def _proto(request: HttpRequest, message: Message) -> HttpResponse:
        body, content_type = _render(request, message)
        return HttpResponse(body, content_type=content_type)

    def _shared_memory(self, request: HttpRequest, rest: str) -> HttpResponse:
        if rest == "/status":
            _method(request, "GET")
            return self._proto(request, self.ops.shm_status())
        _method(request, "POST")
        if rest == "/unregister/all":
            self.ops.shm_unregister("")
            return HttpResponse(b"", content_type="text/plain")
        found = _SHM_REGISTER.fullmatch(rest)
        if found is not None:
            name, key, offset, size = found.groups()
            self.ops.shm_register(name, key, int(offset), int(size))
            return HttpResponse(b"", content_type="text/plain")
        if _SHM_CUDA.fullmatch(rest) is not None:
            self.ops.cuda_register()
        found = _SHM_UNREGISTER.fullmatch(rest)
        if found is not None:
            self.ops.shm_unregister(found.group(1))
            return HttpResponse(b"", content_type="text/plain")
        raise NotRouted(404, f"unknown shared memory endpoint '/api/sharedmemorycontrol{rest}'")

    async def _infer(self, request: HttpRequest, rest: str) -> HttpResponse:
        _method(request, "POST")
        found = _INFER.fullmatch(rest)
        if found is None:
            raise NotRouted(404, f"unknown infer endpoint '/api/infer{rest}'")
        model, version = found.group(1), model_version(found.group(2) or "")
        header = parse_request_header(request.headers.get(REQUEST_HEADER))
        out_header, raw = await self.ops.infer(model, version, header, body=request.body or b"")
        if _wants(request) == "binary":
            trailer = out_header.SerializeToString()
        else:
            trailer = text_format.MessageToString(out_header).encode()
        return HttpResponse(
            b"".join([*raw, trailer]),
            content_type=OCTET,
            headers={
                RESPONSE_HEADER: text_format.MessageToString(out_header, as_one_line=True),
            },
        )
