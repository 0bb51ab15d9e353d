"""What both wire-lane codecs (:mod:`.wire_grpc`, :mod:`.wire_http`) share in the instance
process: the outputs of a response that the instance may encode itself. Standard library,
numpy, the package's numpy-only datatype table and :mod:`.pb_utils` (whose responses it
reads)."""

from __future__ import annotations

from typing import Any

import numpy as np

from repokit.backends.python import pb_utils
from repokit.backends.python.pb_utils import InferenceResponse
from repokit.protocol import datatypes
from repokit.protocol.plain_request import PlainOutput

# numpy dtypes (native byte order) sent as they are, and their protocol names
OUTPUT_DATATYPES: dict[np.dtype[Any], str] = datatypes.NUMPY_TO_PROTOCOL


def numeric_outputs(response: InferenceResponse, requested: set[str]) -> list[PlainOutput] | None:
    """The response's requested outputs in the model's order, when the response is a success
    without parameters and every such output is a numeric array of native byte order; else
    None (the packed form then carries the response, and the server encodes it)."""
    if type(response) is pb_utils.InferenceResponse:  # the common case, without method calls
        if response._error is not None or response._parameters:
            return None
        plain: list[PlainOutput] = []
        for tensor in response._outputs:
            if type(tensor) is not pb_utils.Tensor or tensor._bf16:
                return _numeric_outputs(response, requested)
            name = tensor._name
            if name in requested:
                array = tensor._array
                datatype = OUTPUT_DATATYPES.get(array.dtype)
                if datatype is None:
                    return None
                plain.append((name, datatype, array.shape, array))
        return plain
    return _numeric_outputs(response, requested)


def _numeric_outputs(response: InferenceResponse, requested: set[str]) -> list[PlainOutput] | None:
    if response.error() is not None or response.parameter_dict():
        return None
    outputs: list[PlainOutput] = []
    try:
        for tensor in response.output_tensors():
            name = tensor.name()
            if name not in requested:
                continue
            array = tensor.as_numpy()
            datatype = OUTPUT_DATATYPES.get(array.dtype)
            if datatype is None:
                return None
            outputs.append((name, datatype, array.shape, array))
    except Exception:  # e.g. a BF16 tensor: the packed form reports it as it always has
        return None
    return outputs
