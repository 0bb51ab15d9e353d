"""v1 classification: the top-k entries of an output per batch item as structured classes
(``InferResponseHeader.Output.batch_classes``: idx, value, label), not v2's strings.

Supported datatypes and limits are the same as the v2 classification extension
(:mod:`repokit.protocol.classification`): ints, uints, FP32 and FP64; at most 1,000,000 elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import invalid_arg
from repokit.protocol.classification import CLASSIFIABLE, MAX_ELEMENTS
from repokit.protocol.generated.v1 import api_pb2

Classes = api_pb2.InferResponseHeader.Output.Classes


def top_k(rows: npt.NDArray[Any], k: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[Any]]:
    """Per row, the indices and values of the ``k`` largest entries, largest first."""
    width = rows.shape[1]
    k = max(0, min(k, width))
    if k == 0:
        return np.empty((rows.shape[0], 0), dtype=np.intp), np.empty((rows.shape[0], 0))
    if k < width:
        part = np.argpartition(rows, width - k, axis=1)[:, width - k :]
    else:
        part = np.broadcast_to(np.arange(width), rows.shape)
    values = np.take_along_axis(rows, part, axis=1)
    order = np.argsort(values, axis=1, kind="stable")[:, ::-1]
    indices = np.take_along_axis(part, order, axis=1)
    return indices, np.take_along_axis(rows, indices, axis=1)


def batch_classes(
    output_name: str,
    datatype: str,
    array: npt.NDArray[Any],
    count: int,
    *,
    batching: bool,
    labels: Sequence[str] = (),
) -> list[Any]:
    """One ``Classes`` message per batch item (a single item when the model does not batch)."""
    if datatype not in CLASSIFIABLE:
        raise invalid_arg(
            f"class result not available for output '{output_name}' due to unsupported type "
            f"'{datatype}'"
        )
    if array.size > MAX_ELEMENTS:
        raise invalid_arg(f"classification output tensor '{output_name}' too large")
    batch = array.shape[0] if batching and array.ndim > 0 else 1
    rows = np.asarray(array).reshape(batch, -1) if array.size else np.empty((batch, 0))
    indices, values = top_k(rows, count)
    label_count = len(labels)
    result = []
    for row_indices, row_values in zip(indices.tolist(), values.tolist(), strict=True):
        classes = Classes()
        for index, value in zip(row_indices, row_values, strict=True):
            label = labels[index] if index < label_count else ""
            classes.cls.add(idx=index, value=float(value), label=label)
        result.append(classes)
    return result
