"""ModelInferRequest decoding and ModelInferResponse encoding with Triton's rules and messages."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from repokit.errors import Code, RepokitError
from repokit.frontends.grpc.codec import (
    RAW_SPLIT_BYTES,
    decode_infer_request,
    encode_infer_response,
    encode_infer_response_bytes,
    parse_infer_request,
)
from repokit.frontends.grpc.messages import parse_model_version
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.types import InferResponse, InferTensor, SharedMemoryRef


def _request(**kwargs: object) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(model_name="m", **kwargs)  # type: ignore[arg-type]


def _param(**kwargs: object) -> pb.InferParameter:
    return pb.InferParameter(**kwargs)  # type: ignore[arg-type]


def _fails(msg: pb.ModelInferRequest) -> str:
    with pytest.raises(RepokitError) as info:
        decode_infer_request(msg)
    assert info.value.code is Code.INVALID_ARG
    return info.value.message


def test_raw_contents_are_consumed_in_order_skipping_shared_memory_inputs() -> None:
    a = np.arange(4, dtype=np.float32)
    c = np.array([7, 8], dtype=np.int64)
    msg = _request(raw_input_contents=[a.tobytes(), c.tobytes()])
    msg.inputs.add(name="A", datatype="FP32", shape=[4])
    b = msg.inputs.add(name="B", datatype="FP32", shape=[4])
    b.parameters["shared_memory_region"].string_param = "r"
    b.parameters["shared_memory_byte_size"].int64_param = 16
    b.parameters["shared_memory_offset"].int64_param = 8
    msg.inputs.add(name="C", datatype="INT64", shape=[1, 2])
    request = decode_infer_request(msg).request
    assert [i.name for i in request.inputs] == ["A", "B", "C"]
    # raw bytes reach the core as zero-copy uint8 views; the core checks and views them
    assert request.inputs[0].data is not None
    assert request.inputs[0].data.dtype == np.uint8
    assert request.inputs[0].data.tobytes() == a.tobytes()
    assert not request.inputs[0].data.flags.writeable
    assert request.inputs[1].data is None
    assert request.inputs[1].shm == SharedMemoryRef("r", 8, 16)
    assert request.inputs[2].data is not None
    assert request.inputs[2].data.tobytes() == c.tobytes()
    assert request.inputs[2].shape == (1, 2)


def test_raw_bytes_tensor_and_fp16() -> None:
    strings = [b"ab", b"", b"xyz"]
    wire = b"".join(struct.pack("<I", len(s)) + s for s in strings)
    half = np.array([1.5, -2.0], dtype=np.float16)
    msg = _request(raw_input_contents=[wire, half.tobytes()])
    msg.inputs.add(name="S", datatype="BYTES", shape=[3])
    msg.inputs.add(name="H", datatype="FP16", shape=[2])
    request = decode_infer_request(msg).request
    assert request.inputs[0].data is not None and request.inputs[1].data is not None
    assert request.inputs[0].data.tobytes() == wire
    assert request.inputs[1].data.tobytes() == half.tobytes()


@pytest.mark.parametrize(
    ("datatype", "field", "values", "expected"),
    [
        ("INT8", "int_contents", [1, -2, 300], np.array([1, -2, 44], dtype=np.int8)),
        ("INT16", "int_contents", [70000, -1], np.array([4464, -1], dtype=np.int16)),
        ("INT32", "int_contents", [-5, 6], np.array([-5, 6], dtype=np.int32)),
        ("UINT8", "uint_contents", [255, 256], np.array([255, 0], dtype=np.uint8)),
        ("UINT16", "uint_contents", [65535, 3], np.array([65535, 3], dtype=np.uint16)),
        ("UINT32", "uint_contents", [2**32 - 1, 0], np.array([2**32 - 1, 0], dtype=np.uint32)),
        ("INT64", "int64_contents", [-(2**40), 1], np.array([-(2**40), 1], dtype=np.int64)),
        ("UINT64", "uint64_contents", [2**63, 1], np.array([2**63, 1], dtype=np.uint64)),
        ("FP32", "fp32_contents", [0.5, -1.25], np.array([0.5, -1.25], dtype=np.float32)),
        ("FP64", "fp64_contents", [0.1, 2.0], np.array([0.1, 2.0], dtype=np.float64)),
        ("BOOL", "bool_contents", [True, False], np.array([True, False])),
    ],
)
def test_typed_contents_decode_to_the_datatype(
    datatype: str, field: str, values: list[object], expected: np.ndarray
) -> None:
    msg = _request()
    tensor = msg.inputs.add(name="X", datatype=datatype, shape=[1, 2] if len(values) == 2 else [3])
    getattr(tensor.contents, field).extend(values)
    data = decode_infer_request(msg).request.inputs[0].data
    assert data is not None
    assert data.dtype == expected.dtype
    np.testing.assert_array_equal(data.ravel(), expected)


def test_bytes_contents() -> None:
    msg = _request()
    tensor = msg.inputs.add(name="S", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([b"hello", b"\xff\x00"])
    data = decode_infer_request(msg).request.inputs[0].data
    assert data is not None
    assert list(data) == [b"hello", b"\xff\x00"]


@pytest.mark.parametrize(
    ("datatype", "field", "shown"),
    [
        ("FP32", "int_contents", "INT32"),
        ("INT8", "int64_contents", "INT64"),
        ("FP16", "fp32_contents", "FP32"),
        ("BF16", "uint_contents", "UINT32"),
        ("BYTES", "bool_contents", "BOOL"),
    ],
)
def test_wrong_typed_field_for_the_datatype(datatype: str, field: str, shown: str) -> None:
    msg = _request()
    tensor = msg.inputs.add(name="X", datatype=datatype, shape=[1])
    getattr(tensor.contents, field).append(1)
    assert _fails(msg) == (
        f"unexpected explicit tensor data for input tensor 'X' for model 'm' of type "
        f"'{shown}', expected datatype '{datatype}'"
    )


def test_two_typed_fields_are_rejected() -> None:
    msg = _request()
    tensor = msg.inputs.add(name="X", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    tensor.contents.fp64_contents.append(1.0)
    assert _fails(msg) == (
        "unexpected explicit tensor data for input tensor 'X' for model 'm', "
        "binary data was already supplied."
    )


def test_contents_together_with_raw() -> None:
    msg = _request(raw_input_contents=[b"\0" * 4])
    msg.inputs.add(name="A", datatype="FP32", shape=[1])
    b = msg.inputs.add(name="B", datatype="FP32", shape=[1])
    b.contents.fp32_contents.append(1.0)
    assert _fails(msg) == (
        "contents field must not be specified when using raw_input_contents for 'B' for model 'm'"
    )


def test_no_data_for_an_input() -> None:
    msg = _request(raw_input_contents=[b"\0" * 4])
    msg.inputs.add(name="A", datatype="FP32", shape=[1])
    msg.inputs.add(name="B", datatype="FP32", shape=[1])
    assert _fails(msg) == "unable to find data for input tensor 'B' for model 'm' in request."


def test_shared_memory_with_contents() -> None:
    msg = _request()
    a = msg.inputs.add(name="A", datatype="FP32", shape=[1])
    a.parameters["shared_memory_region"].string_param = "r"
    a.parameters["shared_memory_byte_size"].int64_param = 4
    a.contents.fp32_contents.append(1.0)
    assert _fails(msg) == (
        "unexpected 'content' provided when using shared memory for input tensor 'A' for model 'm'"
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"shared_memory_region": _param(int64_param=1)},
            "invalid value type for 'shared_memory_region' parameter for tensor 'A', "
            "expected string_param.",
        ),
        (
            {"shared_memory_offset": _param(int64_param=1)},
            "'shared_memory_offset' can not be specified without 'shared_memory_region' "
            "parameter for tensor 'A'",
        ),
        (
            {"shared_memory_region": _param(string_param="r")},
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            "parameter for tensor 'A'",
        ),
        (
            {
                "shared_memory_region": _param(string_param="r"),
                "shared_memory_byte_size": _param(string_param="4"),
            },
            "invalid value type for 'shared_memory_byte_size' parameter for tensor 'A', "
            "expected int64_param.",
        ),
    ],
)
def test_shared_memory_parameter_errors(params: dict[str, pb.InferParameter], message: str) -> None:
    msg = _request()
    a = msg.inputs.add(name="A", datatype="FP32", shape=[1])
    for key, value in params.items():
        a.parameters[key].CopyFrom(value)
    assert _fails(msg) == message


def test_request_parameters_are_typed() -> None:
    msg = _request(id="r1")
    for key, value in {
        "sequence_id": _param(string_param="s-1"),
        "sequence_start": _param(bool_param=True),
        "sequence_end": _param(bool_param=False),
        "priority": _param(uint64_param=3),
        "timeout": _param(int64_param=500),
        "triton_enable_empty_final_response": _param(bool_param=True),
        "custom_int": _param(int64_param=-4),
        "custom_str": _param(string_param="x"),
        "custom_bool": _param(bool_param=False),
        "custom_double": _param(double_param=0.25),
    }.items():
        msg.parameters[key].CopyFrom(value)
    decoded = decode_infer_request(msg)
    request = decoded.request
    assert request.id == "r1"
    assert request.sequence_id == "s-1"
    assert request.sequence_start and not request.sequence_end
    assert request.priority == 3 and request.timeout_us == 500
    assert decoded.enable_empty_final_response
    assert request.parameters == {
        "custom_int": -4,
        "custom_str": "x",
        "custom_bool": False,
        "custom_double": 0.25,
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "sequence_id",
            _param(bool_param=True),
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
        ),
        (
            "sequence_start",
            _param(int64_param=1),
            "invalid value type for 'sequence_start' parameter, expected bool_param.",
        ),
        (
            "sequence_end",
            _param(string_param="true"),
            "invalid value type for 'sequence_end' parameter, expected bool_param.",
        ),
        ("priority", _param(int64_param=-1), "invalid value for 'priority', expected value >= 0."),
        (
            "priority",
            _param(string_param="1"),
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),
        (
            "timeout",
            _param(uint64_param=5),
            "invalid value type for 'timeout' parameter, expected int64_param.",
        ),
        (
            "triton_foo",
            _param(bool_param=True),
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            "following keys starting with 'triton_' are allowed: "
            "triton_enable_empty_final_response",
        ),
        (
            "triton_enable_empty_final_response",
            _param(int64_param=1),
            "invalid value type for 'triton_enable_empty_final_response' parameter, "
            "expected bool_param.",
        ),
        (
            "mine",
            _param(uint64_param=1),
            "invalid value type for 'mine' parameter, expected int64_param, bool_param, "
            "or string_param.",
        ),
        (
            "unset",
            _param(),
            "invalid value type for 'unset' parameter, expected int64_param, bool_param, "
            "or string_param.",
        ),
    ],
)
def test_request_parameter_errors(key: str, value: pb.InferParameter, message: str) -> None:
    msg = _request()
    msg.parameters[key].CopyFrom(value)
    assert _fails(msg) == message


def test_requested_outputs_classification_and_shared_memory() -> None:
    msg = _request()
    out = msg.outputs.add(name="O")
    out.parameters["classification"].int64_param = 3
    request = decode_infer_request(msg).request
    assert request.outputs[0].classification == 3

    for value, message in [
        (_param(int64_param=0), "invalid value for 'classification' parameter, expected >= 0"),
        (
            _param(string_param="3"),
            "invalid value type for 'classification' parameter, expected int64_param",
        ),
    ]:
        bad = _request()
        bad.outputs.add(name="O").parameters["classification"].CopyFrom(value)
        assert _fails(bad) == message

    both = _request()
    o = both.outputs.add(name="O")
    o.parameters["classification"].int64_param = 1
    o.parameters["shared_memory_region"].string_param = "r"
    o.parameters["shared_memory_byte_size"].int64_param = 8
    assert _fails(both) == "output can't set both 'shared_memory_region' and 'classification'"


def test_response_outputs_are_raw_and_index_aligned() -> None:
    response = InferResponse(
        model_name="m",
        model_version="1",
        id="abc",
        outputs=[
            InferTensor("F", "FP32", (2,), np.array([1.0, 2.0], dtype=np.float32)),
            InferTensor("S", "BYTES", (2,), np.array([b"a", b"bcd"], dtype=object)),
            InferTensor("B", "BOOL", (3,), np.array([True, False, True])),
        ],
        parameters={"flag": True, "count": 3, "ratio": 0.5, "note": "n"},
        shm_outputs={"M": (SharedMemoryRef("r", 0, 8), "INT32", (2,))},
    )
    msg = encode_infer_response(response)
    assert (msg.model_name, msg.model_version, msg.id) == ("m", "1", "abc")
    assert [o.name for o in msg.outputs] == ["F", "S", "B", "M"]
    assert [list(o.shape) for o in msg.outputs] == [[2], [2], [3], [2]]
    assert len(msg.raw_output_contents) == 4
    assert msg.raw_output_contents[0] == np.array([1.0, 2.0], dtype=np.float32).tobytes()
    assert msg.raw_output_contents[1] == b"\x01\0\0\0a\x03\0\0\0bcd"
    assert msg.raw_output_contents[2] == b"\x01\x00\x01"
    assert msg.raw_output_contents[3] == b""
    assert not msg.outputs[0].HasField("contents")
    assert msg.parameters["flag"].bool_param is True
    assert msg.parameters["count"].int64_param == 3
    assert msg.parameters["ratio"].double_param == 0.5
    assert msg.parameters["note"].string_param == "n"


@pytest.mark.parametrize(
    ("text", "expected"), [("", ""), ("1", "1"), (" 2", "2"), ("3abc", "3"), ("1.0.0", "1")]
)
def test_model_version_parses_like_stol(text: str, expected: str) -> None:
    assert parse_model_version(text) == expected


def test_model_version_errors() -> None:
    with pytest.raises(RepokitError) as info:
        parse_model_version("abc")
    assert info.value.message == (
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0"
    )
    with pytest.raises(RepokitError) as info:
        parse_model_version("-1")
    assert info.value.message == (
        "invalid model version specified '-1' , version should be an integral value > 0"
    )


def test_shm_outputs_are_listed_in_the_models_order() -> None:
    data = np.array([1.0], dtype=np.float32)
    response = InferResponse(
        model_name="m",
        model_version="1",
        outputs=[InferTensor("C", "FP32", (1,), data)],
        shm_outputs={"A": (SharedMemoryRef("r", 0, 4), "FP32", (1,))},
        output_order=["A", "C"],
    )
    msg = encode_infer_response(response)
    assert [o.name for o in msg.outputs] == ["A", "C"]
    assert list(msg.raw_output_contents) == [b"", data.tobytes()]


@pytest.mark.parametrize("datatype", ["FOO", "fp32", ""])
def test_unknown_datatype_reaches_the_core_as_invalid(datatype: str) -> None:
    """Triton parses the string to TYPE_INVALID, so its datatype error shows '<invalid>'."""
    msg = _request()
    msg.inputs.add(name="X", datatype=datatype, shape=[1])
    msg.raw_input_contents.append(b"\0" * 4)
    assert decode_infer_request(msg).request.inputs[0].datatype == "<invalid>"


# --- large messages: raw tensor bytes parsed and serialized apart (protocol.grpc_raw) --------
def _large_request() -> pb.ModelInferRequest:
    big = np.arange(40_000, dtype=np.float32)  # 160 KB: over RAW_SPLIT_BYTES
    msg = _request(
        id="r1", raw_input_contents=[big.tobytes(), np.arange(3, dtype=np.int64).tobytes()]
    )
    msg.parameters["priority"].uint64_param = 2
    msg.inputs.add(name="A", datatype="FP32", shape=[1, big.size])
    shm = msg.inputs.add(name="S", datatype="FP32", shape=[4])
    shm.parameters["shared_memory_region"].string_param = "r"
    shm.parameters["shared_memory_byte_size"].int64_param = 16
    msg.inputs.add(name="C", datatype="INT64", shape=[3])
    msg.outputs.add(name="OUT")
    return msg


def _summary(msg: pb.ModelInferRequest, contents: list[memoryview] | None) -> list[object]:
    request = decode_infer_request(msg, contents).request
    return [
        (i.name, i.datatype, i.shape, None if i.data is None else i.data.tobytes(), i.shm)
        for i in request.inputs
    ] + [request.id, request.priority, [o.name for o in request.outputs]]


def test_a_large_request_decodes_as_the_runtime_parses_it() -> None:
    raw = _large_request().SerializeToString()
    assert len(raw) > RAW_SPLIT_BYTES
    msg, contents = parse_infer_request(raw)
    assert contents is not None and len(msg.raw_input_contents) == 0
    assert _summary(msg, contents) == _summary(pb.ModelInferRequest.FromString(raw), None)
    small, none = parse_infer_request(_request(id="x").SerializeToString())
    assert none is None and small.id == "x"


def test_a_large_request_fails_as_the_runtime_parses_it() -> None:
    msg = _large_request()
    msg.inputs.add(name="D", datatype="FP32", shape=[2])  # no raw contents left for it
    raw = msg.SerializeToString()
    head, contents = parse_infer_request(raw)
    with pytest.raises(RepokitError) as split_error:
        decode_infer_request(head, contents)
    assert split_error.value.message == _fails(pb.ModelInferRequest.FromString(raw))
    typed = _large_request()
    typed.inputs[0].contents.fp32_contents.extend([1.0])  # contents and raw contents
    head, contents = parse_infer_request(typed.SerializeToString())
    with pytest.raises(RepokitError) as split_error:
        decode_infer_request(head, contents)
    assert split_error.value.message == _fails(typed)


def test_bytes_that_are_no_message_fail_as_in_the_runtime() -> None:
    raw = _large_request().SerializeToString()[:-1]  # cut short
    with pytest.raises(DecodeError):
        parse_infer_request(raw)


@pytest.mark.parametrize("size", [4, 100_000], ids=["small", "large"])
def test_response_bytes_are_the_runtimes(size: int) -> None:
    grid = np.arange(size * 2, dtype=np.float16).reshape(2, size)
    response = InferResponse(
        model_name="m",
        model_version="1",
        id="abc",
        outputs=[
            InferTensor("F", "FP32", (size,), np.arange(size, dtype=np.float32)),
            InferTensor("T", "FP16", (size, 2), grid.T),  # not contiguous: copied once
            InferTensor("S", "BYTES", (2,), np.array([b"a", b"bcd"], dtype=object)),
            InferTensor("B", "BOOL", (3,), np.array([True, False, True])),
        ],
        parameters={"count": 3},
    )
    expected = encode_infer_response(response)
    assert pb.ModelInferResponse.FromString(encode_infer_response_bytes(response)) == expected
    response.shm_outputs = {"M": (SharedMemoryRef("r", 0, 8), "INT32", (2,))}
    expected = encode_infer_response(response)
    assert pb.ModelInferResponse.FromString(encode_infer_response_bytes(response)) == expected
