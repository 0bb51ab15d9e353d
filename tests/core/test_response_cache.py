"""The response cache on its own: tritonserver's cache flags, the LRU store and its byte
accounting, and the request key (what makes two requests the same)."""

from __future__ import annotations

import itertools
import logging
import re

import numpy as np
import pytest

from repokit.backends.base import BackendRequest
from repokit.core.response_cache import (
    ENTRY_OVERHEAD,
    MIN_CACHE_SIZE,
    TENSOR_OVERHEAD,
    CacheSettings,
    ModelCache,
    ResponseCache,
    parse_cache_config,
)
from repokit.protocol.types import InferTensor

# ----------------------------------------------------------------------------- the cache flags


@pytest.mark.parametrize(
    ("specs", "byte_size", "size"),
    [
        (["local,size=1048576"], None, 1048576),
        (["local,size=1048576", "local,size=2048"], None, 2048),  # the last setting counts
        (["local,size= 4096"], None, 4096),
        ([], "1048576", 1048576),  # --response-cache-byte-size
    ],
)
def test_cache_flags_in_tritonservers_spellings(
    specs: list[str], byte_size: str | None, size: int
) -> None:
    assert parse_cache_config(specs, byte_size) == CacheSettings(size=size)


def test_no_cache_flag_means_no_cache() -> None:
    assert parse_cache_config([], None) is None


@pytest.mark.parametrize(
    ("specs", "byte_size", "message"),
    [
        (
            ["local"],
            None,
            "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. "
            "Got local",
        ),
        (
            [",size=10"],
            None,
            "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. "
            "Got ,size=10",
        ),
        (
            ["local,size"],
            None,
            "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size",
        ),
        (
            ["local,=5"],
            None,
            "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,=5",
        ),
        (
            ["local,size="],
            None,
            "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size=",
        ),
        (
            ["local,size=1048576"],
            "1048576",
            "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other.",
        ),
        (
            ["local,size=1048576", "redis,host=x"],
            None,
            "found multiple cache configurations, but only a single cache is currently supported",
        ),
        (
            ["local,bad=1"],
            None,
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field.",
        ),
        (
            ["local,size=abc"],
            None,
            "Failed to initialize LocalCache: size 'abc' is not a number of bytes",
        ),
        (
            ["local,size=100"],
            None,
            "Failed to initialize LocalCache: a cache of 100 bytes is too small (at least 192)",
        ),
        (
            ["local,size=-5"],
            None,
            "Failed to initialize LocalCache: a cache of -5 bytes is too small (at least 192)",
        ),
    ],
)
def test_bad_cache_flags_say_what_is_wrong(
    specs: list[str], byte_size: str | None, message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        parse_cache_config(specs, byte_size)
    assert str(caught.value) == message


def test_an_unknown_cache_is_not_found_where_it_was_looked_for() -> None:
    with pytest.raises(ValueError, match=r"^unable to find 'libtritoncache_redis.so' for cache"):
        parse_cache_config(["redis,host=localhost"], None, "/caches")
    with pytest.raises(ValueError, match="Searched: /caches"):
        parse_cache_config(["redis,host=localhost"], None, "/caches")


def test_the_smallest_cache_triton_can_create_is_accepted() -> None:
    assert parse_cache_config([f"local,size={MIN_CACHE_SIZE}"]) == CacheSettings(MIN_CACHE_SIZE)


# ------------------------------------------------------------------------------------ the store


def fp32(name: str, values: list[float]) -> InferTensor:
    data = np.array(values, dtype=np.float32)
    return InferTensor(name, "FP32", data.shape, data)


def charge(key: bytes, *tensors: InferTensor) -> int:
    """What an entry of these tensors costs (the documented accounting)."""
    total = ENTRY_OVERHEAD + len(key)
    for tensor in tensors:
        data = np.asarray(tensor.data)
        size = sum(4 + len(v) for v in data.reshape(-1)) if data.dtype == object else data.nbytes
        total += size + len(tensor.name) + 8 * len(tensor.shape) + TENSOR_OVERHEAD
    return total


def ticking() -> itertools.count[int]:
    return itertools.count(0, 10)


def test_a_stored_entry_is_found_and_counted() -> None:
    clock = ticking()
    cache = ResponseCache(4096, clock=lambda: next(clock))
    assert cache.lookup(b"k") is None
    assert cache.insert(b"k", [fp32("OUT", [1, 2])])
    entry = cache.lookup(b"k")
    assert entry is not None
    assert [t.name for t in entry.outputs] == ["OUT"]
    assert entry.outputs[0].data.tolist() == [1.0, 2.0]
    assert (cache.lookups, cache.hits, cache.misses, cache.num_entries) == (2, 1, 1, 1)
    assert cache.lookup_ns == 20 and cache.insertion_ns == 10  # one tick per operation


def test_entries_are_copies_the_caller_cannot_change() -> None:
    cache = ResponseCache(4096)
    tensor = fp32("OUT", [1, 2])
    cache.insert(b"k", [tensor])
    tensor.data[0] = 99
    entry = cache.lookup(b"k")
    assert entry is not None
    assert entry.outputs[0].data.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError):
        entry.outputs[0].data[0] = 5


def test_a_view_into_a_larger_buffer_is_stored_and_charged_alone() -> None:
    big = np.arange(10_000, dtype=np.float32)
    view = InferTensor("OUT", "FP32", (2,), big[10:12])
    cache = ResponseCache(4096)
    assert cache.insert(b"k", [view])
    entry = cache.lookup(b"k")
    assert entry is not None
    assert not np.shares_memory(entry.outputs[0].data, big)
    assert cache.used_bytes == charge(b"k", view)
    assert entry.outputs[0].data.nbytes == 8


def test_size_accounting_of_numeric_and_bytes_tensors() -> None:
    cache = ResponseCache(1 << 20)
    numbers = fp32("A", [1, 2, 3, 4])
    words = np.array([b"ab", b"", b"xyz"], dtype=object)
    text = InferTensor("TEXT", "BYTES", (3,), words)
    cache.insert(b"one", [numbers])
    cache.insert(b"two", [numbers, text])
    assert cache.used_bytes == charge(b"one", numbers) + charge(b"two", numbers, text)
    assert cache.utilization == cache.used_bytes / (1 << 20)


def test_least_recently_used_entries_are_evicted_to_make_room() -> None:
    tensor = fp32("OUT", [0.0] * 8)
    one = charge(b"a", tensor)
    cache = ResponseCache(3 * one)  # room for three entries
    for key in (b"a", b"b", b"c"):
        assert cache.insert(key, [tensor])
    assert cache.lookup(b"a") is not None  # a is now the most recently used
    assert cache.insert(b"d", [tensor])
    assert b"b" not in cache  # the least recently used went
    assert all(key in cache for key in (b"a", b"c", b"d"))
    assert cache.evictions == 1
    assert cache.used_bytes == 3 * one <= cache.size


def test_a_large_entry_evicts_as_many_as_it_needs() -> None:
    small = fp32("OUT", [0.0])
    large = fp32("OUT", [0.0] * 40)
    cache = ResponseCache(charge(b"L", large) + charge(b"a", small))
    for key in (b"a", b"b", b"c", b"d"):
        cache.insert(key, [small])
    assert cache.insert(b"L", [large])
    assert cache.used_bytes <= cache.size
    assert b"L" in cache and b"d" in cache and b"a" not in cache


def test_an_entry_larger_than_the_cache_is_not_inserted(caplog: pytest.LogCaptureFixture) -> None:
    tensor = fp32("OUT", [0.0] * 100)
    size = charge(b"k", tensor) - 1
    cache = ResponseCache(size)
    cache.insert(b"small", [fp32("OUT", [1.0])])
    assert not caplog.records
    with caplog.at_level(logging.ERROR):
        assert not cache.insert(b"k", [tensor])
    assert b"k" not in cache and b"small" in cache  # nothing was evicted for it
    assert cache.evictions == 0
    # as Triton logs it (L0_response_cache greps 'Failed to insert key')
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert re.fullmatch(
        rf"Failed to insert key \[\d+\] into response cache: Requested byte_size: {size + 1}"
        rf" is greater than total cache size: {size}",
        record.getMessage(),
    )


def test_a_key_already_stored_is_not_replaced() -> None:
    cache = ResponseCache(4096)
    assert cache.insert(b"k", [fp32("OUT", [1.0])])
    assert not cache.insert(b"k", [fp32("OUT", [2.0])])
    entry = cache.lookup(b"k")
    assert entry is not None and entry.outputs[0].data.tolist() == [1.0]
    assert cache.num_entries == 1


# -------------------------------------------------------------------------------------- the key


def request(*tensors: InferTensor, outputs: tuple[str, ...] = ()) -> BackendRequest:
    return BackendRequest({t.name: t for t in tensors}, outputs)


def tensor(name: str, datatype: str, data: np.ndarray) -> InferTensor:
    return InferTensor(name, datatype, tuple(data.shape), data)


CACHE = ResponseCache(4096)
MODEL = ModelCache(CACHE, "m", 1)


def test_each_load_of_a_version_has_keys_of_its_own() -> None:
    reloaded = ModelCache(CACHE, "m", 1)
    assert reloaded.key(BASE) != MODEL.key(BASE)


BASE = request(tensor("A", "FP32", np.arange(4, dtype=np.float32)))


def test_the_same_request_has_the_same_key() -> None:
    again = request(tensor("A", "FP32", np.arange(4, dtype=np.float32)))
    assert MODEL.key(BASE) == MODEL.key(again)


def test_input_order_does_not_matter() -> None:
    a = tensor("A", "INT32", np.array([1], dtype=np.int32))
    b = tensor("B", "INT32", np.array([2], dtype=np.int32))
    assert MODEL.key(request(a, b)) == MODEL.key(request(b, a))


def test_binary_and_json_decoded_inputs_have_the_same_key() -> None:
    raw = np.arange(4, dtype=np.float32).tobytes()
    from_binary = request(tensor("A", "FP32", np.frombuffer(raw, dtype=np.float32)))
    from_json = request(tensor("A", "FP32", np.array([0.0, 1.0, 2.0, 3.0], dtype=np.float32)))
    assert MODEL.key(from_binary) == MODEL.key(from_json)


def test_a_non_contiguous_input_keys_as_its_values() -> None:
    strided = np.arange(8, dtype=np.float32)[::2]
    dense = np.array([0, 2, 4, 6], dtype=np.float32)
    assert MODEL.key(request(tensor("A", "FP32", strided))) == MODEL.key(
        request(tensor("A", "FP32", dense))
    )


@pytest.mark.parametrize(
    "other",
    [
        request(tensor("A", "FP32", np.arange(4, dtype=np.float32).reshape(2, 2))),  # shape
        request(tensor("A", "INT32", np.arange(4, dtype=np.float32).view(np.int32))),  # type
        request(tensor("A", "FP32", np.array([0, 1, 2, 4], dtype=np.float32))),  # data
        request(tensor("B", "FP32", np.arange(4, dtype=np.float32))),  # name
    ],
    ids=["shape", "datatype", "data", "name"],
)
def test_what_makes_requests_different(other: BackendRequest) -> None:
    assert MODEL.key(BASE) != MODEL.key(other)


def test_model_and_version_are_part_of_the_key() -> None:
    assert MODEL.key(BASE) != ModelCache(CACHE, "m", 2).key(BASE)
    assert MODEL.key(BASE) != ModelCache(CACHE, "n", 1).key(BASE)


def test_requested_outputs_are_not_part_of_the_key_but_of_the_lookup() -> None:
    some = request(*BASE.inputs.values(), outputs=("Y", "X", "X"))
    assert MODEL.key(some) == MODEL.key(BASE)
    assert ModelCache.wanted(some) == frozenset({"X", "Y"})


def test_an_entry_answers_only_the_outputs_it_holds() -> None:
    cache = ResponseCache(4096)
    cache.insert(b"k", [fp32("Y", [1.0])])
    assert cache.lookup(b"k", frozenset({"Y"})) is not None
    assert cache.lookup(b"k", frozenset({"Z"})) is None
    assert cache.lookup(b"k", frozenset({"Y", "Z"})) is None
    assert (cache.hits, cache.misses) == (1, 2)
    assert not cache.insert(b"k", [fp32("Y", [1.0])])  # nothing new
    assert cache.insert(b"k", [fp32("Y", [1.0]), fp32("Z", [2.0])])  # replaces it
    entry = cache.lookup(b"k", frozenset({"Z"}))
    assert entry is not None and [t.name for t in entry.outputs] == ["Y", "Z"]
    assert cache.num_entries == 1
    assert cache.used_bytes == charge(b"k", fp32("Y", [1.0]), fp32("Z", [2.0]))
    assert not cache.insert(b"k", [fp32("Y", [1.0])])  # keeps the larger


def test_bytes_elements_are_told_apart_by_their_lengths() -> None:
    split1 = np.array([b"ab", b"c"], dtype=object)
    split2 = np.array([b"a", b"bc"], dtype=object)
    key1 = MODEL.key(request(tensor("S", "BYTES", split1)))
    key2 = MODEL.key(request(tensor("S", "BYTES", split2)))
    assert key1 != key2
    again = np.array([b"ab", b"c"], dtype=object)
    assert key1 == MODEL.key(request(tensor("S", "BYTES", again)))


def test_request_parameters_are_not_part_of_the_key() -> None:
    with_params = request(*BASE.inputs.values())
    with_params.parameters["temperature"] = 0.5
    assert MODEL.key(BASE) == MODEL.key(with_params)
