"""The order in which Triton walks a request's inputs when it checks them.

Triton keeps a request's inputs in a ``std::unordered_map<std::string, Input>`` and walks that
map for its checks (the input count message's "Got input(s) [...]" list, the batch dimension
check, then datatype, shape and byte size input by input): when several inputs are wrong, the
one named in its error is the first wrong one in the map's iteration order, not in the request's
order. Triton 2.51 is built with GCC's standard library, whose iteration order follows from:

* the key's hash: ``std::hash<std::string>``, GCC's 64-bit Murmur-style ``_Hash_bytes`` with
  the seed ``0xc70f6907``;
* the bucket count: 11 asked for at the first insertion, rounded up to 13 by the prime
  rehash policy; at 14 keys and later the table grows to the prime at or above twice the count
  (maximum load factor 1);
* a singly linked list of all nodes in which each bucket's nodes are adjacent: a key whose
  bucket is empty goes to the front of the list, a key whose bucket holds others goes in front
  of them; a rehash re-inserts the old list's nodes in their order by the same rule.

``triton_order(names)`` gives the request's input names (unique, in request order) in that
order; the checks run in request order and only look at this order to name the input Triton
names once a request has turned out to be wrong.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from functools import lru_cache

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907
# GCC's bucket counts for a wanted count below 14
_SMALL = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
_INITIAL_BUCKETS = 11


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def string_hash(text: str) -> int:
    """GCC's ``std::hash<std::string>`` of ``text``'s UTF-8 bytes (64-bit)."""
    data = text.encode()
    length = len(data)
    value = (_SEED ^ (length * _MUL)) & _MASK
    whole = length & ~7
    for start in range(0, whole, 8):
        word = int.from_bytes(data[start : start + 8], "little")
        word = (_shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK
        value = ((value ^ word) * _MUL) & _MASK
    if length & 7:
        value = ((value ^ int.from_bytes(data[whole:], "little")) * _MUL) & _MASK
    value = (_shift_mix(value) * _MUL) & _MASK
    return _shift_mix(value)


def _is_prime(number: int) -> bool:
    if number < 2:
        return False
    divisor = 2
    while divisor * divisor <= number:
        if number % divisor == 0:
            return False
        divisor += 1
    return True


def _next_bucket_count(wanted: int) -> int:
    if wanted < len(_SMALL):
        return _SMALL[wanted]
    # the start of GCC's table of primes; past it (requests of thousands of inputs) the next
    # prime stands in for GCC's choice
    index = bisect_left(_PRIMES, wanted)
    if index < len(_PRIMES):
        return _PRIMES[index]
    candidate = wanted
    while not _is_prime(candidate):
        candidate += 1
    return candidate


_PRIMES = (
    *(2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83),
    *(89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257),
    *(277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887),
    *(953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753),
    *(2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783),
)


def _insert(chain: list[tuple[str, int]], name: str, name_hash: int, buckets: int) -> None:
    """Put ``name`` where GCC links a new node: in front of its bucket's nodes, else first."""
    bucket = name_hash % buckets
    for index, (_other, other_hash) in enumerate(chain):
        if other_hash % buckets == bucket:
            chain.insert(index, (name, name_hash))
            return
    chain.insert(0, (name, name_hash))


@lru_cache(maxsize=256)
def _order(names: tuple[str, ...]) -> tuple[str, ...]:
    chain: list[tuple[str, int]] = []
    buckets, next_resize = 1, 0
    for count, name in enumerate(names):
        if count + 1 > next_resize:
            least = max(count + 1, _INITIAL_BUCKETS if next_resize == 0 else 0)
            if least >= buckets:
                buckets = _next_bucket_count(max(least + 1, buckets * 2))
                old, chain = chain, []
                for other, other_hash in old:
                    _insert(chain, other, other_hash, buckets)
            next_resize = buckets
        _insert(chain, name, string_hash(name), buckets)
    return tuple(name for name, _hash in chain)


def triton_order(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` (unique) in the order Triton 2.51 walks a request's inputs of these names."""
    return _order(tuple(names))
