"""Triton's classification extension (top-k "value:index[:label]" strings)."""

from __future__ import annotations

import numpy as np
import pytest

from repokit.errors import Code, RepokitError
from repokit.protocol.classification import MAX_ELEMENTS, classify


def strings(result: np.ndarray) -> list[object]:
    return np.vectorize(lambda b: b.decode(), otypes=[object])(result).tolist()


def test_batched_float_top_k_with_labels() -> None:
    scores = np.array([[0.1, 0.933, 0.5], [680.980896, 1.0, 2.0]], dtype=np.float32)
    result = classify("FP32", scores, 2, batching=True, labels=["cat", "dog"])
    assert result.shape == (2, 2) and result.dtype == object
    assert strings(result) == [
        ["0.933000:1:dog", "0.500000:2"],
        ["680.980896:0:cat", "2.000000:2"],
    ]


def test_not_batching_uses_whole_tensor() -> None:
    values = np.array([[3, 9], [7, 1]], dtype=np.int32)
    result = classify("INT32", values, 3, batching=False)
    assert result.shape == (3,)
    assert strings(result) == ["9:1", "7:2", "3:0"]


def test_k_is_capped_at_elements_per_item() -> None:
    result = classify("UINT8", np.array([[1, 2]], dtype=np.uint8), 10, batching=True)
    assert strings(result) == [["2:1", "1:0"]]


def test_scalar_output_with_batching_model() -> None:
    result = classify("FP64", np.array(4.5), 1, batching=True)
    assert strings(result) == ["4.500000:0"]


def test_large_top_k_partition_path_is_sorted_descending() -> None:
    rng = np.random.default_rng(0)
    row = rng.permutation(1000).astype(np.int64)[None, :]
    result = classify("INT64", row, 5, batching=True)
    assert strings(result) == [
        [f"{v}:{int(np.where(row[0] == v)[0][0])}" for v in (999, 998, 997, 996, 995)]
    ]


def test_empty_label_line_is_omitted() -> None:
    result = classify(
        "FP32", np.array([1.0, 2.0], dtype=np.float32), 2, batching=False, labels=["", "b"]
    )
    assert strings(result) == ["2.000000:1:b", "1.000000:0"]


@pytest.mark.parametrize("datatype", ["FP16", "BF16", "BOOL", "BYTES"])
def test_unsupported_types(datatype: str) -> None:
    with pytest.raises(RepokitError) as info:
        classify(datatype, np.zeros(2, dtype=np.float16), 1, batching=False)
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        f"class result not available for output due to unsupported type '{datatype}'"
    )


def test_too_large() -> None:
    with pytest.raises(RepokitError, match="classification output tensor too large"):
        classify("UINT8", np.zeros(MAX_ELEMENTS + 1, dtype=np.uint8), 1, batching=False)
