"""Triton's classification extension: replace an output with its top-k ``value:index[:label]``.

The result is a BYTES tensor of shape ``[batch, k]`` when the model batches (max_batch_size > 0
and the output has a rank) and ``[k]`` otherwise, with ``k = min(requested, elements per batch
item)``. Entries are sorted by value, descending; ``<value>`` is formatted as C++
``std::to_string`` does (floats with six decimals, integers plain), ``<index>`` is the flat
index within the batch item, and ``<label>`` is that line of the output's label file (omitted
when there is no such line or it is empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import invalid_arg
from repokit.protocol.datatypes import INTEGERS, JSON_FLOATS

MAX_ELEMENTS = 1_000_000
#: the datatypes an output must have to be classified
CLASSIFIABLE = frozenset((*INTEGERS, *JSON_FLOATS))


def _top_k_indices(rows: npt.NDArray[Any], k: int) -> npt.NDArray[np.intp]:
    width = rows.shape[1]
    if k < width:
        # partition first so only k entries per row are sorted
        part = np.argpartition(rows, width - k, axis=1)[:, width - k :]
        values = np.take_along_axis(rows, part, axis=1)
        order = np.argsort(values, axis=1, kind="stable")[:, ::-1]
        return np.take_along_axis(part, order, axis=1)
    return np.argsort(rows, axis=1, kind="stable")[:, ::-1]


def classify(
    datatype: str,
    array: npt.NDArray[Any],
    k: int,
    *,
    batching: bool,
    labels: Sequence[str] = (),
) -> npt.NDArray[np.object_]:
    """The classification result for one output as an object array of ``bytes``."""
    if datatype not in CLASSIFIABLE:
        raise invalid_arg(
            f"class result not available for output due to unsupported type '{datatype}'"
        )
    if array.size > MAX_ELEMENTS:
        raise invalid_arg("classification output tensor too large")
    batched = batching and array.ndim > 0
    batch = array.shape[0] if batched else 1
    rows = np.asarray(array).reshape(batch, -1) if batch > 0 else np.empty((0, 0), array.dtype)
    width = rows.shape[1]
    top = max(0, min(int(k), width))
    indices = _top_k_indices(rows, top) if top > 0 else np.empty((batch, 0), dtype=np.intp)
    values = np.take_along_axis(rows, indices, axis=1)
    is_float = datatype in ("FP32", "FP64")
    label_count = len(labels)
    out = np.empty((batch, top), dtype=object)
    for b, (row_values, row_indices) in enumerate(
        zip(values.tolist(), indices.tolist(), strict=True)
    ):
        for j, (value, index) in enumerate(zip(row_values, row_indices, strict=True)):
            text = f"{value:f}:{index}" if is_float else f"{value}:{index}"
            if index < label_count and labels[index]:
                text = f"{text}:{labels[index]}"
            out[b, j] = text.encode("utf-8")
    return out if batched else out.reshape(top)
