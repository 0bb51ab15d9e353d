"""gRPC server options: the subset of ``tritonserver``'s gRPC flags repokit honours.

Defaults are tritonserver's (server ``src/command_line_parser.h``): messages up to INT32_MAX
bytes both ways, keepalive 7200000 ms / 20000 ms, no pings without calls, 2 pings without data,
300000 ms minimum ping interval, 2 ping strikes, SO_REUSEPORT off. Built from the serving
settings by :func:`grpc_options_from_settings`, so this module has no opinion on where they
come from (CLI, tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from repokit.frontends.restricted_apis import parse_restricted_apis

MAX_GRPC_MESSAGE_SIZE = 2**31 - 1
RESTRICTED_HEADER_PREFIX = "triton-grpc-protocol-"

#: --grpc-infer-response-compression-level names -> grpc core compression levels
COMPRESSION_LEVELS: dict[str, int] = {"none": 0, "low": 1, "medium": 2, "high": 3}
#: --grpc-transport: repokit's own HTTP/2 server (repokit.frontends.grpc.h2) or grpc.aio
TRANSPORTS = ("native", "grpcio")
DEFAULT_TRANSPORT = "native"


@dataclass(frozen=True)
class GrpcOptions:
    address: str = "0.0.0.0"
    port: int = 8001
    reuse_port: bool = False
    use_ssl: bool = False
    use_ssl_mutual: bool = False
    server_cert: str = ""
    server_key: str = ""
    root_cert: str = ""
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int = 0
    max_connection_age_grace_ms: int = 0
    max_concurrent_streams: int = 1024
    infer_response_compression_level: str = "none"
    max_receive_message_length: int = MAX_GRPC_MESSAGE_SIZE
    max_send_message_length: int = MAX_GRPC_MESSAGE_SIZE
    transport: str = DEFAULT_TRANSPORT
    # category -> (metadata key incl. the triton-grpc-protocol- prefix, expected value)
    restricted: dict[str, tuple[str, str]] = field(default_factory=dict)
    header_forward_pattern: str = ""  # --grpc-header-forward-pattern

    def compression_level(self) -> int:
        level = COMPRESSION_LEVELS.get(self.infer_response_compression_level)
        if level is None:
            raise ValueError(
                "invalid --grpc-infer-response-compression-level "
                f"'{self.infer_response_compression_level}': expected one of "
                + ", ".join(COMPRESSION_LEVELS)
            )
        return level

    def channel_options(self) -> list[tuple[str, Any]]:
        level = self.compression_level()
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", self.max_receive_message_length),
            ("grpc.max_send_message_length", self.max_send_message_length),
            ("grpc.so_reuseport", int(self.reuse_port)),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.http2_max_pings_without_data),
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                self.http2_min_recv_ping_interval_without_data_ms,
            ),
            ("grpc.http2.max_ping_strikes", self.http2_max_ping_strikes),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
        ]
        if self.max_connection_age_ms:
            options.append(("grpc.max_connection_age_ms", self.max_connection_age_ms))
        if self.max_connection_age_grace_ms:
            options.append(("grpc.max_connection_age_grace_ms", self.max_connection_age_grace_ms))
        if level:
            options.append(("grpc.default_compression_level", level))
        return options


def parse_restricted_protocols(specs: list[str] | tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """``<protocols>:<key>=<value>`` specs -> category -> (metadata key, value)."""
    parsed = parse_restricted_apis(
        specs,
        option="grpc-restricted-protocol",
        key_prefix=RESTRICTED_HEADER_PREFIX,
        feature="protocol",
    )
    # gRPC metadata keys are lower-case on the wire
    return {category: (key.lower(), value) for category, (key, value) in parsed.items()}


class GrpcSettings(Protocol):
    """The serving settings' ``grpc_*`` fields (``repokit.frontends.runner.ServeSettings``)."""

    grpc_address: str
    grpc_port: int
    reuse_grpc_port: bool
    grpc_use_ssl: bool
    grpc_use_ssl_mutual: bool
    grpc_server_cert: str
    grpc_server_key: str
    grpc_root_cert: str
    grpc_keepalive_time: int
    grpc_keepalive_timeout: int
    grpc_keepalive_permit_without_calls: bool
    grpc_http2_max_pings_without_data: int
    grpc_http2_min_recv_ping_interval_without_data: int
    grpc_http2_max_ping_strikes: int
    grpc_max_connection_age: int
    grpc_max_connection_age_grace: int
    grpc_infer_response_compression_level: str
    grpc_restricted_protocol: list[str]
    grpc_header_forward_pattern: str
    grpc_transport: str


def grpc_options_from_settings(settings: GrpcSettings) -> GrpcOptions:
    """The gRPC options of the serving settings."""
    return GrpcOptions(
        address=settings.grpc_address,
        port=settings.grpc_port,
        reuse_port=settings.reuse_grpc_port,
        use_ssl=settings.grpc_use_ssl,
        use_ssl_mutual=settings.grpc_use_ssl_mutual,
        server_cert=settings.grpc_server_cert or "",
        server_key=settings.grpc_server_key or "",
        root_cert=settings.grpc_root_cert or "",
        keepalive_time_ms=settings.grpc_keepalive_time,
        keepalive_timeout_ms=settings.grpc_keepalive_timeout,
        keepalive_permit_without_calls=settings.grpc_keepalive_permit_without_calls,
        http2_max_pings_without_data=settings.grpc_http2_max_pings_without_data,
        http2_min_recv_ping_interval_without_data_ms=(
            settings.grpc_http2_min_recv_ping_interval_without_data
        ),
        http2_max_ping_strikes=settings.grpc_http2_max_ping_strikes,
        max_connection_age_ms=settings.grpc_max_connection_age,
        max_connection_age_grace_ms=settings.grpc_max_connection_age_grace,
        infer_response_compression_level=settings.grpc_infer_response_compression_level,
        restricted=parse_restricted_protocols(tuple(settings.grpc_restricted_protocol)),
        transport=settings.grpc_transport,
        header_forward_pattern=settings.grpc_header_forward_pattern,
    )
