"""Triton's walk over a request's inputs: the iteration order of GCC's
``std::unordered_map<std::string, ...>`` after inserting the names in request order.

The expected orders were printed by a C++ program built with GCC 12 that inserts its arguments
into such a map and prints it (the three-input order is also what Triton 2.51 lists in its
input count message, see ``tests/differential/test_batcher_errors_vs_triton.py``).
"""

from __future__ import annotations

import pytest

from repokit.core.triton_input_order import string_hash, triton_order

WALKED_30 = (25, 8, 12, 1, 7, 13, 11, 9, 3, 4, 6, 29, 2, 5, 10, 16, 23, 27, 15, 0, 14, 17, 18)
WALKED_30 += (19, 20, 21, 22, 24, 26, 28)


@pytest.mark.parametrize(
    ("names", "walked"),
    [
        (["INPUT0"], ["INPUT0"]),
        (["INPUT0", "INPUT1"], ["INPUT1", "INPUT0"]),
        (["INPUT1", "INPUT0"], ["INPUT0", "INPUT1"]),
        (["INPUT0", "INPUT1", "NOPE"], ["NOPE", "INPUT1", "INPUT0"]),
        (["A", "B", "C"], ["B", "C", "A"]),
        (["é", "x"], ["x", "é"]),
        # 17 names: past the first 13 buckets, one rehash to 29
        (
            list("abcdefghijklmnopq"),
            list("qoabphndkcifgejlm"),
        ),
        # 30 names: two rehashes (13, 29, 59 buckets), names sharing buckets
        (
            [f"IN_{i}" for i in range(30)],
            [f"IN_{i}" for i in WALKED_30],
        ),
    ],
)
def test_orders_as_gcc_unordered_map(names: list[str], walked: list[str]) -> None:
    assert list(triton_order(names)) == walked


def test_hash_of_empty_and_long_names() -> None:
    # names of every length modulo 8 go through both halves of the hash
    hashes = {string_hash("x" * n) for n in range(20)}
    assert len(hashes) == 20
    assert all(0 <= h < 2**64 for h in hashes)


def test_many_names_keep_every_name_once() -> None:
    names = [f"n{i}" for i in range(500)]
    walked = triton_order(names)
    assert sorted(walked) == sorted(names)
