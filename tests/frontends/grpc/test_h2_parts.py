"""The native transport's pure parts: gRPC message reassembly across DATA payloads, direct
reads into a message's buffer, compression, timeouts, percent-encoding, header blocks."""

from __future__ import annotations

import zlib

import hpack
import pytest
from hpack import NeverIndexedHeaderTuple

from repokit.frontends.grpc.h2.headers import (
    CallHead,
    HeadDecoder,
    parse_timeout,
    percent_encode,
    response_head,
    table_neutral,
    trailers,
)
from repokit.frontends.grpc.h2.messages import (
    CompressionError,
    MessageReader,
    MessageTooLarge,
    compress,
    decompress,
    prefix,
    response_encoding,
)


def _feed_in_pieces(reader: MessageReader, data: bytes, piece: int) -> list[bytes]:
    out: list[tuple[int, bytes | memoryview]] = []
    for pos in range(0, len(data), piece):
        reader.feed(memoryview(data)[pos : pos + piece], out)
    return [bytes(message) for _, message in out]


@pytest.mark.parametrize("piece", [1, 3, 5, 7, 4096, 1 << 20])
def test_messages_are_reassembled_across_payloads(piece: int) -> None:
    messages = [b"", b"abc", bytes(range(256)) * 300, b"x" * 70_000]
    data = b"".join(prefix(len(m)) + m for m in messages)
    reader = MessageReader(1 << 20)
    assert _feed_in_pieces(reader, data, piece) == messages
    assert not reader.partial


def test_large_message_in_one_payload_is_a_read_only_view() -> None:
    body = b"y" * 100_000
    out: list[tuple[int, bytes | memoryview]] = []
    MessageReader(1 << 20).feed(memoryview(prefix(len(body)) + body), out)
    [(flag, message)] = out
    assert flag == 0 and isinstance(message, memoryview) and message.readonly
    assert bytes(message) == body


def test_direct_reads_fill_the_message_buffer() -> None:
    body = bytes(range(256)) * 400  # 100 KiB
    reader = MessageReader(1 << 20)
    out: list[tuple[int, bytes | memoryview]] = []
    reader.feed(memoryview(prefix(len(body)) + body[:10]), out)
    assert reader.direct_target(5) is None  # too small a read to be worth it
    pos = 10
    while True:
        target = reader.direct_target(30_000)
        if target is None:
            break
        target[:] = body[pos : pos + len(target)]
        pos += len(target)
        reader.advance(len(target), out)
    reader.feed(memoryview(body[pos:]), out)
    assert [bytes(m) for _, m in out] == [body] and not reader.partial


def test_oversized_message_is_refused_from_its_prefix() -> None:
    reader = MessageReader(10)
    with pytest.raises(MessageTooLarge, match=r"larger than max \(11 vs. 10\)"):
        reader.feed(memoryview(prefix(11)), [])


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compression_round_trip_and_limits(encoding: str) -> None:
    body = b"tensor " * 1000
    packed = compress(body, encoding)
    assert decompress(packed, encoding, len(body)) == body
    with pytest.raises(MessageTooLarge):
        decompress(packed, encoding, len(body) - 1)
    with pytest.raises(CompressionError, match="truncated"):
        decompress(packed[:-8], encoding, 1 << 20)
    with pytest.raises(CompressionError, match="Unable to decompress"):
        decompress(b"not compressed", encoding, 1 << 20)
    assert zlib.decompress(packed, 31 if encoding == "gzip" else 15) == body


def test_unknown_encoding_is_named() -> None:
    with pytest.raises(CompressionError, match="'snappy' is not supported"):
        decompress(b"", "snappy", 10)


def test_response_encoding_follows_grpc_levels() -> None:
    both = ("identity", "deflate", "gzip")
    assert response_encoding(0, both) == "identity"
    assert response_encoding(1, both) == "gzip"
    assert response_encoding(2, both) == "deflate"
    assert response_encoding(3, both) == "deflate"
    assert response_encoding(3, ("identity", "gzip")) == "gzip"
    assert response_encoding(2, ("identity",)) == "identity"


def test_timeouts() -> None:
    assert parse_timeout("5S") == 5.0 and parse_timeout("100m") == 0.1
    assert parse_timeout("2H") == 7200.0 and parse_timeout("3n") == pytest.approx(3e-9)
    for bad in ("", "S", "12", "1x", "123456789S", "-1S"):
        assert parse_timeout(bad) is None


def test_percent_encoding() -> None:
    assert percent_encode("plain text") == b"plain text"
    assert percent_encode("100% n\u00f6\n") == b"100%25 n%C3%B6%0A"


def test_head_decoding_and_the_cache() -> None:
    encoder = hpack.Encoder()
    fields = [(":method", "POST"), (":path", "/a.B/C"), ("content-type", "application/grpc"),
              ("grpc-timeout", "1S"), ("grpc-encoding", "gzip"), ("x-key", "v"),
              ("x-b-bin", "AAE")]  # fmt: skip
    decoder = HeadDecoder()
    first = decoder.decode(encoder.encode(fields))
    assert first == CallHead(
        "POST", "/a.B/C", "application/grpc", (("x-key", "v"), ("x-b-bin", b"\x00\x01")),
        1.0, "gzip", (),
    )  # fmt: skip
    again = encoder.encode(fields)  # indexed fields only: decoded once, then cached
    assert decoder.decode(again) == first and decoder.decode(again) is decoder.decode(again)


def test_response_blocks_decode() -> None:
    decoder = hpack.Decoder()
    assert decoder.decode(response_head("gzip", (("k", "v"),))) == [
        (":status", "200"), ("content-type", "application/grpc"), ("grpc-encoding", "gzip"),
        ("grpc-accept-encoding", "identity,deflate,gzip"), ("k", "v"),
    ]  # fmt: skip
    assert decoder.decode(trailers(5, "n\u00f6", (("t-bin", b"\x00"),))) == [
        ("grpc-status", "5"), ("grpc-message", "n%C3%B6"), ("t-bin", "AA"),
    ]  # fmt: skip


def test_blocks_that_leave_the_table_alone_are_cached() -> None:
    encoder = hpack.Encoder()
    fields = [(":method", "POST"), (":path", "/a.B/C"), ("content-type", "application/grpc")]
    first = encoder.encode(fields)  # incremental indexing: changes the table
    steady = encoder.encode(fields)  # indexed fields only
    unindexed = encoder.encode([*fields, NeverIndexedHeaderTuple("x-long", "v" * 300)])
    assert not table_neutral(first)
    assert table_neutral(steady) and table_neutral(unindexed)
    assert not table_neutral(unindexed[:-1])  # a string running past the end
    decoder = HeadDecoder()
    decoder.decode(first)
    assert decoder.decode(unindexed) is decoder.decode(unindexed)
    assert decoder.decode(unindexed).metadata == (("x-long", "v" * 300),)
