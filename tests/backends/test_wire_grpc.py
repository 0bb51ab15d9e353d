"""The instance side of the gRPC wire lane (repokit.backends.python.wire_grpc): which requests
it takes, the arrays it gives the model, and the response bytes it builds; every request it
does not take is None (the server's standard path then answers it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from repokit.backends.python import pb_utils
from repokit.backends.python.wire_grpc import decode_request, encode_response
from repokit.backends.wire_plan import WirePlan
from repokit.protocol.generated import grpc_service_pb2 as pb

F32 = np.dtype(np.float32)
PLAN = WirePlan(
    model_name="add_sub",
    version_text="1",
    max_batch_size=8,
    inputs={"INPUT0": ("FP32", (16,), F32, 16), "INPUT1": ("FP32", (16,), F32, 16)},
    outputs=frozenset({"OUTPUT0", "OUTPUT1"}),
)
VARIABLE = WirePlan(
    model_name="identity",
    version_text="3",
    max_batch_size=0,
    inputs={"IN": ("INT32", (-1, 2), np.dtype(np.int32), -1)},
    outputs=frozenset({"OUT"}),
)


def request(batch: int = 1, **fields: Any) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="add_sub", id="req-7", **fields)
    for index, name in enumerate(("INPUT0", "INPUT1")):
        msg.inputs.add(name=name, datatype="FP32", shape=[batch, 16])
        data = np.arange(16 * batch, dtype=np.float32) + index
        msg.raw_input_contents.append(data.tobytes())
    return msg


def test_plain_request_is_decoded_into_writable_arrays() -> None:
    decoded = decode_request(request(batch=2).SerializeToString(), PLAN)
    assert decoded is not None
    arrays, requested, request_id, batch = decoded
    assert [name for name, _ in arrays] == ["INPUT0", "INPUT1"]
    first = arrays[0][1]
    assert first.dtype == np.float32 and first.shape == (2, 16)
    assert np.array_equal(first.ravel(), np.arange(32, dtype=np.float32))
    assert first.flags.writeable
    first[0, 0] = 5.0  # models may write into their inputs
    assert requested == {"OUTPUT0", "OUTPUT1"}  # none named: every output
    assert request_id == "req-7" and batch == 2


def test_named_outputs_are_the_requested_ones() -> None:
    msg = request()
    msg.outputs.add(name="OUTPUT1")
    decoded = decode_request(msg.SerializeToString(), PLAN)
    assert decoded is not None and decoded[1] == {"OUTPUT1"}


def test_variable_dims_without_batching() -> None:
    msg = pb.ModelInferRequest(model_name="identity")
    msg.inputs.add(name="IN", datatype="INT32", shape=[3, 2])
    msg.raw_input_contents.append(np.arange(6, dtype=np.int32).tobytes())
    decoded = decode_request(msg.SerializeToString(), VARIABLE)
    assert decoded is not None
    arrays, _, _, batch = decoded
    assert arrays[0][1].shape == (3, 2) and batch == 0


def _param(msg: pb.ModelInferRequest) -> None:
    msg.parameters["sequence_id"].int64_param = 4


def _tensor_param(msg: pb.ModelInferRequest) -> None:
    msg.inputs[0].parameters["shared_memory_region"].string_param = "r"


def _contents(msg: pb.ModelInferRequest) -> None:
    msg.inputs[0].contents.fp32_contents.extend([1.0] * 16)


def _missing_raw(msg: pb.ModelInferRequest) -> None:
    del msg.raw_input_contents[1]


def _extra_raw(msg: pb.ModelInferRequest) -> None:
    msg.raw_input_contents.append(b"\0" * 64)


def _wrong_datatype(msg: pb.ModelInferRequest) -> None:
    msg.inputs[1].datatype = "FP64"


def _unknown_input(msg: pb.ModelInferRequest) -> None:
    msg.inputs[1].name = "INPUT9"


def _duplicate_input(msg: pb.ModelInferRequest) -> None:
    msg.inputs[1].name = "INPUT0"


def _no_batch_dim(msg: pb.ModelInferRequest) -> None:
    del msg.inputs[0].shape[0]


def _wrong_dims(msg: pb.ModelInferRequest) -> None:
    msg.inputs[0].shape[1] = 8


def _short_bytes(msg: pb.ModelInferRequest) -> None:
    msg.raw_input_contents[0] = msg.raw_input_contents[0][:-4]


def _batch_too_large(msg: pb.ModelInferRequest) -> None:
    for index in (0, 1):
        msg.inputs[index].shape[0] = 9
        msg.raw_input_contents[index] = b"\0" * (9 * 64)


def _batch_mismatch(msg: pb.ModelInferRequest) -> None:
    msg.inputs[1].shape[0] = 2
    msg.raw_input_contents[1] = b"\0" * 128


def _zero_batch(msg: pb.ModelInferRequest) -> None:
    for index in (0, 1):
        msg.inputs[index].shape[0] = 0
        msg.raw_input_contents[index] = b""


def _unknown_output(msg: pb.ModelInferRequest) -> None:
    msg.outputs.add(name="OUTPUT7")


def _classification(msg: pb.ModelInferRequest) -> None:
    msg.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 2


@pytest.mark.parametrize(
    "spoil",
    [
        _param, _tensor_param, _contents, _missing_raw, _extra_raw, _wrong_datatype,
        _unknown_input, _duplicate_input, _no_batch_dim, _wrong_dims, _short_bytes,
        _batch_too_large, _batch_mismatch, _zero_batch, _unknown_output, _classification,
    ],
)  # fmt: skip
def test_requests_the_full_path_must_take_are_left_to_it(
    spoil: Callable[[pb.ModelInferRequest], None],
) -> None:
    msg = request()
    spoil(msg)
    assert decode_request(msg.SerializeToString(), PLAN) is None


def test_missing_input_and_unparsable_bytes_are_left_to_the_server() -> None:
    msg = request()
    del msg.inputs[1]
    del msg.raw_input_contents[1]
    assert decode_request(msg.SerializeToString(), PLAN) is None
    assert decode_request(b"\xff\xff\xff", PLAN) is None


def test_variable_dim_mismatch_is_left_to_the_server() -> None:
    msg = pb.ModelInferRequest(model_name="identity")
    msg.inputs.add(name="IN", datatype="INT32", shape=[3, 3])
    msg.raw_input_contents.append(np.arange(9, dtype=np.int32).tobytes())
    assert decode_request(msg.SerializeToString(), VARIABLE) is None


def _response(*tensors: pb_utils.Tensor, **kwargs: Any) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(output_tensors=list(tensors), **kwargs)


def test_response_bytes_are_the_servers_message() -> None:
    out0 = np.arange(16, dtype=np.float32).reshape(1, 16)
    flags = np.array([True, False])
    response = _response(
        pb_utils.Tensor("OUTPUT0", out0),
        pb_utils.Tensor("OUTPUT1", flags),
        pb_utils.Tensor("EXTRA", np.zeros(2, dtype=np.int64)),
    )
    body = encode_response(PLAN, response, {"OUTPUT0", "OUTPUT1"}, "req-7")
    assert body is not None
    msg = pb.ModelInferResponse.FromString(body)
    assert (msg.model_name, msg.model_version, msg.id) == ("add_sub", "1", "req-7")
    assert [(o.name, o.datatype, list(o.shape)) for o in msg.outputs] == [
        ("OUTPUT0", "FP32", [1, 16]),
        ("OUTPUT1", "BOOL", [2]),
    ]  # not requested: EXTRA
    assert msg.raw_output_contents[0] == out0.tobytes()
    assert msg.raw_output_contents[1] == b"\x01\x00"


def test_strided_output_is_sent_contiguous() -> None:
    wide = np.arange(32, dtype=np.int16).reshape(2, 16)[:, ::2]
    body = encode_response(PLAN, _response(pb_utils.Tensor("OUTPUT0", wide)), {"OUTPUT0"}, "")
    assert body is not None
    assert pb.ModelInferResponse.FromString(body).raw_output_contents[0] == wide.copy().tobytes()


@pytest.mark.parametrize(
    "response",
    [
        pytest.param(lambda: _response(error=pb_utils.TritonError("no")), id="error"),
        pytest.param(
            lambda: _response(
                pb_utils.Tensor("OUTPUT0", np.zeros(1, np.float32)), parameters={"k": 1}
            ),
            id="parameters",
        ),
        pytest.param(
            lambda: _response(pb_utils.Tensor("OUTPUT0", np.array([b"a"], dtype=object))),
            id="bytes",
        ),
        pytest.param(
            lambda: _response(pb_utils.Tensor("OUTPUT0", np.zeros(2, dtype=">f4"))),
            id="big-endian",
        ),
    ],
)
def test_responses_it_cannot_build_travel_in_the_packed_form(
    response: Callable[[], pb_utils.InferenceResponse],
) -> None:
    assert encode_response(PLAN, response(), {"OUTPUT0"}, "") is None
