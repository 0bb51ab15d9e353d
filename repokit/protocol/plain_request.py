"""The plain-request rules, in one place: which inputs a request may give as they are.

A plain request gives every input of the model once, with the model's datatype, a shape that
fits the config's dims (and the batch size of its other inputs, at most ``max_batch_size``)
and exactly the bytes that shape holds; its requested outputs exist (the callers check that
and their protocol's own extras: parameters, shared memory, classification). Anything else is
left to the standard path's checks, which decide the error and its message.

Used by the server's plain path (:func:`repokit.core.plain_path.prepare_plain`, on decoded
requests) and the wire lane's decoders in python instance processes
(:mod:`repokit.backends.python.wire_grpc`, :mod:`repokit.backends.python.wire_http`, on
request bytes), so all take exactly the same requests (``tests/core/test_decoder_corpus.py``).
Standard library and numpy only.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import numpy as np

# input name -> (protocol datatype, config dims, numpy dtype of the wire bytes, elements per batch
# item or -1 when some dim is variable): ``ModelIO.fast_inputs``, ``WirePlan.inputs``
InputPlan = dict[str, tuple[str, tuple[int, ...], "np.dtype[Any]", int]]
# one output of a plain response: (name, protocol datatype, shape, array of the datatype's
# dtype), as :mod:`repokit.protocol.plain_response` writes it
PlainOutput = tuple[str, str, "tuple[int, ...]", "np.ndarray[Any, Any]"]


def plain_input(
    inputs: InputPlan,
    max_batch: int,
    seen: Container[str],
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    nbytes: int,
    batch_size: int,
) -> tuple[np.dtype[Any], int] | None:
    """(the input's numpy dtype, the request's batch size) when the input ``name`` is one of
    ``inputs`` not ``seen`` yet, with its datatype, a shape that fits (``batch_size``: that of
    the request's other inputs, 0 = none yet) and ``nbytes`` bytes exactly; else None."""
    entry = inputs.get(name)
    if entry is None or name in seen:
        return None
    want, dims, dtype, count = entry
    if datatype != want:
        return None
    fitted = fit_plain_shape(shape, dims, count, max_batch, batch_size)
    if fitted is None or nbytes != fitted[1] * dtype.itemsize:
        return None
    return dtype, fitted[0]


def fit_plain_shape(
    shape: tuple[int, ...], dims: tuple[int, ...], count: int, max_batch: int, batch_size: int
) -> tuple[int, int] | None:
    """(the request's batch size, the input's element count) when ``shape`` fits the config's
    ``dims`` (``count`` elements per batch item, -1 when some dim is variable) and the batch
    size of the request's other inputs (0 = none yet; always 0 when ``max_batch`` is 0), else
    None (the full checks then decide; always for an input without elements)."""
    if max_batch:
        if len(shape) != len(dims) + 1:
            return None
        batch = shape[0]
        if batch_size == 0:
            if batch < 1 or batch > max_batch:
                return None
            batch_size = batch
        elif batch != batch_size:
            return None
        item = shape[1:]
    else:
        batch = 1
        item = shape
    if count < 0:
        if len(item) != len(dims):
            return None
        count = 1
        for got, want in zip(item, dims, strict=True):
            if got < 0 or (want != -1 and want != got):
                return None
            count *= got
    elif item != dims:
        return None
    if not count:  # an empty tensor: its shape may be one numpy cannot take (the full checks)
        return None
    return batch_size, batch * count
