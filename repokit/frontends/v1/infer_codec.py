"""v1 inference: ``InferRequestHeader`` + raw input bytes -> protocol-neutral ``InferRequest``,
and ``InferResponse`` -> ``InferResponseHeader`` + raw output bytes.

v1 headers carry no datatypes and no batch dimension: each input's datatype comes from the
model config, its shape is ``[batch_size] + dims`` for batching models (``dims`` from the header
when given, else the config's, which must then be fixed-size), and its bytes are
``batch_byte_size`` long (computed from the shape for fixed-size datatypes; required for
STRING, whose elements are 4-byte length-prefixed). Over HTTP the inputs are concatenated in
header order in the body (:func:`split_body`); over gRPC each is one ``raw_input`` entry.
Classification outputs are requested raw from the core and turned into structured classes here
(:mod:`.classes`). Every problem is a ``RepokitError`` with a message naming the input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repokit.errors import invalid_arg
from repokit.frontends.v1.classes import batch_classes
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.generated.v1 import api_pb2
from repokit.protocol.tensor_codec import array_to_bytes, expected_byte_size
from repokit.protocol.types import (
    InferRequest,
    InferResponse,
    InputSpec,
    RequestedOutput,
    SharedMemoryRef,
)

RequestHeader = api_pb2.InferRequestHeader
ResponseHeader = api_pb2.InferResponseHeader
Buffer = bytes | bytearray | memoryview
LabelLookup = Callable[[str], Sequence[str]]


@dataclass
class DecodedInfer:
    """A v1 request in core terms plus what encoding its response needs."""

    request: InferRequest
    batch_size: int
    batching: bool
    classes: dict[str, int] = field(default_factory=dict)  # output name -> top-k count


def check_batch_size(header: Any, config: mc.ModelConfig) -> int:
    batch_size = int(header.batch_size)
    if batch_size < 1:
        raise invalid_arg(
            f"inference request batch-size must be >= 1 for model '{config.name}', got "
            f"{batch_size} (set batch_size in NV-InferRequest)"
        )
    if config.max_batch_size == 0 and batch_size != 1:
        raise invalid_arg(
            f"inference request batch-size must be 1 for model '{config.name}', which does "
            f"not support batching; got {batch_size}"
        )
    return batch_size


def _config_input(config: mc.ModelConfig, name: str) -> Any:
    for item in config.input:
        if item.name == name:
            return item
    raise invalid_arg(f"unexpected inference input '{name}' for model '{config.name}'")


def _dims(item: Any, config_item: Any, model: str) -> tuple[int, ...]:
    if item.dims:
        return tuple(int(d) for d in item.dims)
    dims = tuple(int(d) for d in config_item.dims)
    if -1 in dims:
        raise invalid_arg(
            f"input '{item.name}' for model '{model}' has variable-size dims "
            f"[{','.join(str(d) for d in dims)}] in the model config; NV-InferRequest must "
            "give its dims"
        )
    return dims


def _shape(item: Any, config: mc.ModelConfig, batch_size: int) -> tuple[str, tuple[int, ...]]:
    config_item = _config_input(config, item.name)
    dims = _dims(item, config_item, config.name)
    shape = (batch_size, *dims) if config.max_batch_size > 0 else dims
    return datatypes.protocol_name(config_item.data_type), shape


def input_byte_size(item: Any, config: mc.ModelConfig, batch_size: int) -> int:
    """The bytes an input occupies in the body: batch_byte_size, or computed when fixed-size."""
    datatype, shape = _shape(item, config, batch_size)
    if item.batch_byte_size:
        return int(item.batch_byte_size)
    expected = expected_byte_size(datatype, shape)
    if expected is None:
        raise invalid_arg(
            f"input '{item.name}' for model '{config.name}' has a variable-size datatype "
            f"({datatype}); NV-InferRequest must give its batch_byte_size"
        )
    return expected


def split_body(header: Any, config: mc.ModelConfig, body: Buffer) -> list[Buffer | None]:
    """The body cut into one buffer per header input (None for shared-memory inputs)."""
    batch_size = check_batch_size(header, config)
    view = memoryview(body)
    total = view.nbytes
    offset = 0
    parts: list[Buffer | None] = []
    for item in header.input:
        if item.HasField("shared_memory"):
            parts.append(None)
            continue
        size = input_byte_size(item, config, batch_size)
        if offset + size > total:
            raise invalid_arg(
                f"unexpected size for input '{item.name}' for model '{config.name}': it needs "
                f"{size} bytes at offset {offset} of the request body, which has only {total} "
                "bytes"
            )
        parts.append(view[offset : offset + size])
        offset += size
    if offset != total:
        raise invalid_arg(
            f"the request body for model '{config.name}' has {total} bytes but the inputs in "
            f"NV-InferRequest account for {offset} bytes"
        )
    return parts


def decode_request(
    model: str,
    version: str,
    header: Any,
    buffers: Sequence[Buffer | None],
    config: mc.ModelConfig,
) -> DecodedInfer:
    """The core request for a v1 header and its per-input buffers (None = shared memory)."""
    batch_size = check_batch_size(header, config)
    if len(buffers) != len(header.input):
        raise invalid_arg(
            f"expected {len(header.input)} raw inputs for model '{config.name}' (one per input "
            f"in the header), got {len(buffers)}"
        )
    inputs: list[InputSpec] = []
    for item, buffer in zip(header.input, buffers, strict=True):
        datatype, shape = _shape(item, config, batch_size)
        if item.HasField("shared_memory"):
            shm = item.shared_memory
            ref = SharedMemoryRef(shm.name, int(shm.offset), int(shm.byte_size))
            inputs.append(InputSpec(item.name, datatype, shape, None, shm=ref))
            continue
        if buffer is None:
            raise invalid_arg(f"no data for input '{item.name}' for model '{config.name}'")
        if item.batch_byte_size and memoryview(buffer).nbytes != item.batch_byte_size:
            raise invalid_arg(
                f"unexpected size {memoryview(buffer).nbytes} for input '{item.name}' for model "
                f"'{config.name}', batch_byte_size says {item.batch_byte_size}"
            )
        data = np.frombuffer(buffer, dtype=np.uint8)
        inputs.append(InputSpec(item.name, datatype, shape, data))
    outputs: list[RequestedOutput] = []
    classes: dict[str, int] = {}
    for out in header.output:
        shm_ref = None
        if out.HasField("shared_memory"):
            s = out.shared_memory
            shm_ref = SharedMemoryRef(s.name, int(s.offset), int(s.byte_size))
        if out.HasField("cls"):
            if out.cls.count < 1:
                raise invalid_arg(f"classification count for output '{out.name}' must be >= 1")
            if shm_ref is not None:
                raise invalid_arg(
                    f"output '{out.name}' can't be both a classification and in shared memory"
                )
            classes[out.name] = int(out.cls.count)
        outputs.append(RequestedOutput(out.name, shm=shm_ref))
    flags = int(header.flags)
    request = InferRequest(
        model_name=model,
        model_version=version,
        id=str(header.id) if header.id else "",
        inputs=inputs,
        outputs=outputs,
        sequence_id=int(header.correlation_id),
        sequence_start=bool(flags & RequestHeader.FLAG_SEQUENCE_START),
        sequence_end=bool(flags & RequestHeader.FLAG_SEQUENCE_END),
        priority=int(header.priority),
        timeout_us=int(header.timeout_microseconds),
    )
    return DecodedInfer(request, batch_size, config.max_batch_size > 0, classes)


def _raw_meta(datatype: str, shape: tuple[int, ...], batching: bool, size: int) -> Any:
    dims = shape[1:] if batching and shape else shape
    return ResponseHeader.Output.Raw(dims=list(dims), batch_byte_size=size)


def encode_response(
    decoded: DecodedInfer, response: InferResponse, labels: LabelLookup, header_id: int
) -> tuple[Any, list[Buffer]]:
    """The response header and the raw output buffers (classifications and shared-memory
    outputs have none), outputs in request order (model order when none were requested)."""
    out_header = ResponseHeader(
        id=header_id,
        model_name=response.model_name,
        model_version=int(response.model_version or 0),
        batch_size=decoded.batch_size,
    )
    tensors = {t.name: t for t in response.outputs}
    names = [o.name for o in decoded.request.outputs] or [t.name for t in response.outputs]
    raw: list[Buffer] = []
    for name in dict.fromkeys(names):
        entry = out_header.output.add(name=name)
        tensor = tensors.get(name)
        if tensor is None:
            in_shm = response.shm_outputs.get(name)
            if in_shm is None:
                continue
            ref, datatype, shape = in_shm
            size = expected_byte_size(datatype, shape)
            entry.data_type = _config_type(datatype)
            entry.raw.CopyFrom(_raw_meta(datatype, shape, decoded.batching, size or ref.byte_size))
            continue
        entry.data_type = _config_type(tensor.datatype)
        count = decoded.classes.get(name)
        if count is not None:
            entry.batch_classes.extend(
                batch_classes(
                    name,
                    tensor.datatype,
                    tensor.data,
                    count,
                    batching=decoded.batching,
                    labels=labels(name),
                )
            )
            continue
        data = array_to_bytes(tensor.datatype, tensor.data)
        entry.raw.CopyFrom(
            _raw_meta(tensor.datatype, tensor.shape, decoded.batching, memoryview(data).nbytes)
        )
        raw.append(data)
    return out_header, raw


def _config_type(datatype: str) -> Any:  # an mc.DataType value
    info = datatypes.from_protocol(datatype)
    return info.config if info is not None else mc.TYPE_INVALID
