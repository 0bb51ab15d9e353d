"""The ModelInferResponse bytes of a common response, written from pieces made once (instance
process).

:func:`common_response` writes the bytes
:func:`repokit.protocol.plain_response.plain_grpc_response` serializes (byte for byte: protobuf's
encoding of the same fields in field-number order, as the message's serializer writes them),
for the response most models return: an ``InferenceResponse`` without error or parameters whose
requested outputs are ``Tensor`` objects of a fixed-size numeric datatype. The model's fields
and each output's ``InferOutputTensor`` (by name, dtype and shape) are encoded once and kept;
per response only the id and the outputs' raw contents are written. Anything else gives None
and :mod:`.wire_grpc` builds the response as before (``tests/backends/test_wire_grpc_response.py``
compares both).
"""

from __future__ import annotations

from typing import Any

from repokit.backends.python import pb_utils
from repokit.backends.python.wire_checks import OUTPUT_DATATYPES
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.grpc_raw import encode_varint

_PARTS_KEPT = 1024  # output parts kept (shapes vary with the batch size, and may vary more)
_model_part: tuple[WirePlan, bytes] | None = None
_output_parts: dict[tuple[str, Any, tuple[int, ...]], bytes] = {}
# ModelInferResponse's fields: model_name 1, model_version 2, id 3, outputs 5 (messages),
# raw_output_contents 6; InferOutputTensor's: name 1, datatype 2, shape 3 (packed int64)
_ID, _OUTPUT, _RAW = b"\x1a", b"\x2a", b"\x32"


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (omitted when empty, as proto3 writes a string)."""
    return tag + encode_varint(len(payload)) + payload if payload else b""


def common_response(
    plan: WirePlan, response: Any, requested: set[str], request_id: str
) -> bytes | None:
    """The serialized response, or None when it is not in the common form (see the module)."""
    global _model_part
    if (
        type(response) is not pb_utils.InferenceResponse
        or response._error is not None
        or response._parameters
    ):
        return None
    outputs: list[bytes] = []
    contents: list[bytes] = []
    for tensor in response._outputs:
        if type(tensor) is not pb_utils.Tensor or tensor._bf16:
            return None
        name = tensor._name
        if name not in requested:
            continue
        array = tensor._array
        key = (name, array.dtype, array.shape)
        part = _output_parts.get(key)
        if part is None:
            part = _output_part(key)
            if part is None:
                return None
        outputs.append(part)
        data = array.tobytes()
        contents.append(_RAW + encode_varint(len(data)) + data)
    model = _model_part
    if model is None or model[0] is not plan:
        head = _field(b"\x0a", plan.model_name.encode()) + _field(
            b"\x12", plan.version_text.encode()
        )
        model = _model_part = (plan, head)
    return b"".join([model[1], _field(_ID, request_id.encode()), *outputs, *contents])


def _output_part(key: tuple[str, Any, tuple[int, ...]]) -> bytes | None:
    """An output's InferOutputTensor field, kept; None for a dtype without a fixed-size
    protocol datatype (BYTES, or a byte order not native)."""
    name, dtype, shape = key
    datatype = OUTPUT_DATATYPES.get(dtype)
    if datatype is None:
        return None
    if len(_output_parts) >= _PARTS_KEPT:
        _output_parts.clear()
    try:
        encoded = name.encode()
    except UnicodeEncodeError:  # the message's serializer decides what happens to it
        return None
    dims = b"".join([encode_varint(int(d)) for d in shape])
    body = _field(b"\x0a", encoded) + _field(b"\x12", datatype.encode())
    body += _field(b"\x1a", dims)
    part = _OUTPUT + encode_varint(len(body)) + body  # a repeated message: written even if empty
    _output_parts[key] = part
    return part
