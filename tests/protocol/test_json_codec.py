"""JSON `data` decoding/encoding with Triton's element type rules."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from repokit.errors import Code, RepokitError
from repokit.protocol.json_codec import (
    MAX_NESTING,
    array_from_json,
    array_to_json,
    strings_from_json,
)


def decode(datatype: str, shape: list[int], data: Any) -> np.ndarray:
    return array_from_json(datatype, shape, data, input_name="IN")


def rejects(datatype: str, shape: list[int], data: Any) -> str:
    with pytest.raises(RepokitError) as info:
        decode(datatype, shape, data)
    assert info.value.code is Code.INVALID_ARG
    return info.value.message


def test_flat_and_nested_give_the_same_array() -> None:
    flat = decode("FP32", [2, 2], [1, 2.5, 3, 4])
    nested = decode("FP32", [2, 2], [[1, 2.5], [3, 4]])
    ragged = decode("FP32", [2, 2], [[1], [2.5, [3]], 4])  # nesting is not checked, only count
    assert flat.dtype == np.float32 and flat.shape == (2, 2)
    for other in (nested, ragged):
        np.testing.assert_array_equal(flat, other)


def test_fp_accepts_nan_and_infinity_from_json() -> None:
    data = json.loads("[NaN, Infinity, -Infinity, 1]")
    array = decode("FP64", [4], data)
    assert math.isnan(array[0]) and array[1] == math.inf and array[2] == -math.inf


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("INT8", np.int8),
        ("INT16", np.int16),
        ("INT32", np.int32),
        ("INT64", np.int64),
        ("UINT8", np.uint8),
        ("UINT16", np.uint16),
        ("UINT32", np.uint32),
        ("UINT64", np.uint64),
    ],
)
def test_integer_types(datatype: str, dtype: type) -> None:
    array = decode(datatype, [3], [0, 1, 100])
    assert array.dtype == dtype and array.tolist() == [0, 1, 100]


def test_uint64_full_range_and_int64_extremes() -> None:
    assert decode("UINT64", [1], [2**64 - 1]).tolist() == [2**64 - 1]
    assert decode("INT64", [2], [-(2**63), 2**63 - 1]).tolist() == [-(2**63), 2**63 - 1]


def test_narrowing_wraps_like_triton() -> None:
    assert decode("INT8", [1], [300]).tolist() == [44]


def test_bool_only_true_false() -> None:
    assert decode("BOOL", [2], [True, False]).tolist() == [True, False]
    assert rejects("BOOL", [2], [1, 0]) == (
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
    )
    assert "non-boolean" in rejects("BOOL", [2], [True, 1])


@pytest.mark.parametrize("bad", [[1.0], [True], [1, False], ["1"], [None], [2**63]])
def test_int_rejects_non_integers(bad: list[Any]) -> None:
    assert rejects("INT32" if bad != [2**63] else "INT64", [len(bad)], bad) == (
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
    )


@pytest.mark.parametrize("bad", [[-1], [1.5], [True], [2**64]])
def test_uint_rejects_negative_and_non_integers(bad: list[Any]) -> None:
    assert rejects("UINT64", [1], bad) == (
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
    )


@pytest.mark.parametrize("bad", [[True], ["1.0"], [None], [{"a": 1}], [10**400]])
def test_fp_rejects_non_numbers(bad: list[Any]) -> None:
    assert "non-number" in rejects("FP32", [1], bad)


def test_bytes_are_utf8_strings_without_base64() -> None:
    array = decode("BYTES", [2], ["aGk=", "ü"])
    assert array.dtype == object and array.tolist() == [b"aGk=", "ü".encode()]
    assert "non-string" in rejects("BYTES", [1], [1])


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_types_are_binary_only(datatype: str) -> None:
    assert rejects(datatype, [1], [1.0]) == (
        f"receiving {datatype} data via JSON is not supported. "
        "Please use the binary data format for input IN"
    )


def test_unknown_datatype() -> None:
    assert rejects("STRING", [1], ["a"]) == "invalid datatype for input IN"


def test_element_count_mismatch() -> None:
    assert rejects("FP32", [2], [1, 2, 3]) == (
        "Unable to parse 'data': Shape does not match true shape of 'data' field"
    )
    assert rejects("FP32", [4], [[1, 2], [3]]) == (
        "Unable to parse 'data': Shape does not match true shape of 'data' field"
    )


def test_scalar_data_is_rejected() -> None:
    assert "expected a JSON array" in rejects("FP32", [1], 5)


def test_zero_elements() -> None:
    assert decode("FP32", [0, 3], []).shape == (0, 3)
    assert decode("BOOL", [0], []).dtype == np.bool_


def test_nesting_limit() -> None:
    data: list[Any] = [1]
    for _ in range(MAX_NESTING + 1):
        data = [data]
    assert "nests deeper" in rejects("INT32", [1], data)


def test_output_is_flat_and_widened() -> None:
    out = array_to_json("FP32", np.array([[0.1, 2]], dtype=np.float32))
    assert out == [float(np.float32(0.1)), 2.0]
    assert json.dumps(out) == "[0.10000000149011612, 2.0]"
    assert array_to_json("BOOL", np.array([True, False])) == [True, False]
    assert array_to_json("UINT64", np.array([2**64 - 1], dtype=np.uint64)) == [2**64 - 1]
    assert array_to_json("BYTES", np.array([[b"a", "b"]], dtype=object)) == ["a", "b"]


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_outputs_are_binary_only(datatype: str) -> None:
    with pytest.raises(RepokitError) as info:
        array_to_json(datatype, np.zeros(1, dtype=np.float16))
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        f"sending {datatype} data via JSON is not supported. "
        "Please use the binary data format for output"
    )


def test_non_utf8_bytes_output_asks_for_binary() -> None:
    with pytest.raises(RepokitError) as info:
        array_to_json("BYTES", np.array([b"\xff"], dtype=object), output_name="OUT")
    assert info.value.code is Code.INVALID_ARG
    assert "output 'OUT'" in info.value.message and "binary_data" in info.value.message


def test_element_errors_in_triton_order() -> None:
    # Triton reads the elements in order: a wrong one among the first ``count`` comes first,
    # then too many; with too few, any wrong element comes first
    assert rejects("FP32", [2], [1, "x", 3]) == (
        "Unable to parse 'data': attempt to access JSON non-number as double"
    )
    assert rejects("FP32", [2], [1, 2, "x"]) == (
        "Unable to parse 'data': Shape does not match true shape of 'data' field"
    )
    assert rejects("FP32", [4], [1, "x"]) == (
        "Unable to parse 'data': attempt to access JSON non-number as double"
    )
    assert rejects("INT32", [4], [1, 1.5]) == (
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
    )


def test_strings_from_json_leaves_the_count_to_the_request_checks() -> None:
    strings = strings_from_json([["a", "bc"], ["é"]])
    assert strings.dtype == object and list(strings) == [b"a", b"bc", "é".encode()]
    with pytest.raises(RepokitError) as info:
        strings_from_json(["a", 1])
    assert info.value.message == (
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
    )


def test_numbers_beyond_a_float_range_become_infinities_without_a_warning() -> None:
    """As Triton casts its doubles: 1e39 as FP32 is inf, and nothing is printed to the server's
    stderr (numpy's "overflow encountered in cast")."""
    probe = (
        "import numpy as np\n"
        "from repokit.protocol.json_codec import array_from_json\n"
        "from repokit.protocol.plain_json import plain_json_array\n"
        "item = {'name': 'x', 'datatype': 'FP32', 'shape': [2], 'data': [1e39, -1e39]}\n"
        "print(plain_json_array(item, 1 << 30)[3].tolist())\n"
        "print(array_from_json('FP32', [1], [1e39], input_name='x').tolist())\n"
        "print(array_from_json('FP32', [2], [1.5, -1e39], input_name='x').tolist())\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["[inf, -inf]", "[inf]", "[1.5, -inf]"]
    assert done.stderr == ""
