"""KServe v2 HTTP/REST frontend (Sanic): ``create_http_app`` and ``create_metrics_app``."""

from repokit.frontends.http.app import create_http_app
from repokit.frontends.http.metrics import create_metrics_app

__all__ = ["create_http_app", "create_metrics_app"]
