"""Raw tensor bytes <-> numpy arrays (binary tensor data, gRPC raw contents, shared memory).

``array_from_bytes`` returns a read-only ``numpy.frombuffer`` view of the request buffer (no
copy) after checking the byte size against shape x element size, with Triton's message.
``array_to_bytes`` returns a memoryview over the array's own memory when it is already
C-contiguous little-endian in the protocol dtype, and converts once otherwise.

BF16 travels as ``uint16`` words, BOOL as one byte per element, BYTES as length-prefixed
elements (see :mod:`repokit.protocol.bytes_tensor`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import invalid_arg
from repokit.protocol import datatypes
from repokit.protocol.array_shape import shaped
from repokit.protocol.bytes_tensor import Buffer, deserialize_bytes_tensor, serialize_bytes_tensor

_BF16_WORDS = np.dtype("<u2")


def wire_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype a protocol datatype is stored as (BF16 -> uint16, BYTES -> object)."""
    info = datatypes.from_protocol(datatype)
    if info is None:
        raise invalid_arg(f"invalid datatype '{datatype}'")
    if info.numpy is None:
        return _BF16_WORDS
    return info.numpy


def element_count(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def expected_byte_size(datatype: str, shape: Sequence[int]) -> int | None:
    """shape x element size, or None for BYTES (variable size)."""
    info = datatypes.from_protocol(datatype)
    if info is None:
        raise invalid_arg(f"invalid datatype '{datatype}'")
    if info.itemsize == 0:
        return None
    return element_count(shape) * info.itemsize


def array_from_bytes(
    datatype: str,
    shape: Sequence[int],
    buffer: Buffer,
    *,
    input_name: str,
    model_name: str,
) -> npt.NDArray[Any]:
    """A read-only array of ``shape`` over ``buffer``; INVALID_ARG when the size is wrong."""
    dims = tuple(int(d) for d in shape)
    count = element_count(dims)
    if datatype == "BYTES":
        strings = deserialize_bytes_tensor(
            buffer, count, input_name=input_name, model_name=model_name
        )
        return shaped(strings, dims)
    dtype = wire_dtype(datatype)
    expected = count * dtype.itemsize
    got = memoryview(buffer).nbytes
    if got != expected:
        raise invalid_arg(
            f"input byte size mismatch for input '{input_name}' for model '{model_name}'. "
            f"Expected {expected}, got {got}"
        )
    array = shaped(np.frombuffer(buffer, dtype=dtype), dims)
    array.flags.writeable = False
    return array


def array_to_bytes(datatype: str, array: npt.NDArray[Any]) -> bytes | memoryview:
    """The little-endian row-major bytes of ``array`` as ``datatype`` (zero-copy when possible)."""
    if datatype == "BYTES":
        return serialize_bytes_tensor(array)
    dtype = wire_dtype(datatype)
    contiguous = np.ascontiguousarray(array, dtype=dtype)
    return contiguous.reshape(-1).view(np.uint8).data


def output_byte_size(datatype: str, array: npt.NDArray[Any]) -> int:
    """Bytes ``array_to_bytes`` will produce (serialises BYTES tensors to count them)."""
    if datatype == "BYTES":
        return len(serialize_bytes_tensor(array))
    return int(array.size) * wire_dtype(datatype).itemsize
