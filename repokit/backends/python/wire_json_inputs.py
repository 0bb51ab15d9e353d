"""The common form of a JSON infer body, decoded in one pass per input (instance process).

:func:`common_request` takes the body's document when it is the form clients send most: an
object with ``inputs`` (and maybe ``id`` and ``outputs``) whose every input is exactly
``{"name", "datatype", "shape", "data"}`` for an input of fixed dims with a JSON number
datatype (FP32, FP64, the integers). It checks such an input with a table made once per
:class:`~repokit.backends.wire_plan.WirePlan` (:func:`_table`) instead of the general plain
rules' several calls, and returns exactly what :func:`.wire_http.decode_request`'s checked
decoding returns for it; anything else gives None and the checked decoding decides (it takes
the request or leaves it to the server), so this changes no answer, only the cost of the common
one (``tests/backends/test_wire_json_inputs.py`` compares both on a corpus).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from repokit.backends.wire_plan import WirePlan
from repokit.protocol.datatypes import INTEGERS, JSON_FLOATS, numpy_dtype
from repokit.protocol.plain_json import plain_output

# one input of the table: (datatype, config dims as a list, the dtype JSON numbers are read
# as, the input's dtype (None: the same), elements per batch item, bytes per element,
# whether its numbers may be floats)
_Spec = tuple[str, list[int], "np.dtype[Any]", "np.dtype[Any] | None", int, int, bool]
_KEYS = frozenset({"id", "inputs", "outputs"})
_NUMBERS = frozenset({int, float})
_INTS = frozenset({int})
# as in repokit.protocol.plain_json: JSON numbers beyond FP32's range become infinities
# without numpy's "overflow encountered in cast" on the server's stderr
warnings.filterwarnings("ignore", "overflow encountered in cast", RuntimeWarning, __name__)

_cached: tuple[WirePlan, dict[str, _Spec]] | None = None


def _table(plan: WirePlan) -> dict[str, _Spec]:
    """The inputs of ``plan`` that the common form may give (fixed dims with elements, a JSON
    number datatype whose dtype is the plan's), made once per plan."""
    global _cached
    if _cached is not None and _cached[0] is plan:
        return _cached[1]
    table: dict[str, _Spec] = {}
    for name, (datatype, dims, dtype, count) in plan.inputs.items():
        if count <= 0 or numpy_dtype(datatype) != dtype:
            continue
        if datatype in JSON_FLOATS:
            table[name] = (datatype, list(dims), dtype, None, count, dtype.itemsize, True)
        elif datatype in INTEGERS:
            wide = np.dtype("<i8" if datatype[0] == "I" else "<u8")
            table[name] = (datatype, list(dims), wide, dtype, count, dtype.itemsize, False)
    _cached = (plan, table)
    return table


def common_request(
    document: dict[str, Any], plan: WirePlan, limit: int
) -> tuple[list[tuple[str, np.ndarray[Any, Any]]], set[str], str, int] | None:
    """(arrays, requested outputs, request id, batch size) of a document in the common form,
    else None (see the module's docstring); ``limit``: the server's maximum input size."""
    items = document.get("inputs")
    request_id = document.get("id", "")
    table = _table(plan)
    if (
        type(items) is not list
        or type(request_id) is not str
        or len(items) != len(table)
        or len(table) != len(plan.inputs)
        or not document.keys() <= _KEYS
    ):
        return None
    max_batch = plan.max_batch_size
    batch_size = 0
    arrays: list[tuple[str, np.ndarray[Any, Any]]] = []
    for item in items:
        if type(item) is not dict or len(item) != 4:
            return None
        name = item.get("name")
        if type(name) is not str:
            return None
        spec = table.get(name)
        shape = item.get("shape")
        data = item.get("data")
        if spec is None or type(shape) is not list or type(data) is not list:
            return None
        datatype, dims, read_as, dtype, count, itemsize, floats = spec
        if item.get("datatype") != datatype:
            return None
        for dim in shape:
            if type(dim) is not int:
                return None
        if max_batch:
            batch = shape[0] if shape else 0
            if shape[1:] != dims or batch < 1 or batch > max_batch:
                return None
            if batch_size and batch != batch_size:
                return None
            batch_size = batch
            count *= batch
        elif shape != dims:
            return None
        if len(data) != count or count * itemsize > limit:
            return None
        if not set(map(type, data)) <= (_NUMBERS if floats else _INTS):
            return None
        try:
            if shape and shape[-1] == count:  # every other dim is 1: ndmin makes the shape
                array = np.array(data, read_as, ndmin=len(shape))
            else:
                array = np.asarray(data, dtype=read_as).reshape(tuple(shape))
        except OverflowError:
            return None
        if dtype is not None:
            array = array.astype(dtype, copy=False)
        arrays.append((name, array))
    if len({name for name, _ in arrays}) != len(arrays):
        return None  # an input given twice
    requested = requested_outputs(document, plan)
    if requested is None:
        return None
    return arrays, requested, request_id, batch_size


def requested_outputs(document: dict[str, Any], plan: WirePlan) -> set[str] | None:
    """The outputs a JSON request asks for (all of the model's when it names none), or None
    when its ``outputs`` are not plain (parameters, an unknown name): the checked path answers
    those."""
    if "outputs" not in document:
        return set(plan.outputs)
    outputs = document["outputs"]
    if type(outputs) is not list:
        return None
    requested: set[str] = set()
    for output in outputs:
        plain = plain_output(output)
        if plain is None or plain[1] or plain[0] not in plan.outputs:
            return None
        requested.add(plain[0])
    return requested or set(plan.outputs)
