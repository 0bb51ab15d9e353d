"""Restricted API categories shared by every frontend (Triton's ``restricted_features.h``):
``--http-restricted-api`` / ``--grpc-restricted-protocol`` name categories and the header
``<key>=<value>`` a request to them must carry. Each frontend maps its own endpoints onto these
categories (:mod:`repokit.frontends.http.restricted`, :mod:`repokit.frontends.grpc.restricted`,
:mod:`repokit.frontends.v1.restricted`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

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

Restrictions = Mapping[str, tuple[str, str]]  # category -> (header key, expected value)


def parse_restricted_apis(
    specs: Iterable[str],
    option: str = "http-restricted-api",
    key_prefix: str = "",
    feature: str = "api",
) -> dict[str, tuple[str, str]]:
    """Parse ``<api>[,<api>...]:<key>=<value>`` options as Triton's ``command_line_parser.cc``
    does (``feature`` names them in errors: ``api`` for HTTP, ``protocol`` for gRPC): the first
    ``:`` ends the names, the first ``=`` after it ends the key, and none of the three may be
    empty; a name must be a category and may be in one option only. ValueError with Triton's
    wording."""
    restrictions: dict[str, tuple[str, str]] = {}
    for spec in specs:
        colon = spec.find(":")
        equals = spec.find("=", colon + 1) if colon >= 0 else -1
        names = spec[:colon] if colon >= 0 else ""
        key = spec[colon + 1 : equals] if equals >= 0 else ""
        value = spec[equals + 1 :] if equals >= 0 else ""
        if not names or not key or not value:
            raise ValueError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {spec}"
            )
        for name in names.split(","):
            if name not in CATEGORIES:
                raise ValueError(f"unknown restricted {feature} '{name}'")
            if name in restrictions:
                raise ValueError(
                    f"restricted {feature} '{name}' can not be specified in multiple config groups"
                )
            restrictions[name] = (key_prefix + key, value)
    return restrictions


def restricted_message(key: str) -> str:
    return f"This API is restricted, expecting header '{key}'"


def missing_header(
    restrictions: Restrictions,
    categories: Iterable[str],
    value_of: Callable[[str], str | None],
) -> str | None:
    """The header key of the first restricted category whose header is absent or wrong."""
    for category in categories:
        rule = restrictions.get(category)
        if rule is not None and value_of(rule[0]) != rule[1]:
            return rule[0]
    return None
