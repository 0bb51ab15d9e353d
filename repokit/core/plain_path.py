"""The request checks' plain path: a well-formed request for a plain model in one pass.

``prepare_plain`` accepts what most requests are: every input of the model given once, inline
(no shared memory, no raw binary body), with the model's datatype, a fully specified shape that
matches the config dims, numpy data of the wire dtype and exact size, no batch larger than
``max_batch_size``, and requested outputs that exist, none with shared memory. Anything else,
including every request that would fail a check, returns None and goes through
:func:`repokit.core.request_checks.prepare`, which decides the error and its message; so the fast
path can never change an answer, only skip work. Models with BYTES, reshaped, shape-tensor or
ragged inputs always take the full checks (``ModelIO.fast_inputs`` is None).

The rules themselves are :func:`repokit.protocol.plain_request.plain_input`'s (shared with the
wire lane's decoders). Raw bytes (gRPC ``raw_input_contents`` and HTTP binary data arrive as
``uint8`` views) of exactly the input's byte size are viewed as the datatype here; any other
size goes to the full checks for the error.

The full checks cost about three times what this path does for a small plain request (figures in
``benchmarks/README.md``).
"""

from __future__ import annotations

import numpy as np

from repokit.core.request_checks import ModelIO, PreparedRequest, prepared
from repokit.protocol.plain_request import plain_input
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
        data = spec.data
        if data is None or spec.shm is not None:
            return None
        name = spec.name
        shape = tuple(spec.shape)
        checked = plain_input(
            fast, max_batch, tensors, name, spec.datatype, shape, data.nbytes, batch_size
        )
        if checked is None:
            return None
        dtype, batch_size = checked
        if data.dtype != dtype:
            if data.dtype != _RAW_BYTES:  # gRPC raw_input_contents, HTTP binary data
                return None
            data = data.view(dtype)
        if data.shape != shape:
            data = data.reshape(shape)
        tensors[name] = InferTensor(name, spec.datatype, shape, data, dict(spec.parameters))
    return prepared(io, request, tensors, batch_size)
