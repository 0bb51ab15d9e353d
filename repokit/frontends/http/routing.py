"""Triton's HTTP routing, checked in Triton's order (server ``HTTPAPIServer::Handle``).

A framework's router cannot express the precedence (``/v2/models/stats`` before the model
regex, a model name that is any non-slash run), so every path goes to one dispatcher and this
module resolves it with full-match regexes on the raw (not percent-decoded) path.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Endpoint(enum.Enum):
    SERVER_METADATA = "server_metadata"
    HEALTH_LIVE = "health_live"
    HEALTH_READY = "health_ready"
    MODEL_METADATA = "model_metadata"
    MODEL_READY = "model_ready"
    MODEL_CONFIG = "model_config"
    MODEL_INFER = "model_infer"
    MODEL_GENERATE = "model_generate"
    MODEL_TRACE = "model_trace"
    STATS = "stats"
    LOGGING = "logging"
    SYSTEM_SHM = "system_shm"
    CUDA_SHM = "cuda_shm"
    REPOSITORY_INDEX = "repository_index"
    REPOSITORY_CONTROL = "repository_control"
    TRACE = "trace"


@dataclass(frozen=True)
class Route:
    endpoint: Endpoint
    model: str = ""
    version: str = ""
    region: str = ""
    action: str = ""  # shm: status|register|unregister; repository: load|unload
    repository: str = ""  # a named repository (unsupported, as in Triton)


_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_HEALTH = re.compile(r"/v2(?:/health/(live|ready))?")
_SYSTEM_SHM = re.compile(r"/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_CUDA_SHM = re.compile(r"/v2/cudasharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")

_MODEL_SUFFIX: dict[str, Endpoint] = {
    "": Endpoint.MODEL_METADATA,
    "infer": Endpoint.MODEL_INFER,
    "generate": Endpoint.MODEL_GENERATE,
    "generate_stream": Endpoint.MODEL_GENERATE,
    "ready": Endpoint.MODEL_READY,
    "config": Endpoint.MODEL_CONFIG,
    "stats": Endpoint.STATS,
    "trace/setting": Endpoint.MODEL_TRACE,
}


def resolve(path: str) -> Route | None:
    """The route for a raw URL path (no query string), or None for Triton's 404 "Not Found"."""
    if path == "/v2/models/stats":
        return Route(Endpoint.STATS)
    if path == "/v2/logging":
        return Route(Endpoint.LOGGING)
    match = _MODEL.fullmatch(path)
    if match is not None:
        model, version, suffix = match.group(1), match.group(2) or "", match.group(3) or ""
        # trace/setting with a version falls through to the remaining patterns (and 404s)
        if not (suffix == "trace/setting" and version):
            return Route(_MODEL_SUFFIX[suffix], model=model, version=version, action=suffix)
    if path == "/v2":
        return Route(Endpoint.SERVER_METADATA)
    match = _HEALTH.fullmatch(path)
    if match is not None:
        kind = match.group(1)
        if kind is None:
            return Route(Endpoint.SERVER_METADATA)
        return Route(Endpoint.HEALTH_LIVE if kind == "live" else Endpoint.HEALTH_READY)
    match = _SYSTEM_SHM.fullmatch(path)
    if match is not None:
        return Route(Endpoint.SYSTEM_SHM, region=match.group(1) or "", action=match.group(2))
    match = _CUDA_SHM.fullmatch(path)
    if match is not None:
        return Route(Endpoint.CUDA_SHM, region=match.group(1) or "", action=match.group(2))
    match = _REPOSITORY.fullmatch(path)
    if match is not None:
        repository = match.group(1) or ""
        if match.group(2) == "index":
            return Route(Endpoint.REPOSITORY_INDEX, repository=repository)
        return Route(
            Endpoint.REPOSITORY_CONTROL,
            model=match.group(3),
            action=match.group(4),
            repository=repository,
        )
    if path == "/v2/trace/setting":
        return Route(Endpoint.TRACE)
    return None
