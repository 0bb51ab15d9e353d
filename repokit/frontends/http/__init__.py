"""KServe v2 HTTP/REST frontend over our own HTTP/1.1 server: ``create_http_server`` and
``create_metrics_server``."""

from repokit.frontends.http.app import create_http_server
from repokit.frontends.http.metrics import create_metrics_server

__all__ = ["create_http_server", "create_metrics_server"]
