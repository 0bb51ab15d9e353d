"""The native transport polices client pings as grpc's server does (and Triton 2.51 with it):
see repokit/frontends/grpc/h2/ping_policy.py. The raw-socket cases were checked against
Triton 2.51 by hand with the same frames."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from repokit.frontends.grpc import GrpcOptions, build_grpc_server
from repokit.frontends.grpc.h2 import frames as f
from repokit.frontends.grpc.h2.ping_policy import IDLE_INTERVAL, PingPolicy
from tests.frontends.grpc.test_native_transport import SERVER_LIVE, RawClient
from tests.frontends.grpc.test_server import IdentityService, _infer_request

STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
# the raw-socket cases run on both transports: grpcio's is grpc's own policy (Triton's)
transports = pytest.mark.parametrize("transport", ["native", "grpcio"])


async def _serve(transport: str = "native", **options: Any) -> Any:
    server = build_grpc_server(
        IdentityService(),
        GrpcOptions(address="127.0.0.1", port=0, transport=transport, **options),
    )
    await server.start()
    return server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_strikes_on_an_idle_connection() -> None:
    clock = Clock()
    policy = PingPolicy(300.0, 2, False, clock)
    # the first ping is allowed, the next ones within two hours are strikes; the third ends it
    assert [policy.received(False) for _ in range(4)] == [False, False, False, True]
    assert policy.strikes == 3


def test_interval_while_calls_run_and_without_calls_when_permitted() -> None:
    clock = Clock()
    policy = PingPolicy(10.0, 1, False, clock)
    assert not policy.received(True)
    clock.now += 10.0  # exactly the interval: allowed
    assert not policy.received(True)
    clock.now += 11.0  # idle: two hours apply, not ten seconds
    assert not policy.received(False)  # strike 1 (of 1 allowed)
    assert policy.strikes == 1
    clock.now += IDLE_INTERVAL
    assert not policy.received(False)  # long enough: no strike
    clock.now += 11.0
    assert policy.received(False)  # strike 2: one too many
    permitted = PingPolicy(10.0, 1, True, clock)
    assert not permitted.received(False)
    clock.now += 10.0
    assert not permitted.received(False) and permitted.strikes == 0


def test_reset_and_unlimited_strikes() -> None:
    clock = Clock()
    policy = PingPolicy(300.0, 2, False, clock)
    for _ in range(3):
        policy.received(False)
    policy.reset()  # the server sent headers or data
    assert policy.strikes == 0
    assert [policy.received(False) for _ in range(3)] == [False, False, False]
    unlimited = PingPolicy(300.0, 0, False, clock)
    assert not any(unlimited.received(False) for _ in range(50))
    negative = PingPolicy(-1.0, -3, False, clock)  # as grpc: clamped to 0 (no limit)
    assert not any(negative.received(True) for _ in range(10))


async def _pings(client: RawClient, count: int, first: int = 0) -> None:
    for index in range(count):
        client.send(f.frame(f.PING, 0, 0, struct.pack(">Q", first + index)))
        await client.writer.drain()


async def _frames_until_quiet(client: RawClient, wait: float = 0.5) -> list[Any]:
    """Frames until the connection ends (None last), nothing comes for ``wait`` s, or a
    PING from the server arrives."""
    frames: list[Any] = []
    while True:
        try:
            frame = await asyncio.wait_for(client.frame(), wait)
        except (TimeoutError, asyncio.TimeoutError):
            return frames
        except ConnectionError:
            return [*frames, None]
        frames.append(frame)
        if frame is None or (frame[0] == f.PING and not frame[1] & f.ACK):
            return frames


def _acks(frames: list[Any]) -> list[int]:
    return [
        struct.unpack(">Q", fr[3])[0]
        for fr in frames
        if fr is not None and fr[0] == f.PING and fr[1] & f.ACK
    ]


def _goaway(frames: list[Any]) -> tuple[int, int, bytes] | None:
    for fr in frames:
        if fr is not None and fr[0] == f.GOAWAY:
            last, code = struct.unpack(">II", fr[3][:8])
            return last, code, fr[3][8:]
    return None


@transports
async def test_fourth_quick_ping_ends_the_connection(transport: str) -> None:
    server = await _serve(transport)
    try:
        client = await RawClient.connect(server.port)
        await _pings(client, 4)
        frames = await _frames_until_quiet(client)
        assert _acks(frames) == [0, 1, 2, 3]  # every ping is answered, then the GOAWAY
        assert _goaway(frames) == (0, f.ENHANCE_YOUR_CALM, b"too_many_pings")
        assert frames[-1] is None  # and the connection is closed
        # three pings leave it open
        other = await RawClient.connect(server.port)
        await _pings(other, 3)
        frames = await _frames_until_quiet(other)
        assert _acks(frames) == [0, 1, 2] and _goaway(frames) is None and None not in frames
        await other.close()
    finally:
        await server.stop(None)


@transports
async def test_a_response_clears_the_strikes(transport: str) -> None:
    server = await _serve(transport)
    try:
        client = await RawClient.connect(server.port)
        await _pings(client, 3)
        block = client.request_block(SERVER_LIVE)
        client.send(f.frame(f.HEADERS, f.END_HEADERS, 1, block))
        client.send(f.frame(f.DATA, f.END_STREAM, 1, b"\0\0\0\0\0"))
        end = await client.until_any((f.HEADERS,))
        end = end if end[1] & f.END_STREAM else await client.until(f.HEADERS)
        await _pings(client, 3, first=100)
        frames = await _frames_until_quiet(client)
        assert _acks(frames) == [100, 101, 102]
        assert _goaway(frames) is None and None not in frames
        await _pings(client, 1, first=200)  # the fourth since the response
        frames = await _frames_until_quiet(client)
        assert _goaway(frames) == (1, f.ENHANCE_YOUR_CALM, b"too_many_pings")
    finally:
        await server.stop(None)


@transports
async def test_stream_messages_clear_the_strikes(transport: str) -> None:
    """A stream's later responses are DATA frames only (its head went out with the first):
    they clear the strikes too (Triton's example simple_grpc_custom_repeat streams responses
    while grpc's client pings after the data it receives)."""
    server = await _serve(transport)
    try:
        client = await RawClient.connect(server.port)
        block = client.request_block(STREAM_INFER)
        client.send(f.frame(f.HEADERS, f.END_HEADERS, 1, block))
        message = _infer_request("echo", [1.0, 2.0]).SerializeToString()
        framed = b"\0" + len(message).to_bytes(4, "big") + message
        for round_ in range(3):
            client.send(f.frame(f.DATA, 0, 1, framed))
            await client.until(f.DATA)  # the response (the head came before the first one)
            await _pings(client, 3, first=10 * round_)
            frames = await _frames_until_quiet(client, wait=0.3)
            assert _acks(frames) == [10 * round_, 10 * round_ + 1, 10 * round_ + 2]
            assert _goaway(frames) is None and None not in frames
        await client.close()
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    "options",
    [
        {"http2_max_ping_strikes": 0},
        {"keepalive_permit_without_calls": True, "http2_min_recv_ping_interval_without_data_ms": 0},
    ],
    ids=["no-strike-limit", "permitted-without-calls"],
)
@transports
async def test_options_allow_frequent_pings(transport: str, options: dict[str, Any]) -> None:
    server = await _serve(transport, **options)
    try:
        client = await RawClient.connect(server.port)
        await _pings(client, 10)
        frames = await _frames_until_quiet(client)
        assert _acks(frames) == list(range(10))
        assert _goaway(frames) is None and None not in frames
        await client.close()
    finally:
        await server.stop(None)


async def test_keepalive_pings_only_with_calls_unless_permitted() -> None:
    quiet = await _serve(keepalive_time_ms=50)
    talky = await _serve(keepalive_time_ms=50, keepalive_permit_without_calls=True)
    try:
        client = await RawClient.connect(quiet.port)
        frames = await _frames_until_quiet(client, wait=0.4)
        assert not [fr for fr in frames if fr is not None and fr[0] == f.PING]
        await client.close()
        client = await RawClient.connect(talky.port)
        ping = await asyncio.wait_for(client.until(f.PING), 5)
        assert not ping[1] & f.ACK
        await client.close()
    finally:
        await quiet.stop(None)
        await talky.stop(None)


def test_keepalive_pings_without_data_are_limited() -> None:
    policy = PingPolicy(300.0, 2, False, Clock(), max_sent_without_data=2)
    sent = 0
    for _ in range(5):
        if policy.may_send():
            policy.sent()
            sent += 1
    assert sent == 2
    policy.reset()  # headers or data went out
    assert policy.may_send()
    unlimited = PingPolicy(300.0, 2, False, Clock(), max_sent_without_data=0)
    for _ in range(10):
        unlimited.sent()
    assert unlimited.may_send()


async def test_keepalive_stops_after_pings_without_data() -> None:
    server = await _serve(
        keepalive_time_ms=30,
        keepalive_timeout_ms=5000,
        keepalive_permit_without_calls=True,
        http2_max_pings_without_data=2,
    )
    try:
        client = await RawClient.connect(server.port)
        pings = 0
        while True:
            frames = await _frames_until_quiet(client, wait=0.5)
            if not frames:
                break
            for frame in frames:
                assert frame is not None and frame[0] != f.GOAWAY
                if frame[0] == f.PING and not frame[1] & f.ACK:
                    pings += 1  # answered at once, so the next keepalive is scheduled
                    client.send(f.frame(f.PING, f.ACK, 0, frame[3]))
        assert pings == 2
        await client.close()
    finally:
        await server.stop(None)
