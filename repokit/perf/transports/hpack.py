"""HPACK (RFC 7541) for the load generator's own HTTP/2 client: decoding, and re-encoding
request blocks to use the server's dynamic table (:class:`Encoder`).

Decodes indexed fields, literals with and without indexing, and dynamic-table size updates,
keeping the dynamic table in step with the server's encoder. Huffman-coded strings are not
decoded: :class:`HuffmanUnsupported` is raised so the caller can fall back to the gRPC library
(gRPC C-core servers such as Triton and ``repokit serve`` send plain strings). Header blocks made
only of indexed fields do not change the table, so their decoded form is cached by their bytes:
after the first response a server's answers are a few table indices each.
"""

from __future__ import annotations

STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)
ENTRY_OVERHEAD = 32
CACHE_LIMIT = 256

Headers = list[tuple[bytes, bytes]]


class HpackError(ValueError):
    """A malformed header block (a connection error in HTTP/2 terms)."""


class HuffmanUnsupported(HpackError):
    """The block holds a Huffman-coded string, which this decoder does not decode."""


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


class Decoder:
    def __init__(self, max_table_size: int = 4096) -> None:
        self._limit = max_table_size  # what we advertised (SETTINGS_HEADER_TABLE_SIZE)
        self._max = max_table_size  # the encoder's current choice
        self._dynamic: list[tuple[bytes, bytes]] = []  # newest first
        self._size = 0
        self._cache: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        headers, indexed_only = self._decode(block)
        if indexed_only and len(self._cache) < CACHE_LIMIT:
            self._cache[block] = headers
        return headers

    def _integer(self, block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = block[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block) or shift > 28:
                raise HpackError("truncated or oversized integer in header block")
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, pos

    def _string(self, block: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(block):
            raise HpackError("truncated string in header block")
        huffman = block[pos] & 0x80
        length, pos = self._integer(block, pos, 7)
        if pos + length > len(block):
            raise HpackError("truncated string in header block")
        if huffman:
            raise HuffmanUnsupported("the server sent a Huffman-coded header")
        return bytes(block[pos : pos + length]), pos + length

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 1 <= index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if index == 0 or dynamic >= len(self._dynamic):
            raise HpackError(f"header table index {index} out of range")
        return self._dynamic[dynamic]

    def _add(self, name: bytes, value: bytes) -> None:
        self._cache.clear()  # cached blocks may refer to indices this shifts
        self._dynamic.insert(0, (name, value))
        self._size += len(name) + len(value) + ENTRY_OVERHEAD
        self._evict()

    def _evict(self) -> None:
        while self._size > self._max and self._dynamic:
            name, value = self._dynamic.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD

    def _decode(self, block: bytes) -> tuple[Headers, bool]:
        headers: Headers = []
        indexed_only = True
        pos = 0
        end = len(block)
        while pos < end:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = self._integer(block, pos, 7)
                headers.append(self._entry(index))
                continue
            indexed_only = False
            if byte & 0xE0 == 0x20:  # dynamic table size update
                size, pos = self._integer(block, pos, 5)
                if size > self._limit:
                    raise HpackError(f"table size update {size} above the advertised limit")
                self._cache.clear()
                self._max = size
                self._evict()
                continue
            incremental = bool(byte & 0x40)
            index, pos = self._integer(block, pos, 6 if incremental else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = self._string(block, pos)
            value, pos = self._string(block, pos)
            headers.append((name, value))
            if incremental:
                self._add(name, value)
        return headers, indexed_only


STATIC_FIELDS = {field: index for index, field in enumerate(STATIC_TABLE, 1)}
STATIC_NAMES = {name: index for index, (name, _) in reversed(list(enumerate(STATIC_TABLE, 1)))}


class Encoder:
    """Re-encodes self-contained request blocks (static-table and plain literal fields, as
    :func:`literal` builds them) so that they use the peer's dynamic table: the first block
    inserts its fields, later ones refer to them with one byte each (as h2load and the gRPC
    library do; the server then parses no strings per request). Blocks that only refer to the
    table are cached by their source bytes until the table changes."""

    def __init__(self, max_table_size: int = 4096) -> None:
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
        fields, _ = Decoder(0)._decode(block)  # table size 0: only static references decode
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
