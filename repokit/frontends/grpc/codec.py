"""ModelInferRequest -> InferRequest and InferResponse -> ModelInferResponse.

Decoding follows Triton's ``InferGRPCToInput`` (server ``src/grpc/infer_handler.cc``): per input,
shared-memory parameters first, then typed ``contents``, then the next unconsumed
``raw_input_contents`` entry. Raw data is wrapped without copying (``numpy.frombuffer``);
typed contents are converted once by numpy. Outputs always go to ``raw_output_contents``,
index-aligned with ``outputs`` (BYTES as 4-byte little-endian length-prefixed elements).

Raw input bytes are handed to the core as read-only ``uint8`` views (no copy, no check here):
the core's request checks validate datatype, shape and byte size in Triton's order and words
and view the bytes as the datatype. Typed contents become flat arrays of the datatype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import invalid_arg
from repokit.frontends.grpc.contents import INVALID_DATATYPE, KNOWN_DATATYPES, array_from_contents
from repokit.frontends.grpc.params import (
    parse_classification,
    parse_request_parameters,
    parse_shared_memory,
    set_parameter,
)
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.grpc_raw import (
    MessageParts,
    message_bytes,
    raw_output_parts,
    split_raw_inputs,
)
from repokit.protocol.tensor_codec import array_to_bytes, wire_dtype
from repokit.protocol.types import (
    InferRequest,
    InferResponse,
    InferTensor,
    InputSpec,
    RequestedOutput,
)

# messages larger than this are parsed and serialized without copying their raw tensor bytes
# through the protobuf runtime (:mod:`repokit.protocol.grpc_raw`); smaller ones the plain way
RAW_SPLIT_BYTES = 64 * 1024


def parse_infer_request(raw: bytes) -> tuple[pb.ModelInferRequest, list[memoryview] | None]:
    """The ModelInferRequest of ``raw``, and for a large one its ``raw_input_contents`` as
    views of ``raw`` (the message then has none); raises DecodeError as ``FromString``."""
    if len(raw) > RAW_SPLIT_BYTES:
        split = split_raw_inputs(raw)
        if split is not None:
            head, contents = split
            return pb.ModelInferRequest.FromString(head), contents
    return pb.ModelInferRequest.FromString(raw), None


@dataclass
class DecodedRequest:
    request: InferRequest
    enable_empty_final_response: bool = False


def decode_infer_request(
    msg: pb.ModelInferRequest, raw_contents: Sequence[bytes | memoryview] | None = None
) -> DecodedRequest:
    """Decode a ModelInferRequest; RepokitError(INVALID_ARG) with Triton's messages.
    ``raw_contents``: the message's raw input contents when it was parsed without them
    (:func:`parse_infer_request`)."""
    model = msg.model_name
    request_params = msg.parameters
    # no request parameters (the common case): the defaults, without walking an empty map
    controls = parse_request_parameters(request_params) if request_params else None
    if raw_contents is None:
        raw_contents = msg.raw_input_contents
    raw_index = 0
    inputs: list[InputSpec] = []
    for tensor in msg.inputs:
        name = tensor.name
        shape = tuple(tensor.shape)
        tensor_params = tensor.parameters
        shm = parse_shared_memory(name, tensor_params) if tensor_params else None
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
            data = array_from_contents(tensor, model)
        elif raw_index < len(raw_contents):
            data = np.frombuffer(raw_contents[raw_index], dtype=np.uint8)
            raw_index += 1
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        datatype = tensor.datatype
        if datatype not in KNOWN_DATATYPES:
            datatype = INVALID_DATATYPE  # Triton parses the string to TYPE_INVALID and shows this
        inputs.append(InputSpec(name=name, datatype=datatype, shape=shape, data=data, shm=shm))
    outputs: list[RequestedOutput] = []
    for requested in msg.outputs:
        out_params = requested.parameters
        if not out_params:
            outputs.append(RequestedOutput(name=requested.name))
            continue
        out_shm = parse_shared_memory(requested.name, out_params)
        classification = parse_classification(out_params)
        if out_shm is not None and classification:
            raise invalid_arg("output can't set both 'shared_memory_region' and 'classification'")
        outputs.append(
            RequestedOutput(name=requested.name, classification=classification, shm=out_shm)
        )
    if controls is None:
        plain = InferRequest(
            model_name=model, model_version=msg.model_version, id=msg.id, inputs=inputs,
            outputs=outputs,
        )  # fmt: skip
        return DecodedRequest(plain)
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
    if response.parameters:
        for key, value in response.parameters.items():
            set_parameter(msg.parameters[key], value)
    if response.shm_outputs:
        _encode_outputs_with_shm(response, msg)
        return msg
    add_output = msg.outputs.add
    raw = msg.raw_output_contents
    for tensor in response.outputs:
        datatype = tensor.datatype
        out = add_output(name=tensor.name, datatype=datatype, shape=tensor.shape)
        if tensor.parameters:
            for key, value in tensor.parameters.items():
                set_parameter(out.parameters[key], value)
        raw.append(_output_bytes(datatype, tensor.data))
    return msg


def encode_infer_response_bytes(response: InferResponse) -> bytes:
    """The serialized ModelInferResponse of ``response``: outputs of more than
    :data:`RAW_SPLIT_BYTES` in all are written into the message once (the protobuf runtime
    would copy them three times), smaller ones through the runtime."""
    return message_bytes(encode_infer_response_message(response))


def encode_infer_response_message(response: InferResponse) -> bytes | MessageParts:
    """:func:`encode_infer_response_bytes`, except that outputs of more than
    :data:`RAW_SPLIT_BYTES` in all come as :class:`~repokit.protocol.grpc_raw.MessageParts`:
    the serialized rest of the message, then each output's own memory (not copied)."""
    if response.shm_outputs or (
        sum(t.data.nbytes for t in response.outputs if t.datatype != "BYTES") <= RAW_SPLIT_BYTES
    ):
        body: bytes = encode_infer_response(response).SerializeToString()
        return body
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    if response.parameters:
        for key, value in response.parameters.items():
            set_parameter(msg.parameters[key], value)
    blobs: list[Any] = []
    for tensor in response.outputs:
        _add_output(msg, tensor)
        blobs.append(_output_view(tensor.datatype, tensor.data))
    return raw_output_parts(msg.SerializeToString(), blobs)


def _output_view(datatype: str, data: npt.NDArray[Any]) -> Any:
    """The wire bytes of one output as a byte view of the array when it has them already
    (contiguous, little-endian), else as a copy."""
    if datatype == "BYTES":
        return bytes(array_to_bytes(datatype, data))
    wire = np.ascontiguousarray(data, dtype=wire_dtype(datatype))
    return wire.reshape(-1).view(np.uint8)


def _output_bytes(datatype: str, data: npt.NDArray[Any]) -> bytes:
    """The wire bytes of one output with a single copy (``tobytes`` of the little-endian,
    contiguous array; BYTES tensors are serialized)."""
    if datatype == "BYTES":
        return bytes(array_to_bytes(datatype, data))
    return np.ascontiguousarray(data, dtype=wire_dtype(datatype)).tobytes()


def _add_output(msg: pb.ModelInferResponse, tensor: InferTensor) -> None:
    out = msg.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
    for key, value in tensor.parameters.items():
        set_parameter(out.parameters[key], value)


def _encode_outputs_with_shm(response: InferResponse, msg: pb.ModelInferResponse) -> None:
    """Outputs in the model's order, as Triton lists them; a shm output has an empty raw entry."""
    in_memory = {tensor.name: tensor for tensor in response.outputs}
    order = response.output_order or [*in_memory, *response.shm_outputs]
    for name in order:
        tensor = in_memory.get(name)
        if tensor is not None:
            _add_output(msg, tensor)
            msg.raw_output_contents.append(_output_bytes(tensor.datatype, tensor.data))
        elif name in response.shm_outputs:
            _ref, datatype, shape = response.shm_outputs[name]
            msg.outputs.add(name=name, datatype=datatype, shape=shape)
            msg.raw_output_contents.append(b"")


def empty_response(model_name: str, model_version: str, request_id: str) -> pb.ModelInferResponse:
    return pb.ModelInferResponse(model_name=model_name, model_version=model_version, id=request_id)
