"""The datatype table: KServe v2 protocol name <-> numpy dtype <-> model-config TYPE_*.

BYTES is Triton's protocol name for TYPE_STRING (numpy ``object`` arrays of ``bytes``);
BF16 has no numpy dtype and travels as raw 2-byte little-endian words (numpy ``uint16``
views when a backend needs an array).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repokit.protocol.generated import model_config_pb2 as mc


@dataclass(frozen=True)
class DataType:
    protocol: str  # "FP32", "BYTES", ...
    config: int  # mc.TYPE_FP32 ...
    config_name: str  # "TYPE_FP32"
    numpy: np.dtype[np.generic] | None  # None for BF16
    itemsize: int  # 0 for BYTES (variable)


def _dt(protocol: str, config_name: str, np_dtype: str | None, itemsize: int) -> DataType:
    return DataType(
        protocol=protocol,
        config=mc.DataType.Value(config_name),
        config_name=config_name,
        numpy=None if np_dtype is None else np.dtype(np_dtype),
        itemsize=itemsize,
    )


_TABLE: tuple[DataType, ...] = (
    _dt("BOOL", "TYPE_BOOL", "bool", 1),
    _dt("UINT8", "TYPE_UINT8", "<u1", 1),
    _dt("UINT16", "TYPE_UINT16", "<u2", 2),
    _dt("UINT32", "TYPE_UINT32", "<u4", 4),
    _dt("UINT64", "TYPE_UINT64", "<u8", 8),
    _dt("INT8", "TYPE_INT8", "<i1", 1),
    _dt("INT16", "TYPE_INT16", "<i2", 2),
    _dt("INT32", "TYPE_INT32", "<i4", 4),
    _dt("INT64", "TYPE_INT64", "<i8", 8),
    _dt("FP16", "TYPE_FP16", "<f2", 2),
    _dt("FP32", "TYPE_FP32", "<f4", 4),
    _dt("FP64", "TYPE_FP64", "<f8", 8),
    _dt("BYTES", "TYPE_STRING", "object", 0),
    _dt("BF16", "TYPE_BF16", None, 2),
)

BY_PROTOCOL: dict[str, DataType] = {d.protocol: d for d in _TABLE}
BY_CONFIG: dict[int, DataType] = {d.config: d for d in _TABLE}
BY_CONFIG_NAME: dict[str, DataType] = {d.config_name: d for d in _TABLE}


def from_protocol(name: str) -> DataType | None:
    """The datatype for a protocol string (case-sensitive, as Triton), or None if unknown."""
    return BY_PROTOCOL.get(name)


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
