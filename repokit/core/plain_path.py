"""The request checks' plain path: a well-formed request for a plain model in one pass.

``prepare_plain`` accepts what most requests are: every input of the model given once, inline
(no shared memory, no raw binary body), with the model's datatype, a fully specified shape that
matches the config dims, numpy data of the wire dtype and exact size, no batch larger than
``max_batch_size``, and requested outputs that exist, none with shared memory. Anything else,
including every request that would fail a check, returns None and goes through
:func:`repokit.core.request_checks.prepare`, which decides the error and its message; so the fast
path can never change an answer, only skip work. Models with BYTES, reshaped, shape-tensor or
ragged inputs always take the full checks (``ModelIO.fast_inputs`` is None).

Raw bytes (gRPC ``raw_input_contents`` arrive as ``uint8`` views) of exactly the input's byte
size are viewed as the datatype here; any other size goes to the full checks for the error.

The full checks cost about three times what this path does for a small plain request (figures in
``benchmarks/README.md``).
"""

from __future__ import annotations

import numpy as np

from repokit.core.request_checks import ModelIO, PreparedRequest, prepared
from repokit.protocol.plain_shape import fit_plain_shape
from repokit.protocol.types import InferRequest, InferTensor

_RAW_BYTES = np.dtype(np.uint8)


def prepare_plain(io: ModelIO, request: InferRequest) -> PreparedRequest | None:
    """The prepared request when it passes every check trivially, else None."""
    fast = io.fast_inputs
    specs = request.inputs
    if fast is None or request.raw_input or len(specs) != len(fast):
        return None
    outputs = io.outputs
    for output in request.outputs:
        if output.shm is not None or output.name not in outputs:
            return None
    max_batch = io.max_batch_size
    batch_size = 0
    tensors: dict[str, InferTensor] = {}
    for spec in specs:
        name = spec.name
        plan = fast.get(name)
        data = spec.data
        if plan is None or name in tensors or data is None or spec.shm is not None:
            return None
        datatype, dims, dtype, count = plan
        shape = tuple(spec.shape)
        if spec.datatype != datatype:
            return None
        raw = data.dtype == _RAW_BYTES and dtype != _RAW_BYTES  # gRPC raw_input_contents
        if data.dtype != dtype and not raw:
            return None
        fitted = fit_plain_shape(shape, dims, count, max_batch, batch_size)
        if fitted is None:
            return None
        batch_size, elements = fitted
        if raw:
            if data.size != elements * dtype.itemsize:
                return None
            data = data.view(dtype)
        elif data.size != elements:
            return None
        if data.shape != shape:
            data = data.reshape(shape)
        tensors[name] = InferTensor(name, datatype, shape, data, dict(spec.parameters))
    return prepared(io, request, tensors, batch_size)
