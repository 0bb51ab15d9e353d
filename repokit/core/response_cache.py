"""The response cache: ``--cache-config local,size=N`` on the server and
``response_cache { enable: true }`` in a model's config.

One :class:`ResponseCache` per server, shared by every model (as Triton's ``local`` cache): an
LRU map from a request's key to the output tensors its model produced, holding at most ``size``
bytes. An entry's size is its tensor bytes plus a fixed bookkeeping charge per entry and per
tensor; inserting evicts least recently used entries until the new one fits, and an entry
larger than the whole cache is not inserted. Lookups and inserts run on the event loop without
awaiting, so they need no lock.

A model version whose config enables the cache gets a :class:`ModelCache`: the key of a request
is a 128-bit BLAKE2b digest of the model name, version and, per input (sorted by name), its
name, datatype, shape and bytes (BYTES elements with their 4-byte lengths). Triton 2.51 hashes
only the model name, version, input names and input bytes: two requests whose inputs hold the
same bytes in different shapes get one entry there, and the second gets the first one's answer
(checked against it: ``[2,2]`` answered with the ``[1,4]`` output). Request parameters are not
part of the key, as in Triton: the docs define a request for the cache as model, version and
input tensors.

An entry remembers which outputs it holds: a request is a hit only when the entry has every
output it asks for (a request that names none asks for all of the model's). Triton 2.51 answers
a request for ``OUTPUT1`` with a stored ``OUTPUT0`` alone. A result that holds more outputs than
the stored one replaces it.

Only successful results are stored (Triton's docs say so; 2.51 stores an error response as an
empty one and answers later identical requests 200 with no outputs). What is stored are the
model's output tensors, copied into buffers of their own; a hit is finished per request like
any result (requested outputs, classification, shared-memory outputs). Response parameters are
not stored, as in Triton (a hit on an ensemble has none).

Each load of a model version keys its requests apart (a load counter is part of the key), so a
version loaded again, perhaps from changed files, never answers from its previous load's
entries; those age out of the LRU order.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from repokit.backends.base import BackendRequest
from repokit.protocol.tensor_codec import array_to_bytes
from repokit.protocol.types import InferTensor

LOCAL_CACHE = "local"
# Triton's local cache cannot be created smaller (its buffer manager needs this much)
MIN_CACHE_SIZE = 192
ENTRY_OVERHEAD = 64  # bytes charged per entry (key, LRU links) ...
TENSOR_OVERHEAD = 32  # ... and per tensor (datatype, shape), besides names and data

log = logging.getLogger(__name__)

_FORMAT = "--cache-config option format is '<cache name>,<setting>=<value>'. Got "


@dataclass(frozen=True)
class CacheSettings:
    """The server's cache: ``--cache-config local,size=N`` (or ``--response-cache-byte-size``)."""

    size: int
    name: str = LOCAL_CACHE


def parse_cache_config(
    specs: Iterable[str], byte_size: str | None = None, directory: str = ""
) -> CacheSettings | None:
    """The cache that tritonserver's cache flags configure (None: no cache), with its errors
    (ValueError) for a malformed ``--cache-config``, two caches, both flags, an unknown cache
    or a size the local cache cannot have."""
    specs = list(specs)
    if byte_size is not None and specs:
        raise ValueError(
            "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other."
        )
    settings: dict[str, dict[str, str]] = {}
    if byte_size is not None:
        settings[LOCAL_CACHE] = {"size": byte_size}
    for spec in specs:
        name, comma, setting = spec.partition(",")
        if not comma or not name:
            raise ValueError(
                "No cache specified. --cache-config option format is "
                f"<cache name>,<setting>=<value>. Got {spec}"
            )
        key, equals, value = setting.partition("=")
        if not equals or not key or not value:
            raise ValueError(_FORMAT + spec)
        settings.setdefault(name, {})[key] = value  # a repeated setting: the last one counts
    if not settings:
        return None
    if len(settings) > 1:
        raise ValueError(
            "found multiple cache configurations, but only a single cache is currently supported"
        )
    ((name, config),) = settings.items()
    if name != LOCAL_CACHE:
        searched = directory or "/opt/tritonserver/caches"
        raise ValueError(
            f"unable to find 'libtritoncache_{name}.so' for cache. Searched: {searched} "
            f"(this server has the '{LOCAL_CACHE}' cache only)"
        )
    text = config.get("size")
    if text is None:
        raise ValueError(
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
        )
    try:
        size = int(text.strip())
    except ValueError:
        raise ValueError(
            f"Failed to initialize LocalCache: size '{text}' is not a number of bytes"
        ) from None
    if size < MIN_CACHE_SIZE:
        raise ValueError(
            f"Failed to initialize LocalCache: a cache of {size} bytes is too small "
            f"(at least {MIN_CACHE_SIZE})"
        )
    return CacheSettings(size=size)


def _tensor_bytes(tensor: InferTensor) -> bytes | memoryview:
    return array_to_bytes(tensor.datatype, tensor.data)


def _stored(tensor: InferTensor) -> tuple[InferTensor, int]:
    """A copy of ``tensor`` that owns its data (read-only), and the bytes it is charged."""
    data = tensor.data
    if data.dtype == object:
        copy = data.copy()  # the elements are immutable bytes
        size = len(_tensor_bytes(tensor))
    else:
        copy = np.array(data, copy=True, order="C")
        size = copy.nbytes
    copy.flags.writeable = False
    stored = InferTensor(tensor.name, tensor.datatype, tuple(tensor.shape), copy)
    return stored, size + len(tensor.name) + 8 * len(tensor.shape) + TENSOR_OVERHEAD


@dataclass(frozen=True)
class CacheEntry:
    outputs: tuple[InferTensor, ...]
    byte_size: int
    names: frozenset[str]


class ResponseCache:
    """The LRU store shared by every model (see the module docstring); counters as Triton's
    ``nv_cache_*`` gauges report them. ``clock`` (ns) is injectable."""

    def __init__(self, size: int, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.size = size
        self._clock = clock
        self._entries: OrderedDict[bytes, CacheEntry] = OrderedDict()
        self.used_bytes = 0
        self.lookups = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.lookup_ns = 0
        self.insertion_ns = 0
        self._loads = 0

    def next_load(self) -> int:
        """A number no other model version load got (part of its keys)."""
        self._loads += 1
        return self._loads

    @property
    def num_entries(self) -> int:
        return len(self._entries)

    @property
    def utilization(self) -> float:
        return self.used_bytes / self.size

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    def lookup(self, key: bytes, wanted: frozenset[str] = frozenset()) -> CacheEntry | None:
        """The entry of ``key`` (now the most recently used) when it holds the ``wanted``
        outputs, or None."""
        started = self._clock()
        entry = self._entries.get(key)
        self.lookups += 1
        if entry is not None and not wanted <= entry.names:
            entry = None
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
            self._entries.move_to_end(key)
        self.lookup_ns += self._clock() - started
        return entry

    def insert(self, key: bytes, outputs: Iterable[InferTensor]) -> bool:
        """Store copies of ``outputs`` under ``key``, evicting the least recently used entries
        until they fit; False when the key holds these outputs already or the entry is larger
        than the cache (then nothing changes). A stored entry with fewer outputs is replaced."""
        started = self._clock()
        try:
            outputs = list(outputs)
            names = frozenset(t.name for t in outputs)
            old = self._entries.get(key)
            if old is not None and names <= old.names:
                return False
            stored = [_stored(tensor) for tensor in outputs]
            byte_size = ENTRY_OVERHEAD + len(key) + sum(size for _, size in stored)
            if byte_size > self.size:  # Triton logs this as an error and answers the request
                log.error(
                    "Failed to insert key [%d] into response cache: Requested byte_size: %d is"
                    " greater than total cache size: %d",
                    int.from_bytes(key[:8], "little"),
                    byte_size,
                    self.size,
                )
                return False
            if old is not None:
                del self._entries[key]
                self.used_bytes -= old.byte_size
            while self.used_bytes + byte_size > self.size:
                _, evicted = self._entries.popitem(last=False)
                self.used_bytes -= evicted.byte_size
                self.evictions += 1
            entry = CacheEntry(tuple(t for t, _ in stored), byte_size, names)
            self._entries[key] = entry
            self.used_bytes += byte_size
            return True
        finally:
            self.insertion_ns += self._clock() - started


class ModelCache:
    """One model version's view of the server's cache: how its requests are keyed."""

    def __init__(self, cache: ResponseCache, model_name: str, version: int) -> None:
        self.cache = cache
        self._prefix = f"{model_name}\0{version}\0{cache.next_load()}\0".encode()

    def key(self, request: BackendRequest) -> bytes:
        digest = hashlib.blake2b(self._prefix, digest_size=16)
        inputs = request.inputs
        for name in sorted(inputs):
            tensor = inputs[name]
            array = tensor.data
            if array.dtype != object and array.flags.c_contiguous:
                data = array.data  # its buffer, as it is (no copy)
            else:
                data = memoryview(_tensor_bytes(tensor))
            shape = ",".join(map(str, tensor.shape))
            digest.update(f"{name}\0{tensor.datatype}\0{shape}\0{data.nbytes}\0".encode())
            digest.update(data)
        return digest.digest()

    @staticmethod
    def wanted(request: BackendRequest) -> frozenset[str]:
        """The outputs a request asks for (the checks fill in every output when it names
        none)."""
        return frozenset(request.requested_outputs)
