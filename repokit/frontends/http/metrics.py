"""The metrics endpoint on its own port (Triton's ``HTTPMetricsServer::Handle``):
``GET /metrics`` (or ``/metrics/``) -> Prometheus text; other methods 405; other paths 200
with an empty body."""

from __future__ import annotations

import re

from repokit.core.service import InferenceService
from repokit.frontends.http.messages import HttpRequest, HttpResponse
from repokit.frontends.http.request_log import log_request
from repokit.frontends.http.responses import error_response
from repokit.frontends.http.server import HttpServer

PROMETHEUS_CONTENT_TYPE = "text/plain; charset=utf-8"
_METRICS_PATH = re.compile(r"/metrics/?")


class MetricsFrontend:
    def __init__(self, service: InferenceService) -> None:
        self.service = service

    async def dispatch(self, request: HttpRequest) -> HttpResponse:
        log_request(request.method, request.path)
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        if _METRICS_PATH.fullmatch(request.path) is None:
            return HttpResponse(b"", status=200)
        text = self.service.metrics_text()
        return HttpResponse(text.encode(), status=200, content_type=PROMETHEUS_CONTENT_TYPE)


def create_metrics_server(service: InferenceService) -> HttpServer:
    """The metrics server (not started: :meth:`HttpServer.start` on a socket)."""
    return HttpServer(MetricsFrontend(service).dispatch)
