"""Hypothesis strategies for hostile and careless requests: mostly well-formed shapes with
wrong values, so that examples reach deep into the decoders and the core's checks, plus raw
garbage and truncations."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

MODELS = ("add_sub", "identity", "types", "accumulate", "batcher", "nope", "")
TENSOR_NAMES = ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1", "B", "Z", "H", "I", "INPUT", "B_OUT")
DATATYPES = (
    "FP32", "FP16", "FP64", "BF16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
    "UINT32", "UINT64", "BOOL", "BYTES", "fp32", "INVALID", "",
)  # fmt: skip
PARAMETER_KEYS = (
    "binary_data", "binary_data_size", "binary_data_output", "shared_memory_region",
    "shared_memory_offset", "shared_memory_byte_size", "classification", "sequence_id",
    "sequence_start", "sequence_end", "priority", "timeout", "triton_enable_empty_final_response",
    "headers", "x",
)  # fmt: skip
BIG = (0, 1, 2, 16, 2**31 - 1, 2**31, 2**32, 2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64)

names = st.sampled_from(TENSOR_NAMES) | st.text(max_size=6)
datatypes = st.sampled_from(DATATYPES) | st.text(max_size=5)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from(BIG)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
dims = st.integers(-3, 20) | st.sampled_from(BIG) | st.sampled_from([-1, -(2**63)])
shapes = st.lists(dims, max_size=4)
parameters = st.dictionaries(
    st.sampled_from(PARAMETER_KEYS) | st.text(max_size=6), scalars, max_size=3
)


@st.composite
def tensor_data(draw: st.DrawFn, shape: list[int]) -> Any:
    """Data whose length is often right for ``shape`` (so the request gets far), or wrong."""
    count = 1
    for dim in shape:
        count *= dim if 0 <= dim <= 64 else 1
    count = min(count, 256)
    length = draw(st.sampled_from([count, count, count - 1, count + 1, 0]))
    element = draw(
        st.sampled_from(
            [
                st.floats(allow_nan=True, width=32),
                st.integers(-(2**64), 2**64),
                st.booleans(),
                st.text(max_size=4),
                scalars,
            ]
        )
    )
    flat = draw(st.lists(element, min_size=max(length, 0), max_size=max(length, 0)))
    if draw(st.booleans()) and shape and all(0 < d <= 64 for d in shape) and len(flat) == count:
        nested: Any = flat  # nest as the shape says, as clients may
        for dim in reversed(shape[1:]):
            nested = [nested[i : i + dim] for i in range(0, len(nested), dim)]
        return nested
    return flat


@st.composite
def json_inputs(draw: st.DrawFn) -> dict[str, Any]:
    shape = draw(
        shapes | st.sampled_from([[1, 16], [2, 16], [16], [1, 1], [0, 16], [0, 2**40, 2**40]])
    )
    item: dict[str, Any] = {"name": draw(names), "datatype": draw(datatypes), "shape": shape}
    if draw(st.integers(0, 9)) == 0:
        item["shape"] = draw(json_values)
    if draw(st.integers(0, 5)):
        item["data"] = draw(tensor_data(shape if isinstance(shape, list) else []))
    if draw(st.integers(0, 3)) == 0:
        item["parameters"] = draw(parameters)
    return item


@st.composite
def infer_documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        document["inputs"] = draw(st.lists(json_inputs(), max_size=3))
    else:
        document["inputs"] = draw(json_values)
    if draw(st.booleans()):
        outputs = st.fixed_dictionaries({"name": names}, optional={"parameters": parameters})
        document["outputs"] = draw(st.lists(outputs, max_size=3) | json_values)
    if draw(st.integers(0, 3)) == 0:
        document["id"] = draw(scalars)
    if draw(st.integers(0, 3)) == 0:
        document["parameters"] = draw(parameters | json_values)
    return document


def encode_json(document: Any) -> bytes:
    """JSON text (NaN/Infinity tokens allowed, lone surrogates as escapes)."""
    return json.dumps(document, allow_nan=True).encode()


@st.composite
def mangled(draw: st.DrawFn, good: bytes) -> bytes:
    """``good`` as it is, truncated, with a byte flipped, or replaced by garbage."""
    choice = draw(st.integers(0, 5))
    if choice <= 2 or not good:
        return good
    if choice == 3:
        return good[: draw(st.integers(0, len(good) - 1))]
    if choice == 4:
        index = draw(st.integers(0, len(good) - 1))
        return good[:index] + bytes([draw(st.integers(0, 255))]) + good[index + 1 :]
    return draw(st.binary(max_size=200))
