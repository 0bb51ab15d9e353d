"""Binary tensor codecs (BYTES length prefixes, raw tensor bytes), checked against tritonclient."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor as tc_deserialize
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

from repokit.errors import Code, RepokitError
from repokit.protocol import datatypes
from repokit.protocol.bytes_tensor import deserialize_bytes_tensor, serialize_bytes_tensor
from repokit.protocol.tensor_codec import (
    array_from_bytes,
    array_to_bytes,
    expected_byte_size,
    output_byte_size,
    wire_dtype,
)


def tc_serialize(array: np.ndarray) -> bytes:
    """tritonclient's serialisation (a 0-d object array holding the bytes)."""
    return bytes(serialize_byte_tensor(array).item())


SAMPLES = [b"", b"a", b"hello world", bytes(range(256)), "ünïcode".encode()]


def test_serialize_matches_tritonclient() -> None:
    array = np.array(SAMPLES * 3, dtype=object).reshape(3, 5)
    assert serialize_bytes_tensor(array) == tc_serialize(array)


def test_serialize_str_and_other_objects_like_tritonclient() -> None:
    array = np.array(["abc", 12, b"x"], dtype=object)
    assert serialize_bytes_tensor(array) == tc_serialize(array)


def test_serialize_numpy_bytes_array() -> None:
    array = np.array([b"ab", b"c"], dtype=np.bytes_)
    assert serialize_bytes_tensor(array) == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"


def test_serialize_empty_is_empty() -> None:
    assert serialize_bytes_tensor(np.empty((0, 3), dtype=object)) == b""


def test_serialize_numeric_array_is_rejected() -> None:
    with pytest.raises(RepokitError) as info:
        serialize_bytes_tensor(np.zeros(2, dtype=np.float32))
    assert info.value.code is Code.INVALID_ARG
    assert "float32" in info.value.message


def test_deserialize_matches_tritonclient() -> None:
    wire = tc_serialize(np.array(SAMPLES, dtype=object))
    ours = deserialize_bytes_tensor(wire)
    assert ours.dtype == object
    assert ours.tolist() == tc_deserialize(wire).tolist() == SAMPLES


def test_deserialize_accepts_memoryview_and_bytearray() -> None:
    wire = serialize_bytes_tensor(np.array(SAMPLES, dtype=object))
    assert deserialize_bytes_tensor(memoryview(wire)[:]).tolist() == SAMPLES
    assert deserialize_bytes_tensor(bytearray(wire)).tolist() == SAMPLES


def test_deserialize_truncated_length_indicator() -> None:
    with pytest.raises(RepokitError) as info:
        deserialize_bytes_tensor(b"\x01\x00\x00\x00a\x02\x00", input_name="IN", model_name="m")
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "incomplete string length indicator for inference input 'IN' for model 'm', "
        "expecting 4 bytes but only 2 bytes available. Please make sure the string length "
        "indicator is in one buffer."
    )


def test_deserialize_truncated_data() -> None:
    with pytest.raises(RepokitError) as info:
        deserialize_bytes_tensor(b"\x05\x00\x00\x00abc")
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "incomplete string data for BYTES tensor, expecting string of length 5 "
        "but only 3 bytes available"
    )


def test_deserialize_too_few_and_too_many_elements() -> None:
    wire = serialize_bytes_tensor(np.array([b"a", b"b"], dtype=object))
    with pytest.raises(
        RepokitError,
        match=r"^expected 3 string elements for inference input "
        r"'X' for model 'm', got 2$",
    ):
        deserialize_bytes_tensor(wire, 3, input_name="X", model_name="m")
    with pytest.raises(
        RepokitError,
        match=r"^unexpected number of string elements 2 for "
        r"inference input 'X' for model 'm', expecting 1$",
    ):
        deserialize_bytes_tensor(wire, 1, input_name="X", model_name="m")


def test_deserialize_is_linear_on_many_elements() -> None:
    array = np.array([b"xy"] * 200_000, dtype=object)
    assert deserialize_bytes_tensor(serialize_bytes_tensor(array), 200_000).shape == (200_000,)


NUMERIC = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
]


@pytest.mark.parametrize("datatype", NUMERIC)
def test_numeric_round_trip_is_zero_copy(datatype: str) -> None:
    dtype = wire_dtype(datatype)
    source = (np.arange(12) % 2).astype(dtype).reshape(3, 4)
    assert np_to_triton_dtype(source.dtype) == datatype
    wire = source.tobytes()
    array = array_from_bytes(datatype, [3, 4], wire, input_name="I", model_name="m")
    assert array.shape == (3, 4) and array.dtype == dtype
    assert not array.flags.writeable
    assert np.shares_memory(array, np.frombuffer(wire, dtype=np.uint8))
    np.testing.assert_array_equal(array, source)
    out = array_to_bytes(datatype, array)
    assert bytes(out) == wire
    assert output_byte_size(datatype, array) == len(wire) == expected_byte_size(datatype, [3, 4])


def test_bf16_is_uint16_words() -> None:
    words = np.array([0x3F80, 0x4000], dtype="<u2")
    array = array_from_bytes("BF16", [2], words.tobytes(), input_name="I", model_name="m")
    assert array.dtype == np.uint16 and array.tolist() == [0x3F80, 0x4000]
    assert bytes(array_to_bytes("BF16", array)) == words.tobytes()


def test_bool_is_one_byte() -> None:
    array = array_from_bytes("BOOL", [3], b"\x01\x00\x01", input_name="I", model_name="m")
    assert array.tolist() == [True, False, True]
    assert bytes(array_to_bytes("BOOL", np.array([True, False]))) == b"\x01\x00"


def test_writable_buffer_gives_read_only_view() -> None:
    buffer = bytearray(8)
    array = array_from_bytes("FP32", [2], memoryview(buffer), input_name="I", model_name="m")
    assert not array.flags.writeable


def test_byte_size_mismatch_message() -> None:
    with pytest.raises(RepokitError) as info:
        array_from_bytes("FP32", [1, 16], b"\x00" * 60, input_name="INPUT0", model_name="add_sub")
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 64, got 60"
    )


def test_bytes_input_checks_element_count() -> None:
    wire = serialize_bytes_tensor(np.array([b"a", b"bc", b"d", b"e"], dtype=object))
    array = array_from_bytes("BYTES", [2, 2], wire, input_name="S", model_name="m")
    assert array.shape == (2, 2) and array[1, 1] == b"e"
    with pytest.raises(RepokitError, match="expected 6 string elements for inference input 'S'"):
        array_from_bytes("BYTES", [2, 3], wire, input_name="S", model_name="m")


def test_unknown_datatype_is_invalid_arg() -> None:
    with pytest.raises(RepokitError) as info:
        array_from_bytes("FLOAT32", [1], b"\x00" * 4, input_name="I", model_name="m")
    assert info.value.code is Code.INVALID_ARG
    assert "FLOAT32" in info.value.message
    with pytest.raises(RepokitError):
        expected_byte_size("STRING", [1])


def test_output_conversion_non_contiguous_and_big_endian() -> None:
    source = np.arange(6, dtype=">f4").reshape(2, 3).T
    out = array_to_bytes("FP32", source)
    assert bytes(out) == np.ascontiguousarray(source, dtype="<f4").tobytes()


def test_output_contiguous_is_not_copied() -> None:
    source = np.arange(4, dtype=np.float32)
    out = array_to_bytes("FP32", source)
    assert isinstance(out, memoryview)
    assert np.shares_memory(np.frombuffer(out, dtype=np.float32), source)


def test_bytes_output() -> None:
    source = np.array([b"ab", "c"], dtype=object)
    assert array_to_bytes("BYTES", source) == tc_serialize(source)
    assert output_byte_size("BYTES", source) == 11


def test_datatype_table_agrees_with_tritonclient() -> None:
    for name in NUMERIC:
        assert np_to_triton_dtype(wire_dtype(name)) == name
    assert datatypes.from_protocol("BYTES") is not None
