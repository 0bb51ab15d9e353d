"""HPACK (RFC 7541) for the load generator's own HTTP/2 client.

Decoding is the ``hpack`` package's (Huffman-coded strings included), wrapped by
:class:`Decoder` with one shortcut: a header block made only of indexed fields does not change
the dynamic table, so its decoded form is cached by its bytes (and the cache is emptied whenever
a block that may change the table is decoded). After the first response a gRPC server's answers
are a few table indices each, so steady-state decoding is a dictionary lookup.

Encoding stays ours (:class:`Encoder`): it re-encodes the client's pre-built request blocks to
use the server's dynamic table and returns the same bytes for every later request while the
table does not change. ``benchmarks/hpack_coding.py`` measured why: the cached block costs about
0.1 us per request, ``hpack.Encoder.encode`` 11-20 us (112-198x), a fifth to a third of the
client's whole CPU per gRPC call at concurrency 1; decoding a response's two blocks with the
library on every call costs 13-16 us against 0.4 us from the cache (32-41x).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import hpack
from hpack.table import HeaderTable

STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
ENTRY_OVERHEAD = 32
CACHE_LIMIT = 256
DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE we advertise (the protocol default)

Headers = list[tuple[bytes, bytes]]


class HpackError(ValueError):
    """A malformed header block (a connection error in HTTP/2 terms)."""


def encode_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer with an N-bit prefix; ``first`` carries the pattern bits above it."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing, new name, plain strings (what the client sends)."""
    return b"\x00" + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value


def literal_indexed_name(index: int, value: bytes) -> bytes:
    """A literal field without indexing whose name is static-table entry ``index``."""
    return encode_integer(index, 4) + encode_integer(len(value), 7) + value


def _plain(fields: Iterable[tuple[Any, Any]]) -> Headers:
    """The library's header tuples (raw: bytes) as plain (name, value) pairs."""
    return [(bytes(name), bytes(value)) for name, value in fields]


def indexed_only(block: bytes) -> bool:
    """Whether every field of ``block`` is an indexed field (such a block leaves the table as
    it is). Only walks the fields' first bytes and integer continuations."""
    pos, end = 0, len(block)
    while pos < end:
        byte = block[pos]
        if not byte & 0x80:
            return False
        pos += 1
        if byte & 0x7F == 0x7F:  # a multi-byte index: skip its continuation bytes
            while pos < end and block[pos] & 0x80:
                pos += 1
            pos += 1
    return pos == end


class Decoder:
    """The ``hpack`` package's decoder, tracking the server's dynamic table, with a cache of
    the blocks that cannot change it."""

    def __init__(self, max_table_size: int = DEFAULT_TABLE_SIZE) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=1 << 20)
        self._decoder.max_allowed_table_size = max_table_size  # what we advertised
        self._cache: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        try:
            headers = _plain(self._decoder.decode(block, raw=True))
        except hpack.HPACKError as exc:
            raise HpackError(str(exc) or type(exc).__name__) from None
        if indexed_only(block):
            if len(self._cache) < CACHE_LIMIT:
                self._cache[block] = headers
        else:
            self._cache.clear()  # the table may have changed: cached indices may now differ
        return headers


STATIC_FIELDS = {field: index for index, field in enumerate(STATIC_TABLE, 1)}
STATIC_NAMES = {name: index for index, (name, _) in reversed(list(enumerate(STATIC_TABLE, 1)))}


class Encoder:
    """Re-encodes self-contained request blocks (static-table and plain literal fields, as
    :func:`literal` builds them) so that they use the peer's dynamic table: the first block
    inserts its fields, later ones refer to them with one byte each (as h2load and the gRPC
    library do; the server then parses no strings per request). Blocks that only refer to the
    table are cached by their source bytes until the table changes."""

    def __init__(self, max_table_size: int = DEFAULT_TABLE_SIZE) -> None:
        self._max = max_table_size  # at most the peer's SETTINGS_HEADER_TABLE_SIZE
        self._dynamic: list[tuple[bytes, bytes]] = []  # newest first, as the peer's decoder
        self._size = 0
        self._size_update: int | None = None  # to announce at the start of the next block
        self._cache: dict[bytes, bytes] = {}

    def limit(self, peer_table_size: int) -> None:
        """The peer's SETTINGS_HEADER_TABLE_SIZE: shrink (and announce) when it is lower."""
        if peer_table_size < self._max:
            self._max = peer_table_size
            self._size_update = peer_table_size
            self._cache.clear()
            self._evict()

    def encode(self, block: bytes) -> bytes:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        try:  # our own blocks: static references and plain literals only
            fields = _plain(hpack.Decoder().decode(block, raw=True))
        except hpack.HPACKError as exc:
            raise HpackError(f"cannot re-encode a request block: {exc}") from None
        out = bytearray()
        if self._size_update is not None:
            out += encode_integer(self._size_update, 5, 0x20)
            self._size_update = None
        indexed_only = True
        for name, value in fields:
            index = STATIC_FIELDS.get((name, value))
            if index is None and (name, value) in self._dynamic:
                index = len(STATIC_TABLE) + 1 + self._dynamic.index((name, value))
            if index is not None:
                out += encode_integer(index, 7, 0x80)
                continue
            indexed_only = False
            entry = len(name) + len(value) + ENTRY_OVERHEAD
            name_index = STATIC_NAMES.get(name, 0)
            if entry > self._max:  # would empty the table: send it without indexing
                out += encode_integer(name_index, 4)
            else:
                out += encode_integer(name_index, 6, 0x40)
                self._cache.clear()
                self._dynamic.insert(0, (name, value))
                self._size += entry
                self._evict()
            if not name_index:
                out += encode_integer(len(name), 7) + name
            out += encode_integer(len(value), 7) + value
        encoded = bytes(out)
        if indexed_only and len(self._cache) < CACHE_LIMIT:
            self._cache[block] = encoded
        return encoded

    def _evict(self) -> None:
        while self._size > self._max and self._dynamic:
            name, value = self._dynamic.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD
