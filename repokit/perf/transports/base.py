"""The transport interface the load drivers and the profiler use.

A :class:`Transport` answers control calls (server and model metadata, model config, model
statistics, shared-memory registration) with JSON-shaped dicts (HTTP's shapes; gRPC messages are
converted to them) and pre-encodes requests once with :meth:`Transport.prepare`. Each
concurrent worker opens its own :class:`Connection` and calls :meth:`Connection.infer`, which
returns an :class:`InferTiming`: four clock readings (start, request written, response
received, response decoded) and the error text, if any. Encoding work is done in ``prepare``
so that the hot path only writes bytes and reads the answer.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy.typing as npt

from repokit.perf.transports.tls import TlsOptions


@dataclass(frozen=True)
class TransportOptions:
    protocol: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    input_format: str = "binary"  # HTTP only
    output_format: str = "binary"  # HTTP only
    streaming: bool = False  # gRPC only
    tls: TlsOptions = field(default_factory=TlsOptions)  # --ssl-grpc-* / --ssl-https-*
    endpoint: str = "infer"  # HTTP only: infer, generate or generate_stream
    # gRPC only: --request-parameter name -> (value, "string" | "int" | "bool")
    request_parameters: dict[str, tuple[str, str]] = field(default_factory=dict)
    compression: str = "none"  # gRPC only: --grpc-compression-algorithm none, gzip or deflate


@dataclass(frozen=True)
class ShmBinding:
    """Where a request's inputs live and where outputs go in registered system shm regions."""

    inputs: dict[str, tuple[str, int, int]]  # input -> (region, offset, byte size)
    outputs: dict[str, tuple[str, int, int]]


@dataclass(frozen=True)
class SequenceFlags:
    sequence_id: int
    start: bool
    end: bool


class InferTiming(NamedTuple):
    start: int
    sent: int  # request written
    received: int  # response bytes in hand
    end: int  # response decoded
    error: str | None
    outputs: dict[str, npt.NDArray[Any]] | None = None
    first: int = 0  # when the first streamed response (generate_stream event) arrived; 0: none
    responses: int = 1  # responses received (a decoupled model's stream: the non-empty ones)
    # a decoupled model's stream: when each non-empty response arrived (the profile export's
    # response_timestamps); empty for one-response requests, whose time is ``end``
    response_times: tuple[int, ...] = ()


class PreparedRequest(Protocol):
    """An encoded request; opaque to everything but its transport."""


class Connection(Protocol):
    async def infer(
        self,
        request: Any,
        sequence: SequenceFlags | None = None,
        want_outputs: bool = False,
    ) -> InferTiming: ...

    async def close(self) -> None: ...


class Transport(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def server_metadata(self) -> dict[str, Any]: ...

    async def model_metadata(self, model: str, version: str) -> dict[str, Any]: ...

    async def model_config(self, model: str, version: str) -> dict[str, Any] | None: ...

    async def model_statistics(self, model: str | None, version: str) -> dict[str, Any]: ...

    async def register_system_shm(self, name: str, key: str, byte_size: int) -> None: ...

    async def unregister_system_shm(self, name: str) -> None: ...

    async def update_trace_settings(self, settings: dict[str, str]) -> None: ...

    def prepare(
        self,
        model: str,
        version: str,
        inputs: dict[str, tuple[str, npt.NDArray[Any]]],
        outputs: list[tuple[str, str]],
        shm: ShmBinding | None = None,
        decoupled: bool = False,
    ) -> Any: ...

    async def connect(self) -> Connection: ...


def blocking_with_timeouts(sock: socket.socket, timeout: float) -> None:
    """A blocking socket whose send/recv time out in the kernel (SO_RCVTIMEO/SO_SNDTIMEO):
    a Python-level timeout would add a poll() before every send and recv."""
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    seconds = int(timeout)
    value = seconds.to_bytes(8, sys.byteorder) + int((timeout - seconds) * 1e6).to_bytes(
        8, sys.byteorder
    )
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
