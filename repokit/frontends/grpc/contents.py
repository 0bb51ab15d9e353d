"""Typed ``InferTensorContents`` -> numpy arrays, with Triton's field/datatype rules.

Which repeated field serves which datatype (server ``InferGRPCToInput``): ``int_contents`` holds
INT8/INT16/INT32 (narrowed to the low bytes, as Triton does on little-endian hosts),
``uint_contents`` UINT8/UINT16/UINT32, and one field each for BOOL, INT64, UINT64, FP32, FP64 and
BYTES. FP16 and BF16 have no typed field: they travel only as raw bytes. Triton checks the fields
in proto order; a field whose type does not match the declared datatype, or a second non-empty
field, is an INVALID_ARG error. The element count is checked later by the core.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import RepokitError, invalid_arg
from repokit.protocol import datatypes
from repokit.protocol.generated import grpc_service_pb2 as pb

# field name -> (datatypes it may carry, the protocol type Triton names when it does not fit)
_FIELDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("bool_contents", ("BOOL",), "BOOL"),
    ("int_contents", ("INT8", "INT16", "INT32"), "INT32"),
    ("int64_contents", ("INT64",), "INT64"),
    ("uint_contents", ("UINT8", "UINT16", "UINT32"), "UINT32"),
    ("uint64_contents", ("UINT64",), "UINT64"),
    ("fp32_contents", ("FP32",), "FP32"),
    ("fp64_contents", ("FP64",), "FP64"),
    ("bytes_contents", ("BYTES",), "BYTES"),
)

# datatype -> numpy dtype the repeated field is read as before narrowing
_SOURCE_DTYPE: dict[str, str] = {
    "BOOL": "bool",
    "INT8": "<i4",
    "INT16": "<i4",
    "INT32": "<i4",
    "INT64": "<i8",
    "UINT8": "<u4",
    "UINT16": "<u4",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "FP32": "<f4",
    "FP64": "<f8",
}

# datatype -> the narrower dtype the values are cast to after reading
_TARGET_DTYPE: dict[str, np.dtype[Any]] = {
    name: datatypes.numpy_dtype(name) for name in ("INT8", "INT16", "UINT8", "UINT16")
}


#: protocol datatype names Triton's gRPC frontend recognises; any other string is TYPE_INVALID
KNOWN_DATATYPES: frozenset[str] = frozenset({*_SOURCE_DTYPE, "BYTES", "FP16", "BF16"})
INVALID_DATATYPE = "<invalid>"


def _shown_datatype(datatype: str) -> str:
    """How Triton prints a request datatype (unknown strings become INVALID)."""
    return datatype if datatype in KNOWN_DATATYPES else INVALID_DATATYPE


def _mismatch(name: str, model: str, field_type: str, datatype: str) -> RepokitError:
    return invalid_arg(
        f"unexpected explicit tensor data for input tensor '{name}' for model '{model}' of "
        f"type '{field_type}', expected datatype '{_shown_datatype(datatype)}'"
    )


def array_from_contents(
    tensor: pb.ModelInferRequest.InferInputTensor, model: str
) -> npt.NDArray[Any]:
    """The tensor's typed contents as a flat array of its datatype (the core checks the count
    against the shape and reshapes)."""
    name = tensor.name
    datatype = tensor.datatype
    contents = tensor.contents
    chosen: str | None = None
    for field_name, serves, field_type in _FIELDS:
        if len(getattr(contents, field_name)) == 0:
            continue
        if chosen is not None:
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}', binary data was already supplied."
            )
        if datatype not in serves:
            raise _mismatch(name, model, field_type, datatype)
        chosen = field_name
    if chosen is None:
        # contents present but empty: no elements, which the core's size check judges
        return np.empty(0, dtype=object if datatype == "BYTES" else np.uint8)
    if chosen == "bytes_contents":
        strings = np.empty(len(contents.bytes_contents), dtype=object)
        strings[:] = list(contents.bytes_contents)
        return strings
    values = np.asarray(getattr(contents, chosen), dtype=_SOURCE_DTYPE[datatype])
    target = _TARGET_DTYPE.get(datatype)
    if target is not None:
        values = values.astype(target)  # keeps the low bytes, as Triton does
    return values
