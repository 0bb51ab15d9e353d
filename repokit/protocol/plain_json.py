"""Plain paths of the HTTP infer decoder for the common well-formed shapes: an input given as
``{"name", "datatype", "shape", "data"}`` with flat numeric data, and an output given as
``{"name"}`` or ``{"name", "parameters": {"binary_data": <bool>}}``. Also used by python
instance processes for requests on the wire lane (:mod:`repokit.backends.python.wire_http`),
hence here, importing only numpy.

Each function returns None for anything else and
:mod:`repokit.frontends.http.infer_request`'s checked path then
decodes the item and raises every error in Triton's words, so both paths agree on every item
they both accept (``tests/frontends/http/test_plain_paths.py`` compares them). For small numeric
inputs this roughly halves the decoding time (figures in ``benchmarks/README.md``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from repokit.protocol.datatypes import INTEGERS, JSON_FLOATS, numpy_dtype
from repokit.protocol.types import InputSpec

INT64_MAX = 2**63 - 1

_FLOAT_DTYPES: dict[str, np.dtype[Any]] = {name: numpy_dtype(name) for name in JSON_FLOATS}
# integer datatype -> (its dtype, the 64-bit dtype JSON numbers are read as before the range check)
_INT_DTYPES: dict[str, tuple[np.dtype[Any], str]] = {
    name: (numpy_dtype(name), "<i8" if name[0] == "I" else "<u8") for name in INTEGERS
}
_NUMBER_TYPES = frozenset({int, float})
# JSON numbers beyond a float datatype's range become infinities, as Triton casts its doubles;
# numpy would also print "overflow encountered in cast" to the server's stderr
warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning, __name__)
_INT_TYPES = frozenset({int})


# an input of the plain path: (name, datatype, shape, array of that shape)
PlainJsonInput = tuple[str, str, tuple[int, ...], "np.ndarray[Any, Any]"]


def plain_json_input(item: Any, max_input_size: int) -> InputSpec | None:
    """An input given as ``{"name", "datatype", "shape", "data"}`` with a flat numeric
    ``data`` of exactly the shape's element count (no parameters), else None."""
    plain = plain_json_array(item, max_input_size)
    if plain is None:
        return None
    name, datatype, shape, array = plain
    return InputSpec(name=name, datatype=datatype, shape=shape, data=array)


def plain_json_array(item: Any, max_input_size: int) -> PlainJsonInput | None:
    """:func:`plain_json_input`'s input as a plain tuple (what a python instance on the wire
    lane needs, without the server's request record)."""
    if type(item) is not dict or "parameters" in item:
        return None
    name = item.get("name")
    datatype = item.get("datatype")
    shape_json = item.get("shape")
    data = item.get("data")
    if (
        type(name) is not str
        or type(datatype) is not str
        or type(shape_json) is not list
        or type(data) is not list
    ):
        return None
    count = 1
    for dim in shape_json:
        if type(dim) is not int or dim < 0:
            return None
        count *= dim
    if count == 0 or count > INT64_MAX or len(data) != count:
        return None
    element_types = set(map(type, data))
    dtype = _FLOAT_DTYPES.get(datatype)
    shape = tuple(shape_json)
    try:
        if dtype is not None:
            if not element_types <= _NUMBER_TYPES or count * dtype.itemsize > max_input_size:
                return None
            return name, datatype, shape, np.asarray(data, dtype=dtype).reshape(shape)
        ints = _INT_DTYPES.get(datatype)
        if ints is None or not element_types <= _INT_TYPES:
            return None
        dtype, wide = ints
        if count * dtype.itemsize > max_input_size:
            return None
        array = np.asarray(data, dtype=wide).astype(dtype, copy=False)
    except OverflowError:
        return None
    return name, datatype, shape, array.reshape(shape)


def plain_output(item: Any) -> tuple[str, bool] | None:
    """(name, binary) of an output given as ``{"name"}`` or ``{"name", "parameters":
    {"binary_data": <bool>}}``, else None."""
    if type(item) is not dict:
        return None
    name = item.get("name")
    if type(name) is not str:
        return None
    params = item.get("parameters")
    if params is None:
        return name, False
    if type(params) is not dict:
        return None
    if not params:
        return name, False
    if len(params) == 1:
        binary = params.get("binary_data")
        if type(binary) is bool:
            return name, binary
    return None
