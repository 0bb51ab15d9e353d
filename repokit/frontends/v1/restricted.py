"""Restricted API categories on the legacy v1 API (``--http-restricted-api``,
``--grpc-restricted-protocol``): each v1 endpoint belongs to the categories of the v2 endpoints
whose answers it carries, and a request must hold the header of every one of them that is
restricted. The refusal is the v2 one (HTTP 403, gRPC UNAVAILABLE, same text), so the v1 URL
space is no way around a restriction.

``status`` answers what server metadata, readiness, model configs, the repository index and the
statistics answer in v2, so it needs the headers of all of those that are restricted.
"""

from __future__ import annotations

_STATUS = ("metadata", "health", "model-config", "model-repository", "statistics")

#: v1 HTTP ``/api/<kind>`` -> categories
HTTP_CATEGORIES: dict[str, tuple[str, ...]] = {
    "health": ("health",),
    "infer": ("inference",),
    "status": _STATUS,
    "modelcontrol": ("model-repository",),
    "sharedmemorycontrol": ("shared-memory",),
    "repository": ("model-repository",),
}

V1_SERVICE = "/nvidia.inferenceserver.GRPCService/"

#: v1 gRPC full method name -> categories
GRPC_CATEGORIES: dict[str, tuple[str, ...]] = {
    V1_SERVICE + "Health": ("health",),
    V1_SERVICE + "Infer": ("inference",),
    V1_SERVICE + "StreamInfer": ("inference",),
    V1_SERVICE + "Status": _STATUS,
    V1_SERVICE + "ModelControl": ("model-repository",),
    V1_SERVICE + "SharedMemoryControl": ("shared-memory",),
    V1_SERVICE + "Repository": ("model-repository",),
}

GRPC_STREAMING = frozenset({V1_SERVICE + "StreamInfer"})
