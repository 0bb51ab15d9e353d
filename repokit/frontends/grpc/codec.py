"""ModelInferRequest -> InferRequest and InferResponse -> ModelInferResponse.

Decoding follows Triton's ``InferGRPCToInput`` (server ``src/grpc/infer_handler.cc``): per input,
shared-memory parameters first, then typed ``contents``, then the next unconsumed
``raw_input_contents`` entry. Raw and shared-memory data are wrapped without copying
(``numpy.frombuffer`` via :func:`repokit.protocol.tensor_codec.array_from_bytes`); typed contents
are converted once by numpy. Outputs always go to ``raw_output_contents``, index-aligned with
``outputs`` (BYTES as 4-byte little-endian length-prefixed elements).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from repokit.errors import RepokitError, invalid_arg
from repokit.frontends.grpc.contents import array_from_contents
from repokit.frontends.grpc.params import (
    parse_classification,
    parse_request_parameters,
    parse_shared_memory,
    set_parameter,
)
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.tensor_codec import array_from_bytes, array_to_bytes
from repokit.protocol.types import InferRequest, InferResponse, InputSpec, RequestedOutput


@dataclass
class DecodedRequest:
    request: InferRequest
    enable_empty_final_response: bool = False


def request_prefix(request_id: str) -> str:
    """Triton's prefix on request-time errors raised by its core (``LogRequest``)."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def _raw_array(
    datatype: str, shape: tuple[int, ...], raw: bytes, name: str, model: str
) -> npt.NDArray[Any]:
    try:
        return array_from_bytes(datatype, shape, raw, input_name=name, model_name=model)
    except ValueError as exc:  # shapes numpy cannot build (negative dims and the like)
        raise invalid_arg(
            f"invalid shape {list(shape)} for input '{name}' for model '{model}': {exc}"
        ) from None


def _tensor_data(
    msg: pb.ModelInferRequest, tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes | None
) -> npt.NDArray[Any]:
    """Decode one input's contents or raw bytes. Size errors are Triton core errors there,
    so they carry the core's ``[request id: ...]`` prefix."""
    try:
        if raw is None:
            return array_from_contents(tensor, msg.model_name)
        return _raw_array(tensor.datatype, tuple(tensor.shape), raw, tensor.name, msg.model_name)
    except RepokitError as error:
        if error.message.startswith("unexpected explicit tensor data"):
            raise
        raise RepokitError(error.code, request_prefix(msg.id) + error.message) from None


def decode_infer_request(msg: pb.ModelInferRequest) -> DecodedRequest:
    """Decode a ModelInferRequest; RepokitError(INVALID_ARG) with Triton's messages."""
    model = msg.model_name
    controls = parse_request_parameters(msg.parameters)
    raw_contents = msg.raw_input_contents
    raw_index = 0
    inputs: list[InputSpec] = []
    for tensor in msg.inputs:
        name = tensor.name
        shape = tuple(tensor.shape)
        shm = parse_shared_memory(name, tensor.parameters)
        has_contents = tensor.HasField("contents")
        data: npt.NDArray[Any] | None
        if shm is not None:
            if has_contents:
                raise invalid_arg(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{name}' for model '{model}'"
                )
            data = None
        elif has_contents:
            if len(raw_contents) > 0:
                raise invalid_arg(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model}'"
                )
            data = _tensor_data(msg, tensor, None)
        elif raw_index < len(raw_contents):
            data = _tensor_data(msg, tensor, raw_contents[raw_index])
            raw_index += 1
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        inputs.append(
            InputSpec(name=name, datatype=tensor.datatype, shape=shape, data=data, shm=shm)
        )
    outputs: list[RequestedOutput] = []
    for requested in msg.outputs:
        out_shm = parse_shared_memory(requested.name, requested.parameters)
        classification = parse_classification(requested.parameters)
        if out_shm is not None and classification:
            raise invalid_arg("output can't set both 'shared_memory_region' and 'classification'")
        outputs.append(
            RequestedOutput(name=requested.name, classification=classification, shm=out_shm)
        )
    request = InferRequest(
        model_name=model,
        model_version=msg.model_version,
        id=msg.id,
        inputs=inputs,
        outputs=outputs,
        parameters=controls.custom,
        sequence_id=controls.sequence_id,
        sequence_start=controls.sequence_start,
        sequence_end=controls.sequence_end,
        priority=controls.priority,
        timeout_us=controls.timeout_us,
    )
    return DecodedRequest(request, controls.enable_empty_final_response)


def encode_infer_response(response: InferResponse) -> pb.ModelInferResponse:
    """Outputs in ``raw_output_contents`` (one entry per output, empty for shm outputs)."""
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        set_parameter(msg.parameters[key], value)
    raw: list[bytes] = []
    for tensor in response.outputs:
        out = msg.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        for key, value in tensor.parameters.items():
            set_parameter(out.parameters[key], value)
        raw.append(bytes(array_to_bytes(tensor.datatype, tensor.data)))
    for name, (_ref, datatype, shape) in response.shm_outputs.items():
        msg.outputs.add(name=name, datatype=datatype, shape=shape)
        raw.append(b"")
    msg.raw_output_contents.extend(raw)
    return msg


def empty_response(model_name: str, model_version: str, request_id: str) -> pb.ModelInferResponse:
    return pb.ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id)
