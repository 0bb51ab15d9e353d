"""Large ModelInfer messages without copies of their raw tensor bytes.

The protobuf runtime copies a ``bytes`` field three times on its way out (``tobytes`` of the
array, ``raw_output_contents.append`` into the message, ``SerializeToString``; together about
seven times a plain copy for a 16 MiB output) and twice on its way in (``FromString`` and the
field accessor, which builds a new ``bytes`` each time it is read). For the raw tensor fields
of a ModelInfer message the wire format is simple enough to do without:

* :func:`split_raw_inputs` walks the top-level fields of a serialized ``ModelInferRequest``
  once and returns the message without its ``raw_input_contents`` (a few hundred bytes, for
  ``FromString``) and each ``raw_input_contents`` value as a memoryview of the received bytes;
* :func:`raw_output_parts` appends ``raw_output_contents`` entries to a serialized
  ``ModelInferResponse`` that has none, as :class:`MessageParts`: the serialized head, each
  entry's key and length, and each tensor's own memory, in order, none of them copied. The
  native gRPC transport writes the parts to the socket as they are; where one ``bytes`` is
  needed (grpc.aio, a ModelStreamInfer response, compression) :meth:`MessageParts.join`
  (:func:`join_raw_outputs`) writes each tensor's memory once.

Both give what the protobuf runtime gives: the request's other fields keep their bytes and
their order, and repeated fields of one message may come in any order on the wire, so
``FromString`` of the result is the message the runtime would have built. Bytes that are not a
well-formed message are left to the runtime (``split_raw_inputs`` answers None), so its error
is the one the client gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Buffer = bytes | memoryview

RAW_INPUT_FIELD = 7  # ModelInferRequest.raw_input_contents
RAW_OUTPUT_FIELD = 6  # ModelInferResponse.raw_output_contents
_LENGTH_DELIMITED = 2
_RAW_OUTPUT_KEY = bytes([(RAW_OUTPUT_FIELD << 3) | _LENGTH_DELIMITED])


class _Malformed(Exception):
    pass


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            break
    raise _Malformed


def encode_varint(value: int) -> bytes:
    """A non-negative integer as protobuf's base-128 varint."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def split_raw_inputs(raw: bytes) -> tuple[bytes, list[memoryview]] | None:
    """``raw`` (a serialized ModelInferRequest) as (the message without its
    ``raw_input_contents``, those contents in order as views of ``raw``); None when ``raw``
    is not a well-formed message (the protobuf runtime then gives its error)."""
    view = memoryview(raw)
    head: list[memoryview] = []
    contents: list[memoryview] = []
    pos = kept_from = 0
    end = len(raw)
    try:
        while pos < end:
            field_start = pos
            key, pos = _varint(raw, pos, end)
            wire_type = key & 7
            if wire_type == 0:
                _, pos = _varint(raw, pos, end)
            elif wire_type == 1:
                pos += 8
            elif wire_type == _LENGTH_DELIMITED:
                length, pos = _varint(raw, pos, end)
                value_start = pos
                pos += length
                if key >> 3 == RAW_INPUT_FIELD and pos <= end:
                    head.append(view[kept_from:field_start])
                    contents.append(view[value_start:pos])
                    kept_from = pos
                    continue
            elif wire_type == 5:
                pos += 4
            else:  # groups (deprecated) and invalid wire types: the runtime decides
                return None
            if key >> 3 == RAW_INPUT_FIELD or key >> 3 == 0:  # a wrong wire type, field 0
                return None
    except _Malformed:
        return None
    if pos != end:  # the last field runs past the end
        return None
    head.append(view[kept_from:end])
    return b"".join(head), contents


class MessageParts:
    """A serialized message as the buffers that make it up, in order (read-only byte views;
    ``len()`` is the message's size in bytes)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: Sequence[Any]) -> None:
        views = [_byte_view(part) for part in parts]
        self.parts: tuple[Buffer, ...] = tuple(views)
        self.size = sum(view.nbytes for view in views)

    def __len__(self) -> int:
        return self.size

    def join(self) -> bytes:
        """The message as one ``bytes`` (each part copied once)."""
        return b"".join(self.parts)


def _byte_view(part: Any) -> memoryview:
    view = memoryview(part)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view.toreadonly()


def message_bytes(message: bytes | MessageParts) -> bytes:
    """``message`` as one ``bytes`` (a serializer for transports that need one)."""
    return message.join() if isinstance(message, MessageParts) else message


def raw_output_parts(head: bytes, blobs: Sequence[Any]) -> MessageParts:
    """A serialized ModelInferResponse as parts: ``head`` (one without ``raw_output_contents``)
    followed by one ``raw_output_contents`` entry per blob (anything with the buffer protocol,
    C contiguous), each blob's memory as it is."""
    parts: list[Any] = [head]
    for blob in blobs:
        size = memoryview(blob).nbytes
        parts.append(_RAW_OUTPUT_KEY + encode_varint(size))
        parts.append(blob)
    return MessageParts(parts)


def join_raw_outputs(head: bytes, blobs: Sequence[Any]) -> bytes:
    """:func:`raw_output_parts` as one ``bytes``: each blob's memory copied once."""
    return raw_output_parts(head, blobs).join()


def _length_delimited(field: int, payload: bytes) -> bytes:
    return bytes([(field << 3) | _LENGTH_DELIMITED]) + encode_varint(len(payload)) + payload


def _final_parameter(final: bool) -> bytes:
    """ModelInferResponse.parameters (field 4) entry ``triton_final_response``: the map entry
    (key 1, value 2) of an InferParameter whose bool_param (field 1) is ``final``."""
    parameter = b"\x08\x01" if final else b"\x08\x00"
    entry = _length_delimited(1, b"triton_final_response") + _length_delimited(2, parameter)
    return _length_delimited(4, entry)


_FINAL_PARAMETER = {True: _final_parameter(True), False: _final_parameter(False)}
_STREAM_RESPONSE_FIELD = 2  # ModelStreamInferResponse.infer_response


def stream_response(infer_response: bytes, final: bool) -> bytes:
    """A serialized ModelStreamInferResponse holding the serialized ModelInferResponse
    ``infer_response`` with its ``triton_final_response`` parameter set to ``final`` (a map
    entry written after the message's own fields replaces one of the same key)."""
    inner = _FINAL_PARAMETER[final]
    size = len(infer_response) + len(inner)
    key = bytes([(_STREAM_RESPONSE_FIELD << 3) | _LENGTH_DELIMITED])
    return b"".join((key, encode_varint(size), infer_response, inner))
