"""Plain core results -> the non-inference gRPC response messages, and back for requests.

The core answers in Triton's JSON shapes (server/model metadata, statistics, repository index,
shared-memory status, log settings); these helpers copy them into the generated messages. Model
versions in gRPC requests are strings parsed like Triton's ``GetModelVersionFromString``
(``std::stol``: leading blanks and a sign allowed, trailing text ignored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from repokit.errors import invalid_arg
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.model_version import parse_model_version as parse_model_version


def server_metadata(meta: Mapping[str, Any]) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(
        name=str(meta.get("name", "")),
        version=str(meta.get("version", "")),
        extensions=[str(e) for e in meta.get("extensions", [])],
    )


def model_metadata(meta: Mapping[str, Any]) -> pb.ModelMetadataResponse:
    msg = pb.ModelMetadataResponse(
        name=str(meta.get("name", "")),
        versions=[str(v) for v in meta.get("versions", [])],
        platform=str(meta.get("platform", "")),
    )
    for target, key in ((msg.inputs, "inputs"), (msg.outputs, "outputs")):
        for tensor in meta.get(key, []):
            target.add(
                name=str(tensor["name"]),
                datatype=str(tensor["datatype"]),
                shape=[int(d) for d in tensor.get("shape", [])],
            )
    return msg


def model_statistics(stats: Mapping[str, Any]) -> pb.ModelStatisticsResponse:
    msg = pb.ModelStatisticsResponse()
    json_format.ParseDict(dict(stats), msg, ignore_unknown_fields=True)
    return msg


def repository_index(models: Sequence[Mapping[str, Any]]) -> pb.RepositoryIndexResponse:
    msg = pb.RepositoryIndexResponse()
    for model in models:
        msg.models.add(
            name=str(model.get("name", "")),
            version=str(model.get("version", "")),
            state=str(model.get("state", "")),
            reason=str(model.get("reason", "")),
        )
    return msg


def shm_status(regions: Sequence[Mapping[str, Any]]) -> pb.SystemSharedMemoryStatusResponse:
    msg = pb.SystemSharedMemoryStatusResponse()
    for region in regions:
        name = str(region["name"])
        status = msg.regions[name]
        status.name = name
        status.key = str(region.get("key", ""))
        status.offset = int(region.get("offset", 0))
        status.byte_size = int(region.get("byte_size", 0))
    return msg


def log_settings_response(settings: Mapping[str, Any]) -> pb.LogSettingsResponse:
    msg = pb.LogSettingsResponse()
    for key, value in settings.items():
        target = msg.settings[key]
        if isinstance(value, bool):
            target.bool_param = value
        elif isinstance(value, int):
            target.uint32_param = value
        else:
            target.string_param = str(value)
    return msg


def log_settings_request(msg: pb.LogSettingsRequest) -> dict[str, Any]:
    """Setting name -> bool / int / str; a value with no field set becomes None."""
    settings: dict[str, Any] = {}
    for key, value in msg.settings.items():
        kind = value.WhichOneof("parameter_choice")
        settings[key] = None if kind is None else getattr(value, kind)
    return settings


def load_parameters(
    params: Mapping[str, pb.ModelRepositoryParameter],
) -> tuple[str | None, dict[str, bytes]]:
    """(config JSON, files) from RepositoryModelLoad parameters, with Triton's messages."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, param in params.items():
        kind = param.WhichOneof("parameter_choice")
        if key == "config":
            if kind != "string_param":
                raise invalid_arg(
                    f"invalid value type for load parameter '{key}', expected string_param."
                )
            config = param.string_param
        elif key.startswith("file:"):
            if kind != "bytes_param":
                raise invalid_arg(
                    f"invalid value type for load parameter '{key}', expected bytes_param."
                )
            files[key] = param.bytes_param
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'.")
    return config, files


def unload_dependents(params: Mapping[str, pb.ModelRepositoryParameter]) -> bool:
    if "unload_dependents" not in params:
        return False
    param = params["unload_dependents"]
    if param.WhichOneof("parameter_choice") != "bool_param":
        raise invalid_arg(
            "invalid value type for 'unload_dependents' parameter, expected bool_param."
        )
    return bool(param.bool_param)
