"""The KServe v2 HTTP/REST frontend: a Sanic app built by :func:`create_http_app`.

One catch-all Sanic route hands every request to :class:`HttpFrontend.dispatch`, which
resolves the raw path with Triton's regexes in Triton's order (:mod:`.routing`), checks the
restricted-API header, then the method (405 ``{"error":"Method Not Allowed"}``), then calls
the matching :class:`~repokit.core.service.InferenceService` operation. Errors are
``RepokitError``s mapped to HTTP statuses by the one table in :mod:`repokit.frontends.status`.

Endpoints answered like a Triton built without the feature: CUDA shared memory as a CPU-only
Triton (status ``[]``, register 400 "GPUs not supported", unregister 200).

Infer requests that are well formed skip this dispatch: the server runs the app with
:class:`~repokit.frontends.http.fast_protocol.FastInferProtocol`, which answers them through the
same :meth:`Endpoints.run_infer` (why and what qualifies: that module; the server's CPU per
request on each lane is in ``benchmarks/README.md``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from sanic import HTTPResponse, Request, Sanic
from sanic.exceptions import SanicException

from repokit.core.service import InferenceService
from repokit.errors import RepokitError
from repokit.frontends.http import endpoints
from repokit.frontends.http.connection_limits import ConnectionLimits
from repokit.frontends.http.responses import error_response
from repokit.frontends.http.restricted import parse_restricted_apis, restriction_error
from repokit.frontends.http.routing import Endpoint, Route, resolve
from repokit.frontends.status import http_status
from repokit.frontends.v1.http_api import V1HttpFrontend

ALL_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
DEFAULT_MAX_INPUT_SIZE = 1 << 26
REQUEST_BUFFER_SIZE = 1 << 22


class HttpSettings(Protocol):
    """The serving settings the HTTP frontend reads (``repokit.frontends.runner.ServeSettings``).
    Missing attributes keep tritonserver's defaults."""

    @property
    def http_max_input_size(self) -> int: ...

    @property
    def allow_client_shm(self) -> bool: ...


# a handler returns its response, or None when it already sent one (request.respond)
Handler = Callable[[Request, Route], Awaitable[HTTPResponse | None]]
# resolved routes kept per raw path (a client usually sends few distinct paths)
ROUTE_CACHE_SIZE = 1024


class HttpFrontend:
    """Request dispatch for one app; holds the service and the parsed HTTP options."""

    def __init__(self, service: InferenceService, settings: HttpSettings) -> None:
        self.service = service
        self.max_input_size = int(getattr(settings, "http_max_input_size", DEFAULT_MAX_INPUT_SIZE))
        self.allow_client_shm = bool(getattr(settings, "allow_client_shm", False))
        self.restrictions = parse_restricted_apis(getattr(settings, "http_restricted_api", []))
        self.limits = ConnectionLimits.from_settings(settings)
        ops = endpoints.Endpoints(service, self.max_input_size, self.allow_client_shm)
        self.endpoints = ops
        self._handlers: dict[Endpoint, tuple[tuple[str, ...], Handler]] = {
            Endpoint.SERVER_METADATA: (("GET",), ops.server_metadata),
            Endpoint.HEALTH_LIVE: (("GET",), ops.health_live),
            Endpoint.HEALTH_READY: (("GET",), ops.health_ready),
            Endpoint.MODEL_METADATA: (("GET",), ops.model_metadata),
            Endpoint.MODEL_READY: (("GET",), ops.model_ready),
            Endpoint.MODEL_CONFIG: (("GET",), ops.model_config),
            Endpoint.MODEL_INFER: (("POST",), ops.infer),
            Endpoint.MODEL_GENERATE: (("POST",), ops.generate),
            Endpoint.STATS: (("GET",), ops.statistics),
            Endpoint.LOGGING: (("GET", "POST"), ops.logging),
            Endpoint.REPOSITORY_INDEX: (("POST",), ops.repository_index),
            Endpoint.REPOSITORY_CONTROL: (("POST",), ops.repository_control),
            Endpoint.TRACE: (("GET", "POST"), ops.trace),
            Endpoint.MODEL_TRACE: (("GET", "POST"), ops.trace),
            Endpoint.SYSTEM_SHM: ((), ops.system_shm),
            Endpoint.CUDA_SHM: ((), ops.cuda_shm),
        }
        self._routes: dict[str, Route | None] = {}
        self.v1 = V1HttpFrontend(service, self.restrictions)  # v1 hook: the legacy /api/ URL space

    def route(self, path: str) -> Route | None:
        """:func:`resolve` remembered per path (routes are immutable; the cache starts over
        when it is full, so arbitrary paths cannot grow it without bound)."""
        routes = self._routes
        if path in routes:
            return routes[path]
        route = resolve(path)
        if len(routes) >= ROUTE_CACHE_SIZE:
            routes.clear()
        routes[path] = route
        return route

    async def dispatch(self, request: Request, path: str = "") -> HTTPResponse | None:
        raw_path = request.path  # a property that decodes the URL on every access
        if raw_path.startswith("/api/"):  # v1 hook: repokit.frontends.v1.http_api
            return await self.v1.dispatch(request)
        route = self.route(raw_path)
        if route is None:
            return error_response(404, "Not Found")
        if self.restrictions:
            message = restriction_error(self.restrictions, route.endpoint, request.headers)
            if message is not None:
                return error_response(403, message)
        methods, handler = self._handlers[route.endpoint]
        if not methods:  # shared memory: status is GET, register/unregister are POST
            methods = ("GET",) if route.action == "status" else ("POST",)
        if request.method not in methods:
            return error_response(405, "Method Not Allowed")
        try:
            return await handler(request, route)
        except RepokitError as exc:
            return error_response(http_status(exc.code), exc.message)


def _sanic_error(request: Request, exception: Exception) -> HTTPResponse:
    """Sanic's own errors (unknown method, oversized body, timeouts) as {"error": ...}."""
    if isinstance(exception, SanicException):
        status = int(getattr(exception, "status_code", 500) or 500)
        message = str(exception) or "Error"
        if status == 405:
            message = "Method Not Allowed"
        elif status == 404:
            message = "Not Found"
        return error_response(status, message)
    return error_response(500, f"internal error: {type(exception).__name__}: {exception}")


def create_http_app(
    service: InferenceService, settings: HttpSettings, *, access_log: bool = False
) -> Sanic[Any, Any]:
    """A new Sanic app (unique name, so several servers can live in one process)."""
    frontend = HttpFrontend(service, settings)
    app: Sanic[Any, Any] = Sanic(f"repokit-http-{uuid.uuid4().hex[:12]}", configure_logging=False)
    app.config.ACCESS_LOG = access_log
    app.config.AUTO_RELOAD = False
    app.config.TOUCHUP = False  # runner._start_sanic enables it once per process
    # Bodies up to the input limit plus binary tensors: Triton limits only the JSON parts and
    # raw/decompressed inputs, so the transport limit is generous.
    app.config.REQUEST_MAX_SIZE = max(frontend.max_input_size * 4, 1 << 31)
    # Sanic stops reading a connection once this much is buffered and resumes when the body
    # reader drained it; its 64 KiB default costs a pause/resume round per 64 KiB of a large
    # tensor (the whole body is read into memory before the handler runs in any case).
    app.config.REQUEST_BUFFER_SIZE = REQUEST_BUFFER_SIZE
    # repokit.frontends.http.connection_limits: the head (Sanic's request timeout), the model
    # (its response timeout), idle keep-alive; the body timeout and the connection limit are
    # the protocol's (FastInferProtocol)
    limits = frontend.limits
    app.config.REQUEST_TIMEOUT = limits.header_timeout_s
    app.config.RESPONSE_TIMEOUT = limits.response_timeout_s
    app.config.KEEP_ALIVE_TIMEOUT = limits.keepalive_timeout_s
    app.config.NOISY_EXCEPTIONS = False
    app.config.FALLBACK_ERROR_FORMAT = "json"  # Sanic's own errors are JSON, never guessed
    app.ctx.frontend = frontend
    app.add_route(frontend.dispatch, "/", methods=ALL_METHODS, name="root")
    app.add_route(frontend.dispatch, "/<path:path>", methods=ALL_METHODS, name="dispatch")
    app.error_handler.add(Exception, _sanic_error)
    return app
