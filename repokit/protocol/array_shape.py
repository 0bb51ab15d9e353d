"""Which shapes numpy can give an array, and arrays given a request's shape.

numpy refuses a shape whose non-zero dimensions multiply (times the element size) past
``2**63 - 1`` bytes, even when another dimension is 0 and the array holds nothing: a client can
send ``[0, 2**40, 2**40]`` with no data. Decoders keep such an empty array flat
(:func:`shaped`), so the core's shape checks answer first, as Triton's do, and the core refuses
the shape itself when the model takes it (:func:`representable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy.typing as npt

MAX_ARRAY_BYTES = 2**63 - 1


def representable(dims: Sequence[int], itemsize: int) -> bool:
    """numpy can make an array of ``dims`` with elements of ``itemsize`` bytes."""
    total = max(itemsize, 1)
    for dim in dims:
        if dim > 1:
            total *= dim
            if total > MAX_ARRAY_BYTES:
                return False
    return True


def shaped(array: npt.NDArray[Any], dims: tuple[int, ...]) -> npt.NDArray[Any]:
    """``array`` reshaped to ``dims``; an empty one stays flat when numpy cannot take ``dims``."""
    if array.size == 0 and not representable(dims, array.itemsize):
        return array
    return array.reshape(dims)
