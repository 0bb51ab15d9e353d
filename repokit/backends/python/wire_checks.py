"""The checks both wire-lane decoders make (:mod:`.wire_grpc`, :mod:`.wire_http`): an input's
shape against the model's dims and batch size, as the server's fast path makes them
(:func:`repokit.core.request_fast_path.prepare_plain`), and the numeric output datatypes an
instance process encodes itself. Standard library and numpy only."""

from __future__ import annotations

from typing import Any

import numpy as np

# numpy dtypes (native byte order) sent as they are, and their protocol names (the server's
# ``datatypes.from_numpy`` gives the same names)
OUTPUT_DATATYPES: dict[np.dtype[Any], str] = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
}


def plain_shape(
    shape: tuple[int, ...], dims: tuple[int, ...], count: int, max_batch: int, batch_size: int
) -> tuple[int, int] | None:
    """(the request's batch size, the input's element count) when ``shape`` fits the config's
    ``dims`` (``count`` elements per batch item, -1 when some dim is variable) and the batch
    size so far (0 = none yet; always 0 when ``max_batch`` is 0), else None."""
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
    return batch_size, batch * count
