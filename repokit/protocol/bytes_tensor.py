"""BYTES tensors on the wire: each element is a 4-byte little-endian length followed by its bytes.

This is the encoding of Triton's binary tensor data extension, of gRPC ``raw_input_contents``
and of shared-memory regions. In memory a BYTES tensor is a numpy ``object`` array of ``bytes``.

``serialize_bytes_tensor`` joins once (``b"".join``); ``deserialize_bytes_tensor`` walks the
buffer with ``struct.unpack_from`` and slices it once per element, so both are linear in the
payload. Malformed data raises ``RepokitError(INVALID_ARG)`` with Triton's wording when the
input and model names are known.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import invalid_arg

_LENGTH = struct.Struct("<I")
_LENGTH_SIZE = _LENGTH.size

Buffer = bytes | bytearray | memoryview


def _element_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, np.bytes_):
        return bytes(value)
    return str(value).encode("utf-8")


def serialize_elements(elements: Iterable[Any]) -> bytes:
    """Length-prefix and join elements (bytes as-is, str as UTF-8, anything else via str())."""
    pack = _LENGTH.pack
    parts: list[bytes] = []
    append = parts.append
    for element in elements:
        data = _element_bytes(element)
        append(pack(len(data)))
        append(data)
    return b"".join(parts)


def serialize_bytes_tensor(array: npt.NDArray[Any]) -> bytes:
    """The wire form of a BYTES tensor, elements in C (row-major) order."""
    if array.size == 0:
        return b""
    if array.dtype.kind in ("S", "U", "O"):
        return serialize_elements(np.ravel(array, order="C").tolist())
    raise invalid_arg(
        f"cannot serialize a numpy array of dtype '{array.dtype}' as BYTES: "
        "expected an object, bytes or str array"
    )


def _where(input_name: str | None, model_name: str | None) -> str:
    if input_name is None:
        return "BYTES tensor"
    if model_name is None:
        return f"inference input '{input_name}'"
    return f"inference input '{input_name}' for model '{model_name}'"


def deserialize_bytes_tensor(
    buffer: Buffer,
    expected_count: int | None = None,
    *,
    input_name: str | None = None,
    model_name: str | None = None,
    request_prefix: str = "",
) -> npt.NDArray[np.object_]:
    """Split a length-prefixed buffer into a 1-D object array of ``bytes``.

    With ``expected_count`` the element count must match exactly (Triton's
    "expected N string elements ..." / "unexpected number of string elements ..." errors).
    ``request_prefix`` (``[request id: ...] ``) starts every message but the one for string
    data running past the end, which Triton 2.51 words without it and without the model.
    """
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    total = len(data)
    where = _where(input_name, model_name)
    unpack = _LENGTH.unpack_from
    elements: list[bytes] = []
    append = elements.append
    offset = 0
    while offset < total:
        if expected_count is not None and len(elements) >= expected_count:
            raise invalid_arg(
                f"{request_prefix}unexpected number of string elements {len(elements) + 1} "
                f"for {where}, "
                f"expecting {expected_count}"
            )
        remaining = total - offset
        if remaining < _LENGTH_SIZE:
            raise invalid_arg(
                f"{request_prefix}incomplete string length indicator for {where}, expecting "
                f"{_LENGTH_SIZE} bytes but only {remaining} bytes available. Please make sure "
                "the string length indicator is in one buffer."
            )
        (length,) = unpack(data, offset)
        offset += _LENGTH_SIZE
        if length > total - offset:
            raise invalid_arg(
                f"incomplete string data for {_where(input_name, None)}, expecting string of "
                f"length {length} "
                f"but only {total - offset} bytes available"
            )
        append(data[offset : offset + length])
        offset += length
    if expected_count is not None and len(elements) != expected_count:
        raise invalid_arg(
            f"{request_prefix}expected {expected_count} string elements for {where}, "
            f"got {len(elements)}"
        )
    result = np.empty(len(elements), dtype=object)
    result[:] = elements
    return result
