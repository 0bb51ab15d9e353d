"""Request messages parsed by repokit's handlers instead of by grpc.aio.

grpc.aio parses a request with the method's deserializer before any handler runs; bytes that
are no valid message then end a unary call with UNKNOWN and a Python exception name, and end a
stream as if the client had closed it (status OK, the messages after it never answered).
:func:`parsing_handler` gives the handler the bytes instead and parses them itself:

- unary: INTERNAL "Unable to parse request", Triton's answer for any method;
- streams: the handler's iterator yields an :class:`Unparsable` in the message's place, which
  the servicer answers in-band like any failed request, and the stream goes on.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

UNPARSABLE_REQUEST = "Unable to parse request"


@dataclass(frozen=True)
class Unparsable:
    """A stream message that is not a valid request: its place in the stream and size."""

    index: int  # from 1
    size: int
    type_name: str

    @property
    def message(self) -> str:
        return (
            f"{UNPARSABLE_REQUEST}: stream message {self.index} ({self.size} bytes) is not a "
            f"valid {self.type_name}"
        )


def _type_name(parse: Callable[[bytes], Any]) -> str:
    owner = getattr(parse, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "request message"))


async def _parsed(
    raw_messages: AsyncIterator[bytes], parse: Callable[[bytes], Any]
) -> AsyncIterator[Any]:
    type_name = _type_name(parse)
    index = 0
    async for raw in raw_messages:
        index += 1
        try:
            yield parse(raw)
        except Exception:  # DecodeError, or a deserializer's own complaint
            yield Unparsable(index, len(raw), type_name)


def parsing_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` (unary-unary or stream-stream, as generated) parsing its own requests."""
    parse = handler.request_deserializer
    if parse is None:
        return handler
    if handler.unary_unary is not None:
        behaviour = handler.unary_unary
        is_async = inspect.iscoroutinefunction(behaviour)

        async def unary(raw: bytes, context: Any) -> Any:
            try:
                request = parse(raw)
            except Exception:
                await context.abort(grpc.StatusCode.INTERNAL, UNPARSABLE_REQUEST)
                raise AssertionError("unreachable") from None  # pragma: no cover
            if is_async:
                return await behaviour(request, context)
            return behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary, response_serializer=handler.response_serializer
        )
    if handler.stream_stream is not None:
        streaming = handler.stream_stream

        async def stream(raw_messages: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
            # grpc.aio wants an async generator function here, not one returning a generator
            async for response in streaming(_parsed(raw_messages, parse), context):
                yield response

        return grpc.stream_stream_rpc_method_handler(
            stream, response_serializer=handler.response_serializer
        )
    return handler
