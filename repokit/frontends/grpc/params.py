"""InferParameter maps <-> plain values, with Triton's gRPC typing rules and messages.

Triton reads request-level parameters in ``SetInferenceRequestMetadata`` and tensor-level
shared-memory and classification parameters in ``ParseSharedMemoryParams`` /
``ParseClassificationParams`` (server ``src/grpc/infer_handler.{h,cc}``). Each rule below keeps
that function's accepted oneof cases and its exact error text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from repokit.errors import invalid_arg
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.types import ParamValue, SharedMemoryRef

#: ``triton_``-prefixed request parameters a client may set (Triton's
#: ``TRITON_RESERVED_REQUEST_PARAMS``).
ALLOWED_TRITON_PARAMS: tuple[str, ...] = ("triton_enable_empty_final_response",)


@dataclass
class RequestControls:
    """The request-level parameters Triton interprets itself, plus the custom ones."""

    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    priority: int = 0
    timeout_us: int = 0
    enable_empty_final_response: bool = False
    custom: dict[str, ParamValue] = field(default_factory=dict)


def _kind(param: pb.InferParameter) -> str | None:
    kind: str | None = param.WhichOneof("parameter_choice")
    return kind


def parse_request_parameters(params: Mapping[str, pb.InferParameter]) -> RequestControls:
    controls = RequestControls()
    for key, param in params.items():
        kind = _kind(param)
        if key == "sequence_id":
            if kind == "int64_param":
                controls.sequence_id = param.int64_param
            elif kind == "string_param":
                controls.sequence_id = param.string_param
            else:
                raise invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected "
                    "int64_param or string_param."
                )
        elif key in ("sequence_start", "sequence_end"):
            if kind != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            setattr(controls, key, param.bool_param)
        elif key == "priority":
            if kind == "int64_param":
                if param.int64_param < 0:
                    raise invalid_arg("invalid value for 'priority', expected value >= 0.")
                controls.priority = param.int64_param
            elif kind == "uint64_param":
                controls.priority = param.uint64_param
            else:
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected "
                    "int64_param or uint64_param."
                )
        elif key == "timeout":
            if kind != "int64_param":
                raise invalid_arg(
                    "invalid value type for 'timeout' parameter, expected int64_param."
                )
            controls.timeout_us = param.int64_param
        elif key.startswith("triton_"):
            if key not in ALLOWED_TRITON_PARAMS:
                raise invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. "
                    "Only the following keys starting with 'triton_' are allowed: "
                    + " ".join(ALLOWED_TRITON_PARAMS)
                )
            if kind != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            controls.enable_empty_final_response = param.bool_param
        else:
            if kind == "int64_param":
                controls.custom[key] = param.int64_param
            elif kind == "bool_param":
                controls.custom[key] = param.bool_param
            elif kind == "string_param":
                controls.custom[key] = param.string_param
            elif kind == "double_param":
                controls.custom[key] = param.double_param
            else:
                raise invalid_arg(
                    f"invalid value type for '{key}' parameter, expected "
                    "int64_param, bool_param, or string_param."
                )
    return controls


def parse_shared_memory(
    tensor_name: str, params: Mapping[str, pb.InferParameter]
) -> SharedMemoryRef | None:
    """The shared-memory placement of an input or output, or None when it has none."""
    region: str | None = None
    offset = 0
    byte_size: int | None = None
    if "shared_memory_region" in params:
        param = params["shared_memory_region"]
        if _kind(param) != "string_param":
            raise invalid_arg(
                "invalid value type for 'shared_memory_region' parameter for tensor "
                f"'{tensor_name}', expected string_param."
            )
        region = param.string_param
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        if key not in params:
            continue
        if region is None:
            raise invalid_arg(
                f"'{key}' can not be specified without 'shared_memory_region' parameter "
                f"for tensor '{tensor_name}'"
            )
        param = params[key]
        if _kind(param) != "int64_param":
            raise invalid_arg(
                f"invalid value type for '{key}' parameter for tensor '{tensor_name}', "
                "expected int64_param."
            )
        if key == "shared_memory_offset":
            offset = param.int64_param
        else:
            byte_size = param.int64_param
    if region is None:
        return None
    if byte_size is None:
        raise invalid_arg(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor '{tensor_name}'"
        )
    return SharedMemoryRef(region=region, offset=offset, byte_size=byte_size)


def parse_classification(params: Mapping[str, pb.InferParameter]) -> int:
    """The requested top-N classification count, 0 when not requested."""
    if "classification" not in params:
        return 0
    param = params["classification"]
    if _kind(param) != "int64_param":
        raise invalid_arg("invalid value type for 'classification' parameter, expected int64_param")
    if param.int64_param <= 0:
        # Triton's text says ">= 0" although it rejects 0 as well.
        raise invalid_arg("invalid value for 'classification' parameter, expected >= 0")
    return int(param.int64_param)


def set_parameter(target: pb.InferParameter, value: ParamValue) -> None:
    """Write a plain value into an InferParameter (bool before int: bool is an int)."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)
