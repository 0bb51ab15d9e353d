"""The KServe v2 HTTP/REST frontend: :func:`create_http_server` serves one
:class:`HttpFrontend` over the HTTP/1.1 server of :mod:`.server` (our own protocol over
``httptools``, :mod:`.protocol`).

Every request goes to :meth:`HttpFrontend.dispatch`, which resolves the raw path with Triton's
regexes in Triton's order (:mod:`.routing`), checks the restricted-API header, then the method
(405 ``{"error":"Method Not Allowed"}``), then calls the matching endpoint of
:mod:`.endpoints`. Errors are ``RepokitError``s mapped to HTTP statuses by the one table in
:mod:`repokit.frontends.status`.

Endpoints answered like a Triton built without the feature: CUDA shared memory as a CPU-only
Triton (status ``[]``, register 400 as the release build without a GPU, unregister 200).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

from repokit.core.quick_wire import QuickWire
from repokit.core.service import InferenceService
from repokit.errors import RepokitError
from repokit.frontends.header_forwarding import forwarding
from repokit.frontends.http import endpoints
from repokit.frontends.http.connection_limits import ConnectionLimits, LimitSettings
from repokit.frontends.http.infer_codec import HttpInferBody
from repokit.frontends.http.infer_response import EncodedResponse
from repokit.frontends.http.messages import HttpRequest, HttpResponse
from repokit.frontends.http.request_log import log_request, request_logging
from repokit.frontends.http.responses import error_response
from repokit.frontends.http.restricted import endpoint_restrictions, restricted_response
from repokit.frontends.http.routing import Endpoint, Route, resolve
from repokit.frontends.http.server import HttpServer
from repokit.frontends.restricted_apis import parse_restricted_apis
from repokit.frontends.status import http_status
from repokit.frontends.v1.http_api import V1HttpFrontend

# the methods the frontend knows; any other is 405 whatever the path
ALL_METHODS = frozenset(("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"))


class HttpSettings(LimitSettings, Protocol):
    """The serving settings the HTTP frontend reads (``repokit.frontends.runner.ServeSettings``)."""

    @property
    def http_max_input_size(self) -> int: ...

    @property
    def allow_client_shm(self) -> bool: ...

    @property
    def http_restricted_api(self) -> list[str]: ...

    @property
    def http_header_forward_pattern(self) -> str: ...


# a handler returns its response, or None when it already sent one (request.respond)
Handler = Callable[[HttpRequest, Route], Awaitable[HttpResponse | None]]


class _Resolved(NamedTuple):
    """A path's route with its endpoint's allowed methods, handler and the (header, value) a
    request needs when its category is restricted (None: not restricted)."""

    route: Route
    methods: tuple[str, ...]
    handler: Handler
    restriction: tuple[str, str] | None


_MODEL_INFER = Endpoint.MODEL_INFER  # (an enum member's lookup costs a descriptor call)
# resolved routes kept per raw path (a client usually sends few distinct paths)
ROUTE_CACHE_SIZE = 1024


class HttpFrontend:
    """Request dispatch for one app; holds the service and the parsed HTTP options."""

    def __init__(self, service: InferenceService, settings: HttpSettings) -> None:
        self.service = service
        self.max_input_size = settings.http_max_input_size
        self.allow_client_shm = settings.allow_client_shm
        self.restrictions = parse_restricted_apis(settings.http_restricted_api)
        self._endpoint_restrictions = endpoint_restrictions(self.restrictions)
        self.limits = ConnectionLimits.from_settings(settings)
        ops = endpoints.Endpoints(
            service,
            self.max_input_size,
            self.allow_client_shm,
            forwarding(settings.http_header_forward_pattern, "http-header-forward-pattern"),
        )
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
        self._routes: dict[str, _Resolved | None] = {}
        self.v1 = V1HttpFrontend(service, self.restrictions)  # v1 hook: the legacy /api/ URL space

    def route(self, path: str) -> _Resolved | None:
        """:func:`resolve` with its endpoint's methods and handler, remembered per path
        (routes are immutable; the cache starts over when it is full, so arbitrary paths
        cannot grow it without bound)."""
        routes = self._routes
        if path in routes:
            return routes[path]
        route = resolve(path)
        resolved = None
        if route is not None:
            methods, handler = self._handlers[route.endpoint]
            if not methods:  # shared memory: status is GET, register/unregister are POST
                methods = ("GET",) if route.action == "status" else ("POST",)
            restriction = self._endpoint_restrictions.get(route.endpoint)
            resolved = _Resolved(route, methods, handler, restriction)
        if len(routes) >= ROUTE_CACHE_SIZE:
            routes.clear()
        routes[path] = resolved
        return resolved

    @property
    def max_body(self) -> int:
        """The largest request body read: Triton limits only the JSON parts and raw or
        decompressed inputs (``--http-max-input-size``), so the transport limit is generous."""
        return max(self.max_input_size * 4, 1 << 31)

    def start_quick(
        self, request: HttpRequest, done: Callable[[HttpResponse | Exception], None]
    ) -> QuickWire[HttpInferBody, EncodedResponse] | None:
        """:meth:`dispatch` of an infer request driven by callbacks when it can be
        (:meth:`~.endpoints.Endpoints.quick_infer`): ``done`` gets what :meth:`dispatch` would
        return or raise. None: the request takes :meth:`dispatch` (nothing was done; with
        verbose logging on, every request does)."""
        if request.method != "POST" or request_logging():
            return None
        resolved = self.route(request.path)
        if resolved is None or resolved.route.endpoint is not _MODEL_INFER:
            return None
        restriction = resolved.restriction
        if restriction is not None and request.headers.get(restriction[0]) != restriction[1]:
            return None
        return self.endpoints.quick_infer(request, resolved.route, done)

    async def dispatch(self, request: HttpRequest) -> HttpResponse | None:
        log_request(request.method, request.path)
        if request.method not in ALL_METHODS:
            return error_response(405, "Method Not Allowed")
        raw_path = request.path
        if raw_path.startswith("/api/"):  # v1 hook: repokit.frontends.v1.http_api
            return await self.v1.dispatch(request)
        resolved = self.route(raw_path)
        if resolved is None:
            return error_response(404, "Not Found")
        route, methods, handler, restriction = resolved
        if restriction is not None and request.headers.get(restriction[0]) != restriction[1]:
            return restricted_response(restriction[0])
        if request.method not in methods:
            return error_response(405, "Method Not Allowed")
        try:
            return await handler(request, route)
        except RepokitError as exc:
            return error_response(http_status(exc.code), exc.message)


def create_http_server(
    service: InferenceService, settings: HttpSettings, *, access_log: bool = False
) -> tuple[HttpServer, HttpFrontend]:
    """An HTTP server (not started: :meth:`HttpServer.start` on a socket) for ``service``."""
    frontend = HttpFrontend(service, settings)
    # callbacks drive plain infer requests of the core's service (not a frontend worker's)
    quick = frontend.start_quick if isinstance(service, InferenceService) else None
    server = HttpServer(frontend.dispatch, frontend.limits, frontend.max_body, access_log, quick)
    return server, frontend
