"""split_raw_inputs / join_raw_outputs give the messages the protobuf runtime gives."""

from __future__ import annotations

import numpy as np
import pytest

from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.grpc_raw import (
    MessageParts,
    _varint,
    encode_varint,
    join_raw_outputs,
    message_bytes,
    raw_output_parts,
    split_raw_inputs,
    stream_response,
)


def _request(contents: list[bytes]) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m", model_version="2", id="req-1")
    msg.parameters["sequence_id"].int64_param = 7
    for index, _ in enumerate(contents):
        tensor = msg.inputs.add(name=f"INPUT{index}", datatype="FP32", shape=[1, 4])
        tensor.parameters["x"].string_param = "y"
    msg.outputs.add(name="OUTPUT0")
    msg.raw_input_contents.extend(contents)
    return msg


@pytest.mark.parametrize(
    "contents",
    [[], [b""], [b"\x01\x02"], [bytes(range(256)) * 300, b"", b"abc" * 70000]],
    ids=["none", "empty", "small", "large"],
)
def test_split_gives_the_runtime_message(contents: list[bytes]) -> None:
    raw = _request(contents).SerializeToString()
    split = split_raw_inputs(raw)
    assert split is not None
    head, views = split
    assert [bytes(v) for v in views] == contents
    rebuilt = pb.ModelInferRequest.FromString(head)
    assert len(rebuilt.raw_input_contents) == 0
    rebuilt.raw_input_contents.extend(contents)
    assert rebuilt == pb.ModelInferRequest.FromString(raw)


def test_split_keeps_fields_between_and_after_the_contents() -> None:
    # raw contents first, then the other fields, then more contents: the order on the wire
    first = _request([b"A" * 10]).SerializeToString()
    raw = (
        b"\x3a\x03xyz"  # raw_input_contents "xyz"
        + first
        + b"\x3a\x00"  # an empty one
        + b"\x0a\x01n"  # model_name again: the last one wins, in both parses
    )
    split = split_raw_inputs(raw)
    assert split is not None
    head, views = split
    assert [bytes(v) for v in views] == [b"xyz", b"A" * 10, b""]
    expected = pb.ModelInferRequest.FromString(raw)
    rebuilt = pb.ModelInferRequest.FromString(head)
    rebuilt.raw_input_contents.extend(bytes(v) for v in views)
    assert rebuilt == expected and rebuilt.model_name == "n"


def test_split_views_share_the_received_bytes() -> None:
    raw = _request([b"\x00" * 100_000]).SerializeToString()
    split = split_raw_inputs(raw)
    assert split is not None
    view = split[1][0]
    assert view.obj is raw  # a view, not a copy


@pytest.mark.parametrize(
    "raw",
    [
        b"\x3a\x05abc",  # raw contents cut short
        b"\x0a",  # a key without its value
        b"\x0a\xff",  # a length varint cut short
        b"\x38\x01",  # raw_input_contents with the varint wire type
        b"\x3b\x3c",  # a group
        b"\x02\x00",  # field number 0
        b"\x0f",  # wire type 7
        b"\x09\x00\x00",  # a fixed64 cut short
        b"\x0a" + b"\xff" * 11,  # a varint longer than 64 bits
    ],
)
def test_malformed_bytes_are_left_to_the_runtime(raw: bytes) -> None:
    assert split_raw_inputs(raw) is None


def test_split_of_other_wire_types() -> None:
    # an unknown varint field, a fixed64 and a fixed32 field survive in the head
    raw = b"\x50\x96\x01" + b"\x59" + b"\x00" * 8 + b"\x65" + b"\x00" * 4 + b"\x3a\x01z"
    split = split_raw_inputs(raw)
    assert split is not None
    head, views = split
    assert bytes(views[0]) == b"z"
    assert head == raw[:-3]


def test_join_gives_the_runtime_response() -> None:
    outputs = [np.arange(200_000, dtype=np.float32).reshape(2, -1), np.zeros(0, np.int64)]
    msg = pb.ModelInferResponse(model_name="m", model_version="1", id="x")
    for index, array in enumerate(outputs):
        msg.outputs.add(name=f"OUT{index}", datatype="FP32", shape=list(array.shape))
    joined = join_raw_outputs(
        msg.SerializeToString(), [a.reshape(-1).view(np.uint8) for a in outputs]
    )
    msg.raw_output_contents.extend(a.tobytes() for a in outputs)
    assert pb.ModelInferResponse.FromString(joined) == msg


def test_parts_are_the_joined_response_without_copying_the_outputs() -> None:
    outputs = [np.arange(100_000, dtype=np.float32), np.arange(3, dtype=np.int64)]
    msg = pb.ModelInferResponse(model_name="m", id="x")
    for index, array in enumerate(outputs):
        msg.outputs.add(name=f"OUT{index}", datatype="FP32", shape=list(array.shape))
    blobs = [a.view(np.uint8) for a in outputs]
    parts = raw_output_parts(msg.SerializeToString(), blobs)
    joined = join_raw_outputs(msg.SerializeToString(), blobs)
    assert isinstance(parts, MessageParts)
    assert len(parts) == len(joined) == sum(p.nbytes for p in parts.parts)
    assert parts.join() == joined == message_bytes(parts)
    msg.raw_output_contents.extend(a.tobytes() for a in outputs)
    assert pb.ModelInferResponse.FromString(joined) == msg
    # head, then per output its key and length and its memory: the arrays' own, read-only
    tensors = parts.parts[2::2]
    shared = [
        np.shares_memory(np.frombuffer(t, np.uint8), b) for t, b in zip(tensors, blobs, strict=True)
    ]
    assert shared == [True, True]
    assert all(part.readonly and part.format == "B" for part in parts.parts)


def test_message_bytes_passes_bytes_through() -> None:
    body = b"serialized"
    assert message_bytes(body) is body
    assert message_bytes(
        MessageParts([b"ab", memoryview(b"cd"), np.arange(2, dtype=np.uint16)])
    ) == (b"abcd\x00\x00\x01\x00")


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**21, 2**35, 2**63 - 1])
def test_varint_round_trip(value: int) -> None:
    msg = pb.ModelInferRequest.FromString(b"\x0a" + encode_varint(1) + b"a")
    assert msg.model_name == "a"
    encoded = encode_varint(value)
    assert _varint(encoded, 0, len(encoded)) == (value, len(encoded))


@pytest.mark.parametrize("final", [True, False])
def test_stream_response_is_the_runtimes(final: bool) -> None:
    inner = pb.ModelInferResponse(model_name="m", id="7", raw_output_contents=[b"x" * 300])
    inner.parameters["triton_final_response"].bool_param = not final  # replaced
    inner.parameters["other"].int64_param = 3
    expected = pb.ModelStreamInferResponse(infer_response=inner)
    expected.infer_response.parameters["triton_final_response"].bool_param = final
    got = pb.ModelStreamInferResponse.FromString(stream_response(inner.SerializeToString(), final))
    assert got == expected
    assert (
        stream_response(b"", final)
        == pb.ModelStreamInferResponse(
            infer_response=pb.ModelInferResponse(
                parameters={"triton_final_response": pb.InferParameter(bool_param=final)}
            )
        ).SerializeToString()
    )
