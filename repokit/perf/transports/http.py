"""KServe v2 over HTTP/1.1 with keep-alive, on raw asyncio protocols (no client library).

Why raw: a request is encoded once (:meth:`HttpTransport.prepare` builds the whole HTTP message,
JSON header plus binary tensor data via repokit's codecs); the hot path writes those bytes and
parses the status line and ``Content-Length`` of the answer. That keeps the client's CPU per
request well below aiohttp's (measured: benchmarks/perf_vs_wrk.py). Sequence requests add their
``parameters`` to the pre-encoded JSON fragment. Responses with ``Transfer-Encoding: chunked``
are decoded too. Outputs are decoded only when validation data needs them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urlsplit

import numpy as np
import numpy.typing as npt
import orjson

from repokit.perf.errors import PerfError
from repokit.perf.transports.base import (
    InferTiming,
    SequenceFlags,
    ShmBinding,
    TransportOptions,
    blocking_with_timeouts,
)
from repokit.perf.transports.tls import https_context
from repokit.protocol.json_codec import array_to_json
from repokit.protocol.tensor_codec import array_from_bytes, array_to_bytes

_CRLF2 = b"\r\n\r\n"


def split_url(url: str, default_port: int) -> tuple[str, int]:
    parsed = urlsplit(url if "://" in url else f"//{url}")
    host = parsed.hostname or "localhost"
    try:
        port = parsed.port or default_port
    except ValueError:
        raise PerfError(f"-u '{url}' is not a valid host:port", 3) from None
    return host, port


@dataclass
class HttpResponse:
    status: int
    headers: bytes  # lower-cased header block
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        key = b"\r\n" + name + b":"
        at = self.headers.find(key)
        if at < 0:
            return None
        end = self.headers.find(b"\r\n", at + len(key))
        return self.headers[at + len(key) : end if end >= 0 else None].strip()


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[HttpResponse] | None = None
        self._closed: Exception | None = None
        self._clock = clock  # set: note when the first Server-Sent Event of a response arrives
        self.first_event = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = exc or ConnectionResetError("the server closed the connection")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self._closed)

    def expect(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[HttpResponse]:
        if self._closed is not None:
            raise self._closed
        self._waiter = loop.create_future()
        self.first_event = 0
        return self._waiter

    def data_received(self, data: bytes) -> None:
        if self._clock is not None and not self.first_event and b"data: " in data:
            self.first_event = self._clock()
        self._buffer += data
        response = parse_response(self._buffer)
        if response is None:
            return
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)


def parse_response(buffer: bytearray) -> HttpResponse | None:
    """Take one complete response off the front of ``buffer``; None while it is incomplete."""
    head_end = buffer.find(_CRLF2)
    if head_end < 0:
        return None
    head = bytes(buffer[:head_end]).lower()
    length_at = head.find(b"\r\ncontent-length:")
    if length_at >= 0:
        line_end = head.find(b"\r\n", length_at + 17)
        length = int(head[length_at + 17 : line_end if line_end >= 0 else None])
        total = head_end + 4 + length
        if len(buffer) < total:
            return None
        body = bytes(buffer[head_end + 4 : total])
        del buffer[:total]
    elif b"\r\ntransfer-encoding: chunked" in head:
        decoded = _dechunk(buffer, head_end + 4)
        if decoded is None:
            return None
        body, total = decoded
        del buffer[:total]
    else:
        body = b""
        del buffer[: head_end + 4]
    return HttpResponse(int(head[9:12]), head, body)


def _dechunk(buffer: bytearray, offset: int) -> tuple[bytes, int] | None:
    parts: list[bytes] = []
    while True:
        line_end = buffer.find(b"\r\n", offset)
        if line_end < 0:
            return None
        size = int(bytes(buffer[offset:line_end]).split(b";")[0], 16)
        start = line_end + 2
        if len(buffer) < start + size + 2:
            return None
        if size == 0:
            trailer_end = buffer.find(b"\r\n", start)
            return (b"".join(parts), trailer_end + 2) if trailer_end >= 0 else None
        parts.append(bytes(buffer[start : start + size]))
        offset = start + size + 2


GENERATE_NO_SEQUENCES = "generate requests carry no sequence controls: use --endpoint infer"


@dataclass
class PreparedHttp:
    path: bytes
    fragment: bytes  # JSON header without the opening brace
    binary: bytes
    message: bytes  # the complete request for non-sequence use
    outputs: list[tuple[str, str]]  # (name, datatype) for decoding
    kind: str = "infer"  # or generate / generate_stream (a generate JSON body)


class HttpConnection:
    def __init__(self, transport: HttpTransport, proto: _ClientProtocol) -> None:
        self._owner = transport
        self._proto = proto
        self._clock = transport.clock
        self._loop = asyncio.get_running_loop()

    async def request(self, message: bytes) -> HttpResponse:
        waiter = self._proto.expect(self._loop)
        assert self._proto.transport is not None
        self._proto.transport.write(message)
        return await waiter

    async def infer(
        self,
        request: PreparedHttp,
        sequence: SequenceFlags | None = None,
        want_outputs: bool = False,
    ) -> InferTiming:
        clock = self._clock
        start = clock()
        if sequence is not None and request.kind != "infer":
            return InferTiming(start, start, start, start, GENERATE_NO_SEQUENCES)
        message = (
            request.message if sequence is None else self._owner.sequence_message(request, sequence)
        )
        proto = self._proto
        try:
            waiter = proto.expect(self._loop)
            assert proto.transport is not None
            proto.transport.write(message)
            sent = clock()
            response = await waiter
        except (OSError, ConnectionError) as exc:
            now = clock()
            return InferTiming(start, now, now, now, f"connection failed: {exc}")
        received = clock()
        if request.kind != "infer":
            return _generate_timing(request, response, (start, sent, received), proto, clock)
        if response.status != 200:
            return InferTiming(start, sent, received, clock(), _error_text(response))
        outputs = decode_outputs(response, request.outputs) if want_outputs else None
        return InferTiming(start, sent, received, clock(), None, outputs)

    async def close(self) -> None:
        if self._proto.transport is not None:
            self._proto.transport.close()


def _generate_timing(
    request: PreparedHttp,
    response: HttpResponse,
    times: tuple[int, int, int],
    proto: _ClientProtocol,
    clock: Callable[[], int],
) -> InferTiming:
    """A generate answer: a JSON object, or Server-Sent Events whose first one's arrival is
    the time to first response; an error event fails the request as an error status does."""
    start, sent, received = times
    if response.status != 200:
        return InferTiming(start, sent, received, clock(), _error_text(response))
    if request.kind == "generate_stream":
        events = [
            orjson.loads(chunk[6:])
            for chunk in response.body.split(b"\n\n")
            if chunk.startswith(b"data: ")
        ]
        first = proto.first_event or received
    else:
        events, first = [orjson.loads(response.body)], 0
    for event in events:
        if isinstance(event, dict) and "error" in event:
            return InferTiming(start, sent, received, clock(), f"HTTP 200: {event['error']}")
    outputs = _generate_outputs(events[-1], request.outputs) if events else {}
    return InferTiming(start, sent, received, clock(), None, outputs, first, len(events))


def _generate_outputs(
    answer: dict[str, Any], outputs: list[tuple[str, str]]
) -> dict[str, npt.NDArray[Any]]:
    """The named outputs of a generate answer (the last event of a stream)."""
    out: dict[str, npt.NDArray[Any]] = {}
    for name, datatype in outputs:
        if name in answer:
            value = answer[name]
            flat = value if isinstance(value, list) else [value]
            out[name] = np.asarray(
                [str(v).encode() for v in flat] if datatype == "BYTES" else flat,
                dtype=object if datatype == "BYTES" else None,
            )
    return out


def _error_text(response: HttpResponse) -> str:
    try:
        detail = orjson.loads(response.body).get("error", "")
    except (orjson.JSONDecodeError, AttributeError):
        detail = response.body[:200].decode("utf-8", "replace")
    return f"HTTP {response.status}: {detail}"


def decode_outputs(
    response: HttpResponse, outputs: list[tuple[str, str]]
) -> dict[str, npt.NDArray[Any]]:
    length_text = response.header(b"inference-header-content-length")
    head_len = int(length_text) if length_text is not None else len(response.body)
    header = orjson.loads(response.body[:head_len])
    offset = head_len
    out: dict[str, npt.NDArray[Any]] = {}
    for entry in header.get("outputs", []):
        params = entry.get("parameters") or {}
        size = params.get("binary_data_size")
        name, datatype, shape = entry["name"], entry["datatype"], entry.get("shape", [])
        if size is not None:
            raw = response.body[offset : offset + int(size)]
            offset += int(size)
            out[name] = array_from_bytes(datatype, shape, raw, input_name=name, model_name="")
        elif "data" in entry:
            data = entry["data"]
            out[name] = np.asarray(
                [d.encode() for d in data] if datatype == "BYTES" else data,
                dtype=object if datatype == "BYTES" else None,
            )
    return out


class BlockingHttpConnection:
    """One keep-alive socket used by one worker thread (perf_analyzer's sync mode): a blocking
    send and recv per request costs less client time than an event-loop round trip."""

    def __init__(self, transport: HttpTransport, sock: socket.socket) -> None:
        self._owner = transport
        self._sock = sock
        self._clock = transport.clock
        self._buffer = bytearray()

    def infer(
        self,
        request: PreparedHttp,
        sequence: SequenceFlags | None = None,
        want_outputs: bool = False,
    ) -> InferTiming:
        clock = self._clock
        start = clock()
        message = (
            request.message if sequence is None else self._owner.sequence_message(request, sequence)
        )
        buffer = self._buffer
        try:
            self._sock.sendall(message)
            sent = clock()
            while True:
                chunk = self._sock.recv(262144)
                if not chunk:
                    raise ConnectionResetError("the server closed the connection")
                buffer += chunk
                response = parse_response(buffer)
                if response is not None:
                    break
        except OSError as exc:
            now = clock()
            return InferTiming(start, now, now, now, f"connection failed: {exc}")
        received = clock()
        if response.status != 200:
            return InferTiming(start, sent, received, clock(), _error_text(response))
        outputs = decode_outputs(response, request.outputs) if want_outputs else None
        return InferTiming(start, sent, received, clock(), None, outputs)

    def close(self) -> None:
        self._sock.close()


class HttpTransport:
    def __init__(self, options: TransportOptions, clock: Callable[[], int]) -> None:
        self.options = options
        self.clock = clock
        self.host, self.port = split_url(options.url, 8000)
        secure = options.url.lower().startswith("https://") or options.tls.https_files
        self.tls = https_context(options.tls) if secure else None
        self.scheme = "HTTPS" if secure else "HTTP"
        extra = "".join(f"{k}: {v}\r\n" for k, v in options.headers.items())
        self._extra_headers = extra.encode()
        self._control: HttpConnection | None = None

    async def open(self) -> None:
        self._control = await self.connect()

    async def close(self) -> None:
        if self._control is not None:
            await self._control.close()
            self._control = None

    async def connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(
                lambda: _ClientProtocol(self.clock),
                self.host,
                self.port,
                ssl=self.tls,
                server_hostname=self.host if self.tls is not None else None,
            )
        except OSError as exc:  # ssl.SSLError included
            raise PerfError(
                f"cannot connect to {self.host}:{self.port} over {self.scheme}: "
                f"{exc.strerror or exc}"
            ) from None
        return HttpConnection(self, proto)

    def supports_blocking(self) -> bool:
        """Generate requests run on the event loop (it notes the first event's arrival)."""
        return self.options.endpoint == "infer"

    def connect_blocking(self) -> BlockingHttpConnection:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=60)
            blocking_with_timeouts(sock, 60)
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except OSError as exc:  # ssl.SSLError included
            raise PerfError(
                f"cannot connect to {self.host}:{self.port} over {self.scheme}: "
                f"{exc.strerror or exc}"
            ) from None
        return BlockingHttpConnection(self, sock)

    def _head(self, method: str, path: bytes, length: int, extra: bytes = b"") -> bytes:
        return (
            method.encode()
            + b" "
            + path
            + b" HTTP/1.1\r\nHost: "
            + self.host.encode()
            + b"\r\nContent-Length: "
            + str(length).encode()
            + b"\r\n"
            + extra
            + self._extra_headers
            + b"\r\n"
        )

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if self._control is None:
            await self.open()
        assert self._control is not None
        payload = b"" if body is None else orjson.dumps(body)
        extra = b"Content-Type: application/json\r\n" if body is not None else b""
        try:
            response = await self._control.request(
                self._head(method, path.encode(), len(payload), extra) + payload
            )
        except (OSError, ConnectionError) as exc:
            raise PerfError(f"HTTP {method} {path} failed: {exc}") from None
        try:
            parsed = orjson.loads(response.body) if response.body else {}
        except orjson.JSONDecodeError:
            parsed = {"error": response.body[:200].decode("utf-8", "replace")}
        return response.status, parsed

    def _model_path(self, model: str, version: str) -> str:
        path = f"/v2/models/{quote(model, safe='')}"
        return path + (f"/versions/{quote(version, safe='')}" if version else "")

    async def _get_ok(self, path: str, what: str) -> dict[str, Any]:
        status, body = await self._call("GET", path)
        if status != 200:
            raise PerfError(f"failed to get {what}: HTTP {status}: {body.get('error', body)}")
        return body  # type: ignore[no-any-return]

    async def server_metadata(self) -> dict[str, Any]:
        return await self._get_ok("/v2", "server metadata")

    async def model_metadata(self, model: str, version: str) -> dict[str, Any]:
        return await self._get_ok(self._model_path(model, version), f"metadata of model '{model}'")

    async def model_config(self, model: str, version: str) -> dict[str, Any] | None:
        status, body = await self._call("GET", self._model_path(model, version) + "/config")
        return body if status == 200 else None

    async def model_statistics(self, model: str | None, version: str) -> dict[str, Any]:
        path = "/v2/models/stats" if model is None else self._model_path(model, version) + "/stats"
        return await self._get_ok(path, "model statistics")

    async def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        path = f"/v2/systemsharedmemory/region/{quote(name, safe='')}/register"
        status, body = await self._call(
            "POST", path, {"key": key, "offset": 0, "byte_size": byte_size}
        )
        if status != 200:
            raise PerfError(
                f"failed to register shared memory region '{name}': {body.get('error', body)}"
            )

    async def unregister_system_shm(self, name: str) -> None:
        await self._call("POST", f"/v2/systemsharedmemory/region/{quote(name, safe='')}/unregister")

    async def update_trace_settings(self, settings: dict[str, str]) -> None:
        """The server's global trace settings (--trace-level, --trace-rate, ...)."""
        body_out: dict[str, Any] = {
            key: [value] if key == "trace_level" else value for key, value in settings.items()
        }  # Triton takes the level as a list and the others as strings
        status, body = await self._call("POST", "/v2/trace/setting", body_out)
        if status != 200:
            message = body.get("error", body) if isinstance(body, dict) else body
            raise PerfError(f"failed to update the server's trace settings: {message}")

    def prepare(
        self,
        model: str,
        version: str,
        inputs: dict[str, tuple[str, npt.NDArray[Any]]],
        outputs: list[tuple[str, str]],
        shm: ShmBinding | None = None,
        decoupled: bool = False,
    ) -> PreparedHttp:
        """``decoupled``: unused (a decoupled model answers over HTTP only through
        generate_stream, whose events are counted as they come)."""
        if self.options.endpoint != "infer":
            return self._prepare_generate(model, version, inputs, outputs)
        binary_in = self.options.input_format == "binary"
        binary_out = self.options.output_format == "binary"
        parts: list[bytes] = []
        header_inputs: list[dict[str, Any]] = []
        for name, (datatype, array) in inputs.items():
            entry: dict[str, Any] = {"name": name, "shape": list(array.shape), "datatype": datatype}
            if shm is not None:
                region, offset, size = shm.inputs[name]
                entry["parameters"] = {
                    "shared_memory_region": region,
                    "shared_memory_byte_size": size,
                    "shared_memory_offset": offset,
                }
            elif binary_in or datatype in ("FP16", "BF16"):
                raw = bytes(array_to_bytes(datatype, array))
                entry["parameters"] = {"binary_data_size": len(raw)}
                parts.append(raw)
            else:
                entry["data"] = array_to_json(datatype, array)
            header_inputs.append(entry)
        output_names = [name for name, _ in outputs]
        header_outputs: list[dict[str, Any]] = []
        for name in output_names:
            if shm is not None and name in shm.outputs:
                region, offset, size = shm.outputs[name]
                header_outputs.append(
                    {
                        "name": name,
                        "parameters": {
                            "shared_memory_region": region,
                            "shared_memory_byte_size": size,
                            "shared_memory_offset": offset,
                        },
                    }
                )
            else:
                header_outputs.append({"name": name, "parameters": {"binary_data": binary_out}})
        header = orjson.dumps({"inputs": header_inputs, "outputs": header_outputs})
        binary = b"".join(parts)
        path = (self._model_path(model, version) + "/infer").encode()
        prepared = PreparedHttp(path, header[1:], binary, b"", list(outputs))
        prepared.message = self._infer_message(path, header, binary)
        return prepared

    def _prepare_generate(
        self,
        model: str,
        version: str,
        inputs: dict[str, tuple[str, npt.NDArray[Any]]],
        outputs: list[tuple[str, str]],
    ) -> PreparedHttp:
        """A generate body: each input as a key, one element as a scalar (the server shapes
        it from the model's metadata)."""
        body: dict[str, Any] = {}
        for name, (datatype, array) in inputs.items():
            values = array_to_json(datatype, array)
            body[name] = values[0] if len(values) == 1 else values
        encoded = orjson.dumps(body)
        kind = self.options.endpoint
        path = f"{self._model_path(model, version)}/{kind}".encode()
        message = (
            self._head("POST", path, len(encoded), b"Content-Type: application/json\r\n") + encoded
        )
        return PreparedHttp(path, b"", b"", message, list(outputs), kind)

    def _infer_message(self, path: bytes, header: bytes, binary: bytes) -> bytes:
        if not binary:
            extra = b"Content-Type: application/json\r\n"
        else:
            extra = (
                b"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: "
                + str(len(header)).encode()
                + b"\r\n"
            )
        return self._head("POST", path, len(header) + len(binary), extra) + header + binary

    def sequence_message(self, request: PreparedHttp, sequence: SequenceFlags) -> bytes:
        params = (
            b'{"parameters":{"sequence_id":'
            + str(sequence.sequence_id).encode()
            + b',"sequence_start":'
            + (b"true" if sequence.start else b"false")
            + b',"sequence_end":'
            + (b"true" if sequence.end else b"false")
            + b"},"
        )
        return self._infer_message(request.path, params + request.fragment, request.binary)
