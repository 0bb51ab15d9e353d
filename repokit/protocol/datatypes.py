"""The datatype table: KServe v2 protocol name <-> numpy dtype <-> model-config TYPE_*.

BYTES is Triton's protocol name for TYPE_STRING (numpy ``object`` arrays of ``bytes``);
BF16 has no numpy dtype and travels as raw 2-byte little-endian words (numpy ``uint16``
views when a backend needs an array).

This is the one datatype table of the package: every other mapping (the python backend's
``pb_utils`` type helpers and wire-lane outputs, the plain-JSON decoder, the gRPC typed
contents) is derived from it. It needs numpy only (the ``TYPE_*`` values of model_config.proto
are written out; a test holds them against the generated module), so the instance process of
the python backend can use it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DataType:
    protocol: str  # "FP32", "BYTES", ...
    config: int  # mc.TYPE_FP32 ...
    config_name: str  # "TYPE_FP32"
    numpy: np.dtype[np.generic] | None  # None for BF16
    itemsize: int  # 0 for BYTES (variable)


def _dt(
    protocol: str, config: int, config_name: str, np_dtype: str | None, itemsize: int
) -> DataType:
    return DataType(
        protocol=protocol,
        config=config,
        config_name=config_name,
        numpy=None if np_dtype is None else np.dtype(np_dtype),
        itemsize=itemsize,
    )


_TABLE: tuple[DataType, ...] = (
    _dt("BOOL", 1, "TYPE_BOOL", "bool", 1),
    _dt("UINT8", 2, "TYPE_UINT8", "<u1", 1),
    _dt("UINT16", 3, "TYPE_UINT16", "<u2", 2),
    _dt("UINT32", 4, "TYPE_UINT32", "<u4", 4),
    _dt("UINT64", 5, "TYPE_UINT64", "<u8", 8),
    _dt("INT8", 6, "TYPE_INT8", "<i1", 1),
    _dt("INT16", 7, "TYPE_INT16", "<i2", 2),
    _dt("INT32", 8, "TYPE_INT32", "<i4", 4),
    _dt("INT64", 9, "TYPE_INT64", "<i8", 8),
    _dt("FP16", 10, "TYPE_FP16", "<f2", 2),
    _dt("FP32", 11, "TYPE_FP32", "<f4", 4),
    _dt("FP64", 12, "TYPE_FP64", "<f8", 8),
    _dt("BYTES", 13, "TYPE_STRING", "object", 0),
    _dt("BF16", 14, "TYPE_BF16", None, 2),
)

BY_PROTOCOL: dict[str, DataType] = {d.protocol: d for d in _TABLE}
BY_CONFIG: dict[int, DataType] = {d.config: d for d in _TABLE}
BY_CONFIG_NAME: dict[str, DataType] = {d.config_name: d for d in _TABLE}
#: the integer datatypes
INTEGERS: tuple[str, ...] = (
    "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"
)  # fmt: skip
#: the floating-point datatypes that have a JSON number form (FP16 and BF16 are binary only)
JSON_FLOATS: tuple[str, ...] = ("FP32", "FP64")
#: numpy dtype (native byte order) -> protocol name, for the fixed-size types numpy has
NUMPY_TO_PROTOCOL: dict[np.dtype[np.generic], str] = {
    d.numpy: d.protocol for d in _TABLE if d.numpy is not None and d.itemsize > 0
}


def from_protocol(name: str) -> DataType | None:
    """The datatype for a protocol string (case-sensitive, as Triton), or None if unknown."""
    return BY_PROTOCOL.get(name)


def numpy_dtype(protocol: str) -> np.dtype[np.generic]:
    """The numpy dtype of a protocol datatype that has one (not BF16); KeyError otherwise."""
    found = BY_PROTOCOL[protocol].numpy
    if found is None:
        raise KeyError(protocol)
    return found


def from_config(value: int) -> DataType | None:
    return BY_CONFIG.get(value)


def protocol_name(config_value: int) -> str:
    """Protocol string for a TYPE_* value; "INVALID" for TYPE_INVALID or unknown values."""
    d = BY_CONFIG.get(config_value)
    return d.protocol if d is not None else "INVALID"


def from_numpy(dtype: np.dtype[np.generic]) -> DataType | None:
    if dtype.kind in ("O", "S", "U"):
        return BY_PROTOCOL["BYTES"]
    for d in _TABLE:
        if d.numpy is not None and d.numpy.kind == dtype.kind and d.itemsize == dtype.itemsize:
            return d
    return None
