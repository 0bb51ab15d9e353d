"""The HTTP endpoints of each restricted API category (``--http-restricted-api``, parsed by
:mod:`repokit.frontends.restricted_apis`): a request to an endpoint of a restricted category must
carry the header ``<key>`` (any case) with exactly ``<value>``, else 403 (server
``src/http_server.cc`` ``RespondIfRestricted``)."""

from __future__ import annotations

from repokit.frontends.http.messages import HttpResponse
from repokit.frontends.http.responses import error_body
from repokit.frontends.http.routing import Endpoint
from repokit.frontends.restricted_apis import Restrictions, restricted_message

ENDPOINT_CATEGORY: dict[Endpoint, str] = {
    Endpoint.HEALTH_LIVE: "health",
    Endpoint.HEALTH_READY: "health",
    Endpoint.MODEL_READY: "health",
    Endpoint.SERVER_METADATA: "metadata",
    Endpoint.MODEL_METADATA: "metadata",
    Endpoint.MODEL_INFER: "inference",
    Endpoint.MODEL_GENERATE: "inference",
    Endpoint.MODEL_CONFIG: "model-config",
    Endpoint.STATS: "statistics",
    Endpoint.REPOSITORY_INDEX: "model-repository",
    Endpoint.REPOSITORY_CONTROL: "model-repository",
    Endpoint.SYSTEM_SHM: "shared-memory",
    Endpoint.CUDA_SHM: "shared-memory",
    Endpoint.TRACE: "trace",
    Endpoint.MODEL_TRACE: "trace",
    Endpoint.LOGGING: "logging",
}


def endpoint_restrictions(restrictions: Restrictions) -> dict[Endpoint, tuple[str, str]]:
    """The (header, value) each endpoint of a restricted category needs, decided once at
    startup; endpoints of unrestricted categories are absent, so they pay nothing per request."""
    return {
        endpoint: restrictions[category]
        for endpoint, category in ENDPOINT_CATEGORY.items()
        if category in restrictions
    }


def restricted_response(key: str) -> HttpResponse:
    """Triton's 403: the check comes before a handler sets its content type, so the body
    goes out as evhtp's default ``text/plain``."""
    return HttpResponse(error_body(restricted_message(key)), status=403, content_type="text/plain")
