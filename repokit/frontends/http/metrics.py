"""The metrics endpoint on its own port (Triton's ``HTTPMetricsServer::Handle``):
``GET /metrics`` (or ``/metrics/``) -> Prometheus text; other methods 405; other paths 200
with an empty body."""

from __future__ import annotations

import re
import uuid
from typing import Any

from sanic import HTTPResponse, Request, Sanic

from repokit.core.service import InferenceService
from repokit.frontends.http.app import ALL_METHODS
from repokit.frontends.http.responses import error_response

PROMETHEUS_CONTENT_TYPE = "text/plain; charset=utf-8"
_METRICS_PATH = re.compile(r"/metrics/?")


def create_metrics_app(service: InferenceService) -> Sanic[Any, Any]:
    async def handle(request: Request, path: str = "") -> HTTPResponse:
        if request.method != "GET":
            return error_response(405, "Method Not Allowed")
        if _METRICS_PATH.fullmatch(request.path) is None:
            return HTTPResponse(b"", status=200)
        text = service.metrics_text()
        return HTTPResponse(text.encode(), status=200, content_type=PROMETHEUS_CONTENT_TYPE)

    app: Sanic[Any, Any] = Sanic(
        f"repokit-metrics-{uuid.uuid4().hex[:12]}", configure_logging=False
    )
    app.config.ACCESS_LOG = False
    app.config.AUTO_RELOAD = False
    app.config.TOUCHUP = False  # runner._start_sanic enables it once per process
    app.config.NOISY_EXCEPTIONS = False
    app.add_route(handle, "/", methods=ALL_METHODS, name="root")
    app.add_route(handle, "/<path:path>", methods=ALL_METHODS, name="metrics")
    return app
