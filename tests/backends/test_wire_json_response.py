"""The JSON an instance writes from kept pieces (repokit.backends.python.wire_json_response) is
byte for byte what the shared plain encoder writes (the server's), for every response it takes;
responses it does not take are written as before."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repokit.backends.python import pb_utils, wire_json_response
from repokit.backends.python.wire_checks import numeric_outputs
from repokit.backends.python.wire_http import encode_response
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.plain_response import plain_json_response

PLAN = WirePlan('m\u00e9"x', "7", 4, {}, frozenset({"A", "B", "C"}))
DTYPES = ["<f4", "<f8", "<i4", "u1", "<i8", "<u8", "?", "<f2", ">f4", "O"]
VALUES = st.sampled_from([0.0, -1.5, 1e38, 3.25e-7, 2.0**60, np.nan, np.inf, 7])


@st.composite
def tensors(draw: st.DrawFn, name: str) -> pb_utils.Tensor:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    count = int(np.prod(shape, dtype=np.int64))
    values = draw(st.lists(VALUES, min_size=count, max_size=count))
    if dtype.kind == "O":
        array = np.array([str(v).encode() for v in values], dtype=object).reshape(shape)
    else:
        with np.errstate(all="ignore"):
            array = np.array(values, dtype=np.float64).astype(dtype).reshape(shape)
    if draw(st.booleans()) and array.ndim:
        array = np.repeat(array, 2, axis=-1)[..., ::2]  # strided, same values
    return pb_utils.Tensor(name, array)


def _before(response: Any, requested: set[str], request_id: str) -> bytes | None:
    outputs = numeric_outputs(response, requested)
    if outputs is None:
        return None
    return plain_json_response(request_id, PLAN.model_name, PLAN.version_text, outputs)


@settings(max_examples=300, deadline=None)
@given(
    outputs=st.lists(st.sampled_from("ABC"), unique=True, max_size=3).flatmap(
        lambda names: st.tuples(*(tensors(n) for n in names))
    ),
    requested=st.sets(st.sampled_from("ABC")),
    request_id=st.sampled_from(["", "r1", 'q"\\\u00e9\n']),
)
def test_common_responses_are_written_as_the_plain_encoder_writes_them(
    outputs: tuple[pb_utils.Tensor, ...], requested: set[str], request_id: str
) -> None:
    response = pb_utils.InferenceResponse(output_tensors=list(outputs))
    before = _before(response, requested, request_id)
    common = wire_json_response.common_response(PLAN, response, requested, request_id)
    assert common is None or common == before
    assert encode_response(PLAN, response, requested, request_id) == before


def test_kept_output_parts_are_bounded_and_rewritten() -> None:
    response = pb_utils.InferenceResponse([pb_utils.Tensor("A", np.arange(3, dtype=np.int32))])
    first = wire_json_response.common_response(PLAN, response, {"A"}, "")
    for width in range(wire_json_response._PREFIXES_KEPT + 5):
        wide = pb_utils.InferenceResponse([pb_utils.Tensor("A", np.zeros(width, np.int8))])
        assert wire_json_response.common_response(PLAN, wide, {"A"}, "") is not None
    assert len(wire_json_response._output_parts) <= wire_json_response._PREFIXES_KEPT
    assert wire_json_response.common_response(PLAN, response, {"A"}, "") == first
    assert first == _before(response, {"A"}, "")
