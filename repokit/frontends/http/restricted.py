"""The HTTP endpoints of each restricted API category (``--http-restricted-api``, parsed by
:mod:`repokit.frontends.restricted_apis`): a request to an endpoint of a restricted category must
carry the header ``<key>`` with exactly ``<value>``, else 403."""

from __future__ import annotations

from collections.abc import Mapping

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


def restriction_error(
    restrictions: Restrictions, endpoint: Endpoint, headers: Mapping[str, str]
) -> str | None:
    """The 403 message when the endpoint's category is restricted and the header is wrong."""
    if not restrictions:
        return None
    category = ENDPOINT_CATEGORY.get(endpoint)
    if category is None or category not in restrictions:
        return None
    key, expected = restrictions[category]
    if headers.get(key) != expected:
        return restricted_message(key)
    return None
