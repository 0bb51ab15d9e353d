"""The rule that keeps unrepresentable empty shapes out of numpy agrees with numpy itself."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from repokit.protocol.array_shape import representable, shaped
from tests.fuzz.conftest import PURE

dims = st.lists(st.integers(0, 2**64) | st.sampled_from([0, 1, 2, 2**31, 2**32, 2**62]), max_size=4)
dtypes = st.sampled_from([np.uint8, np.float16, np.float32, np.float64, np.object_])


@PURE
@given(dims=dims, dtype=dtypes)
def test_representable_matches_numpy(dims: list[int], dtype: type) -> None:
    itemsize = np.dtype(dtype).itemsize
    try:
        np.empty(0, dtype=dtype).reshape(tuple(dims))
        numpy_takes = True
    except ValueError:
        numpy_takes = False
    if 0 in dims:  # only empty shapes can be asked of numpy without the memory
        assert representable(dims, itemsize) == numpy_takes
        assert shaped(np.empty(0, dtype=dtype), tuple(dims)).size == 0
