"""Restricted API categories (``--http-restricted-api=<apis>:<key>=<value>``), Triton's
``restricted_features.h``: a request to an endpoint of a restricted category must carry the
header ``<key>`` with exactly ``<value>``, else 403."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from repokit.frontends.http.routing import Endpoint

CATEGORIES: tuple[str, ...] = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

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

Restrictions = Mapping[str, tuple[str, str]]  # category -> (header key, expected value)


def parse_restricted_apis(
    specs: Iterable[str], option: str = "http-restricted-api", key_prefix: str = ""
) -> dict[str, tuple[str, str]]:
    """Parse ``<api>[,<api>...]:<key>=<value>`` options; ValueError with Triton's wording."""
    restrictions: dict[str, tuple[str, str]] = {}
    for spec in specs:
        colon = spec.find(":")
        equals = spec.find("=", colon + 1) if colon >= 0 else -1
        names = spec[:colon] if colon >= 0 else ""
        key = spec[colon + 1 : equals] if equals >= 0 else ""
        value = spec[equals + 1 :] if equals >= 0 else ""
        if not names or not key or not value:
            raise ValueError(f"--{option} option format is '<apis>:<setting>=<value>'. Got {spec}")
        for name in names.split(","):
            if name not in CATEGORIES:
                raise ValueError(f"unknown restricted api '{name}'")
            if name in restrictions:
                raise ValueError(
                    f"restricted api '{name}' can not be specified in multiple config groups"
                )
            restrictions[name] = (key_prefix + key, value)
    return restrictions


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


def restricted_message(key: str) -> str:
    return f"This API is restricted, expecting header '{key}'"
