"""Request heads decoded from HPACK blocks, and the header blocks a gRPC server answers with.

Decoding is the ``hpack`` package's. A gRPC client indexes its request headers after the first
call, so later request blocks are made of indexed fields (and literals that are not indexed,
as h2load sends some); such a block cannot change the dynamic table, so its decoded
:class:`CallHead` is cached by the block's bytes (and the cache is emptied whenever a block
that changes the table is decoded). Response blocks use the static table and literals
without indexing only, so the peer's SETTINGS_HEADER_TABLE_SIZE never constrains them.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import hpack

from repokit.frontends.grpc.h2.frames import COMPRESSION_ERROR, H2Error
from repokit.perf.transports.hpack import literal, literal_indexed_name

DEFAULT_TABLE_SIZE = 4096
CACHE_LIMIT = 256
#: request headers that are transport, not the call's invocation metadata (as grpc.aio)
_TRANSPORT_HEADERS = frozenset(
    {"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}
)
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
SUPPORTED_ENCODINGS = ("identity", "deflate", "gzip")
ACCEPT_ENCODING = ",".join(SUPPORTED_ENCODINGS).encode()

Metadata = tuple[tuple[str, str | bytes], ...]


@dataclass(frozen=True)
class CallHead:
    """What a call's request headers say."""

    method: str
    path: str
    content_type: str
    metadata: Metadata
    timeout: float | None  # seconds (grpc-timeout)
    encoding: str  # grpc-encoding of the request messages ("identity" when none)
    accept_encoding: tuple[str, ...]


def parse_timeout(value: str) -> float | None:
    """grpc-timeout (``1S``, ``250m``, at most 8 digits); None when malformed."""
    if len(value) < 2 or len(value) > 9 or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


def _metadata_value(key: str, value: bytes) -> str | bytes:
    if key.endswith("-bin"):
        try:
            return base64.b64decode(value + b"=" * (-len(value) % 4))
        except ValueError:
            return value
    return value.decode("latin-1")


def call_head(fields: list[tuple[bytes, bytes]]) -> CallHead:
    method = path = content_type = ""
    timeout: float | None = None
    encoding = "identity"
    accept: tuple[str, ...] = ()
    metadata: list[tuple[str, str | bytes]] = []
    for raw_name, raw_value in fields:
        name = raw_name.decode("latin-1")
        if name.startswith(":"):
            if name == ":path":
                path = raw_value.decode("latin-1")
            elif name == ":method":
                method = raw_value.decode("latin-1")
            continue
        if name in _TRANSPORT_HEADERS:
            value = raw_value.decode("latin-1")
            if name == "content-type":
                content_type = value
            elif name == "grpc-timeout":
                timeout = parse_timeout(value)
            elif name == "grpc-encoding":
                encoding = value.strip()
            elif name == "grpc-accept-encoding":
                accept = tuple(part.strip() for part in value.split(","))
            continue
        metadata.append((name, _metadata_value(name, raw_value)))
    return CallHead(method, path, content_type, tuple(metadata), timeout, encoding, accept)


def _skip_integer(block: bytes, pos: int, end: int, prefix_bits: int) -> int:
    """The position after the HPACK integer at ``pos`` (its first byte's low bits)."""
    limit = (1 << prefix_bits) - 1
    first = block[pos] & limit
    pos += 1
    if first == limit:
        while pos < end and block[pos] & 0x80:
            pos += 1
        pos += 1
    return pos


def _string_end(block: bytes, pos: int, end: int) -> int:
    """The position after the HPACK string at ``pos``."""
    limit = 0x7F
    length = block[pos] & limit
    pos += 1
    if length == limit:
        shift = 0
        length = limit
        while pos < end:
            byte = block[pos]
            pos += 1
            length += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
    return pos + length


def table_neutral(block: bytes) -> bool:
    """Whether ``block`` leaves the dynamic table as it is: only indexed fields and literals
    without indexing or never indexed (no incremental indexing, no table size update).
    Such a block means the same thing until another block changes the table."""
    pos, end = 0, len(block)
    while pos < end:
        byte = block[pos]
        if byte & 0x80:  # indexed field
            pos = _skip_integer(block, pos, end, 7)
        elif byte & 0xE0 == 0:  # literal without indexing (0000) or never indexed (0001)
            name_index = byte & 0x0F
            pos = _skip_integer(block, pos, end, 4)
            if name_index == 0:
                if pos >= end:
                    return False
                pos = _string_end(block, pos, end)
            if pos >= end:
                return False
            pos = _string_end(block, pos, end)
        else:  # incremental indexing (01) or a table size update (001)
            return False
    return pos == end


class HeadDecoder:
    """The connection's HPACK decoder, producing :class:`CallHead` values."""

    def __init__(self, table_size: int = DEFAULT_TABLE_SIZE) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=1 << 20)
        self._decoder.max_allowed_table_size = table_size
        self._cache: dict[bytes, CallHead] = {}

    def decode(self, block: bytes) -> CallHead:
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        try:
            fields = self._decoder.decode(block, raw=True)
        except (hpack.HPACKError, ValueError, IndexError) as exc:
            raise H2Error(COMPRESSION_ERROR, f"bad header block: {exc}") from None
        head = call_head([(bytes(n), bytes(v)) for n, v in fields])
        if table_neutral(block):
            if len(self._cache) < CACHE_LIMIT:
                self._cache[block] = head
        else:
            self._cache.clear()  # the table may have changed
        return head


def percent_encode(message: str) -> bytes:
    """grpc-message: UTF-8, bytes outside printable ASCII and ``%`` as ``%XX``."""
    raw = message.encode("utf-8", "replace")
    if all(0x20 <= b <= 0x7E and b != 0x25 for b in raw):
        return raw
    return b"".join(bytes((b,)) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b for b in raw)


def _metadata_fields(metadata: Metadata | None) -> bytes:
    if not metadata:
        return b""
    parts = []
    for key, value in metadata:
        name = key.lower().encode("latin-1")
        if isinstance(value, bytes):
            data = base64.b64encode(value).rstrip(b"=") if name.endswith(b"-bin") else value
        else:
            data = str(value).encode("latin-1", "replace")
        parts.append(literal(name, data))
    return b"".join(parts)


def response_head(encoding: str = "identity", metadata: Metadata | None = None) -> bytes:
    """``:status 200``, ``content-type: application/grpc`` and the encodings."""
    block = b"\x88" + literal_indexed_name(31, b"application/grpc")
    if encoding != "identity":
        block += literal(b"grpc-encoding", encoding.encode())
    block += literal(b"grpc-accept-encoding", ACCEPT_ENCODING)
    return block + _metadata_fields(metadata)


def trailers(code: int, message: str, metadata: Metadata | None = None) -> bytes:
    block = literal(b"grpc-status", str(code).encode())
    if message:
        block += literal(b"grpc-message", percent_encode(message))
    return block + _metadata_fields(metadata)


PLAIN_HEAD = response_head()
TRAILERS_ONLY_HEAD = b"\x88" + literal_indexed_name(31, b"application/grpc")
TRAILERS_OK = trailers(0, "")
