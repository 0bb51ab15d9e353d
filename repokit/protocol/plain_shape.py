"""The shape check of the request plain paths: does an input's shape fit the config as it is?

Shared by the server's plain path (:func:`repokit.core.plain_path.prepare_plain`) and the
wire lane's decoders in python instance processes (:mod:`repokit.backends.python.wire_grpc`,
:mod:`repokit.backends.python.wire_http`), so both take exactly the same requests. Standard
library only.
"""

from __future__ import annotations


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
