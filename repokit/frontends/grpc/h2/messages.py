"""gRPC's length-prefixed messages (a flag byte, a 4-byte big-endian length, the message) on
a stream's DATA payloads, and their compression (``grpc-encoding`` gzip and deflate).

:class:`MessageReader` takes the payloads as views of the bytes the socket gave and copies a
message at most once: a message inside one payload is sliced out (bytes for small ones, a
read-only view of the received bytes for large ones), a message spanning payloads is copied
into a buffer of its announced size, handed on as a read-only view of that buffer. That buffer
is not zero-filled first (``bytearray(size)`` wrote every byte of it once more before the
socket's bytes did: 11% of the server's samples with 16 MiB messages).
"""

from __future__ import annotations

import zlib

import numpy as np

from repokit.frontends.grpc.h2.frames import U32

SMALL = 64 * 1024  # messages up to this size are handed on as bytes
DIRECT_MIN = 4 * 1024  # the least of a message the socket reads into its buffer directly
Buffer = bytes | memoryview
_WBITS = {"gzip": 31, "deflate": 15}
# grpc core's choice for a compression level among the algorithms the client accepts:
# the first (low), the middle (medium) or the last (high) of gzip, deflate
COMPRESSION_RANKING = ("gzip", "deflate")


class MessageTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Received message larger than max ({size} vs. {limit})")


class MessageReader:
    """The complete messages of one stream's DATA payloads, as (compressed flag, message)."""

    __slots__ = ("_buffer", "_filled", "_flag", "_prefix", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._prefix = b""  # a prefix split across payloads
        self._buffer: memoryview | None = None  # a message split across payloads
        self._filled = 0
        self._flag = 0

    @property
    def partial(self) -> bool:
        """Whether a message has begun and not ended."""
        return bool(self._prefix) or self._buffer is not None

    def direct_target(self, limit: int) -> memoryview | None:
        """The unfilled part of the message under way (at most ``limit`` bytes), when at
        least :data:`DIRECT_MIN` bytes: the socket may read into it (see
        :meth:`.connection.Connection.get_buffer`)."""
        buffer = self._buffer
        if buffer is None:
            return None
        size = min(len(buffer) - self._filled, limit)
        if size < DIRECT_MIN:
            return None
        return buffer[self._filled : self._filled + size]

    def advance(self, size: int, out: list[tuple[int, Buffer]]) -> None:
        """``size`` bytes were read into the view :meth:`direct_target` gave."""
        buffer = self._buffer
        assert buffer is not None
        self._filled += size
        if self._filled == len(buffer):
            out.append((self._flag, buffer.toreadonly()))
            self._buffer = None

    def feed(self, chunk: memoryview, out: list[tuple[int, Buffer]]) -> None:
        pos, end = 0, len(chunk)
        while pos < end:
            buffer = self._buffer
            if buffer is not None:
                n = min(len(buffer) - self._filled, end - pos)
                buffer[self._filled : self._filled + n] = chunk[pos : pos + n]
                self._filled += n
                pos += n
                if self._filled == len(buffer):
                    out.append((self._flag, buffer.toreadonly()))
                    self._buffer = None
                continue
            if not self._prefix and end - pos >= 5:
                flag = chunk[pos]
                size: int = U32.unpack_from(chunk, pos + 1)[0]
                pos += 5
            else:
                need = 5 - len(self._prefix)
                self._prefix += bytes(chunk[pos : pos + need])
                pos += min(need, end - pos)
                if len(self._prefix) < 5:
                    return
                flag = self._prefix[0]
                size = U32.unpack_from(self._prefix, 1)[0]
                self._prefix = b""
            if size > self.limit:
                raise MessageTooLarge(size, self.limit)
            if end - pos >= size:
                message = chunk[pos : pos + size]
                out.append((flag, bytes(message) if size <= SMALL else message.toreadonly()))
                pos += size
            else:
                self._buffer = _uninitialised(size)
                self._filled = 0
                self._flag = flag


def _uninitialised(size: int) -> memoryview:
    """A writable byte buffer of ``size`` bytes that is not zero-filled (every byte of it is
    received into before it is read)."""
    return np.empty(size, dtype=np.uint8).data


class CompressionError(Exception):
    pass


def decompress(message: Buffer, encoding: str, limit: int) -> bytes:
    """A compressed message's bytes; MessageTooLarge past ``limit``, CompressionError when the
    encoding is unknown or the data is no valid stream of it."""
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise CompressionError(f"Compression algorithm '{encoding}' is not supported")
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(message, limit + 1)
    except zlib.error as exc:
        raise CompressionError(f"Unable to decompress {encoding} message: {exc}") from None
    if len(data) > limit:
        raise MessageTooLarge(len(data), limit)
    if not inflater.eof:
        raise CompressionError(f"Unable to decompress {encoding} message: truncated")
    return data


def compress(message: Buffer, encoding: str) -> bytes:
    deflater = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, _WBITS[encoding])
    return deflater.compress(message) + deflater.flush()


def response_encoding(level: int, accepted: tuple[str, ...]) -> str:
    """The encoding grpc core picks for a compression level (0 none, 1 low, 2 medium,
    3 high) among the encodings the client accepts."""
    if not level:
        return "identity"
    usable = [name for name in COMPRESSION_RANKING if name in accepted]
    if not usable:
        return "identity"
    if level == 1:
        return usable[0]
    return usable[len(usable) // 2] if level == 2 else usable[-1]


def prefix(size: int, compressed: bool = False) -> bytes:
    return (b"\x01" if compressed else b"\x00") + U32.pack(size)
