"""A bare gRPC server over our own HTTP/2 framing (asyncio protocol on uvloop, the project's
HPACK decoder), for ``grpc_vs_triton.py``: it does the bare grpc.aio servicer's work (add_sub
with numpy on ``raw_input_contents``, unary and ModelStreamInfer, ServerReady) with none of
grpc.aio's per-call machinery, to measure what an own gRPC transport could give. A measuring
stick only: no TLS, compression, deadlines, metadata or flow control of large messages.

Run: python benchmarks/bare_h2_grpc.py PORT
"""

from __future__ import annotations

import asyncio
import signal
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repokit.perf.transports.hpack import Decoder, literal, literal_indexed_name
from repokit.protocol.generated import grpc_service_pb2 as pb

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
HEAD = struct.Struct(">I")
RESPONSE_HEADERS = b"\x88" + literal_indexed_name(31, b"application/grpc")  # :status 200
TRAILERS_OK = literal(b"grpc-status", b"0")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(len(payload))[1:] + bytes([kind, flags]) + HEAD.pack(stream) + payload


def add_sub(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    a = np.frombuffer(request.raw_input_contents[0], dtype=np.float32)
    b = np.frombuffer(request.raw_input_contents[1], dtype=np.float32)
    reply = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
    shape = list(request.inputs[0].shape)
    for name in ("OUTPUT0", "OUTPUT1"):
        reply.outputs.add(name=name, datatype="FP32", shape=shape)
    reply.raw_output_contents.extend([(a + b).tobytes(), (a - b).tobytes()])
    return reply


async def answer(path: bytes, message: bytes) -> bytes:
    """The serialized response to one request message (as an async servicer would)."""
    if path.endswith(b"/ServerReady"):
        return pb.ServerReadyResponse(ready=True).SerializeToString()
    reply = add_sub(pb.ModelInferRequest.FromString(message))
    if path.endswith(b"/ModelStreamInfer"):
        return pb.ModelStreamInferResponse(infer_response=reply).SerializeToString()
    body: bytes = reply.SerializeToString()
    return body


class Stream:
    __slots__ = ("buffer", "ended", "headers_sent", "path", "pending")

    def __init__(self, path: bytes) -> None:
        self.path = path
        self.buffer = bytearray()
        self.pending = 0  # calls running
        self.headers_sent = False
        self.ended = False


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = bytearray()
        self.preface = False
        self.decoder = Decoder()
        self.streams: dict[int, Stream] = {}
        self.transport: Any = None
        self.block = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        # our settings: a large initial window; then open the connection window as well
        settings = struct.pack(">HI", 4, 1 << 24)
        transport.write(frame(SETTINGS, 0, 0, settings) + frame(WINDOW, 0, 0, HEAD.pack(1 << 30)))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        pos = 0
        if not self.preface:
            if len(buffer) < len(PREFACE):
                return
            pos = len(PREFACE)
            self.preface = True
        end = len(buffer)
        consumed = 0
        while end - pos >= 9:
            length = int.from_bytes(buffer[pos : pos + 3], "big")
            if end - pos < 9 + length:
                break
            kind, flags = buffer[pos + 3], buffer[pos + 4]
            stream = HEAD.unpack_from(buffer, pos + 5)[0] & 0x7FFFFFFF
            payload = bytes(buffer[pos + 9 : pos + 9 + length])
            pos += 9 + length
            if kind == DATA:
                consumed += length
            self.on_frame(kind, flags, stream, payload)
        del buffer[:pos]
        if consumed:
            self.transport.write(frame(WINDOW, 0, 0, HEAD.pack(consumed)))

    def on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                if flags & PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                if flags & PRIORITY:
                    payload = payload[5:]
                self.block = payload
            else:
                self.block += payload
            if flags & END_HEADERS:
                headers = dict(self.decoder.decode(self.block))
                current = self.streams.get(stream_id)
                if current is None:
                    self.streams[stream_id] = Stream(headers.get(b":path", b""))
            if flags & END_STREAM:
                self.end_of_input(stream_id)
        elif kind == DATA:
            current = self.streams.get(stream_id)
            if current is None:
                return
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            current.buffer += payload
            self.take_messages(stream_id, current)
            if flags & END_STREAM:
                self.end_of_input(stream_id)
        elif kind == SETTINGS and not flags & 1:
            self.transport.write(frame(SETTINGS, 1, 0))
        elif kind == PING and not flags & 1:
            self.transport.write(frame(PING, 1, 0, payload))
        elif kind == RST:
            self.streams.pop(stream_id, None)

    def take_messages(self, stream_id: int, current: Stream) -> None:
        buffer = current.buffer
        while len(buffer) >= 5:
            size = HEAD.unpack_from(buffer, 1)[0]
            if len(buffer) < 5 + size:
                return
            message = bytes(buffer[5 : 5 + size])
            del buffer[: 5 + size]
            current.pending += 1
            asyncio.get_running_loop().create_task(self.call(stream_id, current, message))

    async def call(self, stream_id: int, current: Stream, message: bytes) -> None:
        body = await answer(current.path, message)
        out = b""
        if not current.headers_sent:
            current.headers_sent = True
            out = frame(HEADERS, END_HEADERS, stream_id, RESPONSE_HEADERS)
        out += frame(DATA, 0, stream_id, b"\x00" + HEAD.pack(len(body)) + body)
        current.pending -= 1
        if current.ended and current.pending == 0:
            out += frame(HEADERS, END_HEADERS | END_STREAM, stream_id, TRAILERS_OK)
            self.streams.pop(stream_id, None)
        self.transport.write(out)

    def end_of_input(self, stream_id: int) -> None:
        current = self.streams.get(stream_id)
        if current is None:
            return
        current.ended = True
        if current.pending == 0:
            out = b""
            if not current.headers_sent:
                out = frame(HEADERS, END_HEADERS, stream_id, RESPONSE_HEADERS)
            self.transport.write(
                out + frame(HEADERS, END_HEADERS | END_STREAM, stream_id, TRAILERS_OK)
            )
            self.streams.pop(stream_id, None)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Connection, "127.0.0.1", port)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(int(sys.argv[1])))
