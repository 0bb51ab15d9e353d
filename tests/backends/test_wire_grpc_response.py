"""The ModelInferResponse bytes an instance writes from kept pieces
(repokit.backends.python.wire_grpc_response) are byte for byte what the shared plain encoder
serializes (the server's), for every response it takes; responses it does not take are built
as before."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repokit.backends.python import pb_utils, wire_grpc_response
from repokit.backends.python.wire_checks import numeric_outputs
from repokit.backends.python.wire_grpc import encode_response
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.grpc_raw import encode_varint
from repokit.protocol.plain_response import plain_grpc_response

DTYPES = ["<f4", "<f8", "<i4", "u1", "<i8", "<u8", "?", "<f2", ">f4", "O", "<i2"]
NAMES = ["A", "B", "n\u00e9" * 70, "C"]  # a name of more than 127 bytes takes a longer length


@st.composite
def tensors(draw: st.DrawFn, name: str) -> pb_utils.Tensor:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 200]), max_size=2)))
    count = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "O":
        array = np.array([b"x"] * count, dtype=object).reshape(shape)
    else:
        array = (np.arange(count) % 100).astype(dtype).reshape(shape)
    if draw(st.booleans()) and array.ndim:
        array = np.repeat(array, 2, axis=-1)[..., ::2]  # strided, same values
    return pb_utils.Tensor(name, array)


def _before(plan: WirePlan, response: pb_utils.InferenceResponse, requested: set[str],
            request_id: str) -> bytes | None:  # fmt: skip
    outputs = numeric_outputs(response, requested)
    if outputs is None:
        return None
    return plain_grpc_response(request_id, plan.model_name, plan.version_text, outputs)


@settings(max_examples=300, deadline=None)
@given(
    outputs=st.lists(st.sampled_from(NAMES), unique=True, max_size=3).flatmap(
        lambda names: st.tuples(*(tensors(n) for n in names))
    ),
    requested=st.sets(st.sampled_from(NAMES)),
    request_id=st.sampled_from(["", "r1", "q\u00e9" * 80]),
    model=st.sampled_from([("m", "1"), ("m\u00e9" * 50, ""), ("add_sub", "12")]),
)
def test_common_responses_are_serialized_as_the_plain_encoder_serializes_them(
    outputs: tuple[pb_utils.Tensor, ...],
    requested: set[str],
    request_id: str,
    model: tuple[str, str],
) -> None:
    plan = WirePlan(model[0], model[1], 4, {}, frozenset(NAMES))
    response = pb_utils.InferenceResponse(output_tensors=list(outputs))
    before = _before(plan, response, requested, request_id)
    common = wire_grpc_response.common_response(plan, response, requested, request_id)
    assert common is None or common == before
    assert encode_response(plan, response, requested, request_id) == before
    if common is not None:  # and the message reads back as the response
        message = pb.ModelInferResponse.FromString(common)
        assert message.id == request_id and message.model_name == plan.model_name


def test_varints_of_every_length_are_protobufs() -> None:
    for value in [0, 1, 127, 128, 300, 16383, 16384, 2**31, 2**63 - 1]:
        message = pb.ModelInferResponse.InferOutputTensor(shape=[value])
        assert encode_varint(value) == message.SerializeToString()[2:]


def test_kept_output_parts_are_bounded_and_rewritten() -> None:
    plan = WirePlan("m", "1", 4, {}, frozenset({"A"}))
    response = pb_utils.InferenceResponse([pb_utils.Tensor("A", np.arange(3, dtype=np.int32))])
    first = wire_grpc_response.common_response(plan, response, {"A"}, "")
    for width in range(wire_grpc_response._PARTS_KEPT + 5):
        wide = pb_utils.InferenceResponse([pb_utils.Tensor("A", np.zeros(width, np.int8))])
        assert wire_grpc_response.common_response(plan, wide, {"A"}, "") is not None
    assert len(wire_grpc_response._output_parts) <= wire_grpc_response._PARTS_KEPT
    assert wire_grpc_response.common_response(plan, response, {"A"}, "") == first
    assert first == _before(plan, response, {"A"}, "")
