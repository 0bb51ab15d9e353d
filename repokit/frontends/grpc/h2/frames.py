"""HTTP/2 frame layout (RFC 9113 section 4 and 6): types, flags, settings, error codes."""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# settings identifiers
HEADER_TABLE_SIZE = 0x1
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

# error codes
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
MAX_WINDOW = 2**31 - 1
MAX_FRAME_LIMIT = 2**24 - 1

_U32 = struct.Struct(">I")
_HEAD = struct.Struct(">HBBBI")  # length as 16 + 8 bits, type, flags, stream
_SETTING = struct.Struct(">HI")
_GOAWAY = struct.Struct(">II")
_U32_PAIR = struct.Struct(">II")

U32 = _U32


class H2Error(Exception):
    """A connection error: the connection ends with GOAWAY carrying ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def frame_head(kind: int, flags: int, stream: int, length: int) -> bytes:
    """The 9-byte frame header."""
    return _HEAD.pack(length >> 8, length & 0xFF, kind, flags, stream)


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload) >> 8, len(payload) & 0xFF, kind, flags, stream) + payload


def settings_frame(settings: dict[int, int]) -> bytes:
    payload = b"".join(_SETTING.pack(key, value) for key, value in settings.items())
    return frame(SETTINGS, 0, 0, payload)


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise H2Error(FRAME_SIZE_ERROR, f"SETTINGS payload of {len(payload)} bytes")
    return [_SETTING.unpack_from(payload, pos) for pos in range(0, len(payload), 6)]


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, _U32.pack(increment))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, _U32.pack(code))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _GOAWAY.pack(last_stream, code) + debug)


def read_u32(payload: bytes, offset: int = 0) -> int:
    value: int = _U32.unpack_from(payload, offset)[0]
    return value
