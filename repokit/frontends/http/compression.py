"""HTTP body compression for infer (Triton's ``DataCompressor``): gzip/deflate request bodies
and ``Accept-Encoding``-negotiated responses."""

from __future__ import annotations

import gzip
import zlib

from repokit.errors import Code, RepokitError

SUPPORTED = ("gzip", "deflate")


def decompress_body(
    body: bytes | memoryview, encoding: str | None, max_size: int
) -> bytes | memoryview:
    """The decompressed body; UNSUPPORTED for other encodings, INVALID_ARG for bad data or a
    decompressed size above ``max_size``."""
    if encoding is not None:
        encoding = encoding.strip()
    if encoding is None or encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        raise RepokitError(Code.UNSUPPORTED, "Unsupported compression type")
    try:
        out = decoder.decompress(body, max_size + 1)
    except zlib.error as exc:
        raise RepokitError(
            Code.INVALID_ARG, f"failed to decompress the request body ({encoding}): {exc}"
        ) from None
    if len(out) > max_size or decoder.unconsumed_tail:
        raise RepokitError(
            Code.INVALID_ARG,
            f"decompressed request body exceeds the maximum allowed value of {max_size} bytes."
            " Use --http-max-input-size to increase the limit.",
        )
    return out


def choose_response_encoding(accept_encoding: str | None) -> str:
    """Triton's ``CompressionTypeUsed``: the first of identity/gzip/deflate with the highest
    positive q-value (``;q=`` suffix, default 1); "identity" when none qualifies."""
    if not accept_encoding:
        return "identity"
    best, best_q = "identity", 0.0
    for item in accept_encoding.split(","):
        body = item.strip()
        name, sep, weight = body.partition(";q=")
        if not name:
            continue
        q = 1.0
        if sep:
            try:
                q = float(weight)
            except ValueError:
                continue
        if name in ("identity", "gzip", "deflate") and q > best_q:
            best, best_q = name, q
    return best


def compress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6)
    if encoding == "deflate":
        return zlib.compress(body)
    return body
