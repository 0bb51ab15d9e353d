"""What both wire-lane codecs (:mod:`.wire_grpc`, :mod:`.wire_http`) share in the instance
process: the outputs of a response that the instance may encode itself. Standard library and
numpy only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from repokit.backends.python.pb_utils import InferenceResponse

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

# a requested output: (name, array, protocol datatype)
NumericOutput = tuple[str, "np.ndarray[Any, Any]", str]


def numeric_outputs(response: InferenceResponse, requested: set[str]) -> list[NumericOutput] | None:
    """The response's requested outputs in the model's order, when the response is a success
    without parameters and every such output is a numeric array of native byte order; else
    None (the packed form then carries the response, and the server encodes it)."""
    if response.error() is not None or response.parameter_dict():
        return None
    outputs: list[NumericOutput] = []
    try:
        for tensor in response.output_tensors():
            name = tensor.name()
            if name not in requested:
                continue
            array = tensor.as_numpy()
            datatype = OUTPUT_DATATYPES.get(array.dtype)
            if datatype is None:
                return None
            outputs.append((name, array, datatype))
    except Exception:  # e.g. a BF16 tensor: the packed form reports it as it always has
        return None
    return outputs
