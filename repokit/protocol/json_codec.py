"""KServe v2 JSON ``data`` <-> numpy arrays, with Triton's element type rules.

Input ``data`` is a flat or nested JSON array; only the total element count is checked against
the shape (Triton consumes nested arrays depth-first and ignores their nesting). Element rules
(Triton's ``triton_json.h``): BOOL takes only ``true``/``false``; INT* only JSON integers (not
``1.0``, not booleans); UINT* only non-negative integers; FP32/FP64 any number including NaN and
Infinity; BYTES strings, used as their UTF-8 bytes (no base64). FP16 and BF16 are binary only.
Narrowing is not range-checked: INT8 given 300 wraps, as in Triton.

Type checks look at the set of Python element types once (``set(map(type, flat))``) and convert
with ``numpy.asarray``; no per-element Python code runs except for BYTES (one ``encode`` each).

Every error is ``RepokitError(INVALID_ARG)``. Triton answers HTTP 500 for these (they are
TritonJson errors); repokit deliberately answers 400, the KServe spec's code for a bad request.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import RepokitError, invalid_arg
from repokit.protocol import datatypes
from repokit.protocol.array_shape import shaped

MAX_NESTING = 100

_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_NUMBER = "attempt to access JSON non-number as double"
_NOT_STRING = "attempt to access JSON non-string as string"

_NUMBER_TYPES = frozenset({int, float})
# JSON numbers beyond a float datatype's range become infinities, as Triton casts its doubles;
# numpy would also print "overflow encountered in cast" to the server's stderr
warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning, __name__)
# too many elements and too few: Triton 2.51 says the same for both
_SHAPE_MISMATCH = "Shape does not match true shape of 'data' field"


def _unable(detail: str) -> RepokitError:
    return invalid_arg(f"Unable to parse 'data': {detail}")


def _flatten(data: list[Any]) -> list[Any]:
    """Depth-first elements of nested lists (the list itself when it is already flat)."""
    if list not in set(map(type, data)):
        return data
    out: list[Any] = []

    def walk(items: list[Any], depth: int) -> None:
        if depth > MAX_NESTING:
            raise _unable(f"'data' nests deeper than {MAX_NESTING} arrays")
        for item in items:
            if type(item) is list:
                walk(item, depth + 1)
            else:
                out.append(item)

    walk(data, 1)
    return out


def _integers(flat: list[Any], wide: str, dtype: np.dtype[Any], error: str) -> npt.NDArray[Any]:
    if not set(map(type, flat)) <= {int}:
        raise _unable(error)
    try:
        wide_array = np.asarray(flat, dtype=wide)
    except OverflowError:
        raise _unable(error) from None
    return wide_array.astype(dtype, copy=False)


def array_from_json(
    datatype: str, shape: Sequence[int], data: Any, *, input_name: str
) -> npt.NDArray[Any]:
    """Decode an input's JSON ``data`` into an array of ``shape`` (INVALID_ARG on any mismatch)."""
    info = datatypes.from_protocol(datatype)
    if info is None:
        raise invalid_arg(f"invalid datatype for input {input_name}")
    if info.protocol in ("FP16", "BF16"):
        raise invalid_arg(
            f"receiving {info.protocol} data via JSON is not supported. "
            f"Please use the binary data format for input {input_name}"
        )
    if not isinstance(data, list):
        raise invalid_arg(f"Unable to parse 'data' for input {input_name}: expected a JSON array")
    dims = tuple(int(d) for d in shape)
    count = math.prod(dims)
    flat = _flatten(data)
    if len(flat) != count:
        # Triton reads the elements in order: one of a wrong type before the count runs out
        # (or among all of them when there are too few) is the error it names
        _convert(info, flat[:count])
        raise _unable(_SHAPE_MISMATCH)
    return shaped(_convert(info, flat), dims)


def strings_from_json(data: list[Any]) -> npt.NDArray[Any]:
    """A BYTES input's JSON ``data`` as a flat array of byte strings, every leaf in order,
    whatever the shape. Triton sizes the strings first (every leaf must be a string) and leaves
    their count to the request checks, which name the input and the counts."""
    flat = _flatten(data)
    if not set(map(type, flat)) <= {str}:
        raise invalid_arg(f"Unable to parse JSON bytes array: {_NOT_STRING}")
    result = np.empty(len(flat), dtype=object)
    result[:] = [s.encode("utf-8") for s in flat]
    return result


def _convert(info: datatypes.DataType, flat: list[Any]) -> npt.NDArray[Any]:
    protocol = info.protocol
    if protocol == "BYTES":
        if not set(map(type, flat)) <= {str}:
            raise _unable(_NOT_STRING)
        result = np.empty(len(flat), dtype=object)
        result[:] = [s.encode("utf-8") for s in flat]
        return result
    assert info.numpy is not None
    if protocol == "BOOL":
        if not set(map(type, flat)) <= {bool}:
            raise _unable(_NOT_BOOL)
        return np.asarray(flat, dtype=np.bool_)
    if protocol.startswith("INT"):
        return _integers(flat, "<i8", info.numpy, _NOT_INT)
    if protocol.startswith("UINT"):
        return _integers(flat, "<u8", info.numpy, _NOT_UINT)
    # FP32 / FP64
    if not set(map(type, flat)) <= _NUMBER_TYPES:
        raise _unable(_NOT_NUMBER)
    try:
        return np.asarray(flat, dtype=info.numpy)
    except OverflowError:
        raise _unable(_NOT_NUMBER) from None


def array_to_json(datatype: str, array: npt.NDArray[Any], *, output_name: str = "") -> list[Any]:
    """A flat JSON list for an output tensor (FP32 values are widened to doubles, as Triton)."""
    if datatype in ("FP16", "BF16"):
        raise invalid_arg(
            f"sending {datatype} data via JSON is not supported. "
            "Please use the binary data format for output"
        )
    flat = np.ravel(array, order="C")
    if datatype != "BYTES":
        return list(flat.tolist())
    try:
        return [e.decode("utf-8") if isinstance(e, bytes) else str(e) for e in flat.tolist()]
    except UnicodeDecodeError:
        raise invalid_arg(
            f"output '{output_name}' holds bytes that are not valid UTF-8 and cannot be sent "
            "as JSON; request it in binary form (parameter binary_data: true)"
        ) from None
