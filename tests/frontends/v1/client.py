"""A small legacy v1 client for the tests, built from repokit's generated v1 protos: HTTP over
``requests`` (``NV-InferRequest`` / ``NV-Status`` / ``NV-InferResponse``) and gRPC over a channel
and the generated ``GRPCServiceStub``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
import requests
from google.protobuf import text_format

from repokit.protocol.generated.v1 import api_pb2, request_status_pb2, server_status_pb2
from repokit.protocol.generated.v1 import grpc_service_pb2 as pb
from repokit.protocol.generated.v1 import grpc_service_pb2_grpc as pb_grpc

RequestHeader = api_pb2.InferRequestHeader
ResponseHeader = api_pb2.InferResponseHeader


def request_header(text: str) -> Any:
    return text_format.Parse(text, RequestHeader())


@dataclass
class V1Reply:
    """One HTTP reply: its status code, the parsed NV-Status and the raw body."""

    http_status: int
    status: Any  # RequestStatus
    body: bytes
    headers: Any = field(default_factory=dict)  # case-insensitive (requests)

    @property
    def ok(self) -> bool:
        return self.http_status == 200 and self.status.code == request_status_pb2.SUCCESS

    @property
    def code(self) -> str:
        return str(request_status_pb2.RequestStatusCode.Name(self.status.code))


@dataclass
class V1InferResult:
    reply: V1Reply
    header: Any = None  # InferResponseHeader from NV-InferResponse (None on error)
    outputs: dict[str, bytes] = field(default_factory=dict)  # raw outputs by name
    trailer: bytes = b""  # the serialized InferResponseHeader after the raw outputs


def shm_outputs(header: Any) -> set[str]:
    """Outputs a request header (message or text) places in shared memory."""
    if isinstance(header, str):
        try:
            header = text_format.Parse(header, RequestHeader())
        except text_format.ParseError:
            return set()
    return {o.name for o in header.output if o.HasField("shared_memory")}


def split_outputs(
    header: Any, data: list[bytes] | bytes, in_shm: set[str]
) -> tuple[dict[str, bytes], bytes]:
    """Raw outputs by name (in header order) and whatever follows them in an HTTP body.
    Outputs the request put in shared memory have raw metadata but no bytes here."""
    outputs: dict[str, bytes] = {}
    raw = [o for o in header.output if o.HasField("raw") and o.name not in in_shm]
    if isinstance(data, list):
        return {o.name: d for o, d in zip(raw, data, strict=True)}, b""
    offset = 0
    for out in raw:
        size = out.raw.batch_byte_size
        outputs[out.name] = data[offset : offset + size]
        offset += size
    return outputs, data[offset:]


class V1HttpClient:
    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/")
        self.session = requests.Session()

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        data: bytes = b"",
        params: dict[str, str] | None = None,
    ) -> V1Reply:
        r = self.session.request(
            method, self.base + path, headers=headers, data=data, params=params, timeout=60
        )
        status = text_format.Parse(r.headers["NV-Status"], request_status_pb2.RequestStatus())
        return V1Reply(r.status_code, status, r.content, r.headers)

    def health(self, mode: str) -> V1Reply:
        return self.request("GET", f"/api/health/{mode}")

    def status(self, model: str = "", fmt: str = "binary") -> tuple[V1Reply, Any]:
        reply = self.request("GET", "/api/status" + (f"/{model}" if model else ""),
                             params={"format": fmt})  # fmt: skip
        status = server_status_pb2.ServerStatus()
        if reply.ok:
            status.ParseFromString(reply.body)
        return reply, status

    def infer(
        self,
        model: str,
        header: Any,
        body: bytes = b"",
        version: str = "",
        fmt: str = "",
    ) -> V1InferResult:
        text = (
            header
            if isinstance(header, str)
            else text_format.MessageToString(header, as_one_line=True)
        )
        path = f"/api/infer/{model}" + (f"/{version}" if version else "")
        reply = self.request(
            "POST",
            path,
            headers={"NV-InferRequest": text},
            data=body,
            params={"format": fmt} if fmt else None,
        )
        result = V1InferResult(reply)
        if reply.ok:
            result.header = text_format.Parse(reply.headers["NV-InferResponse"], ResponseHeader())
            result.outputs, result.trailer = split_outputs(
                result.header, reply.body, shm_outputs(header)
            )
        return result


class V1GrpcClient:
    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.GRPCServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def infer(
        self, model: str, header: Any, raw_inputs: list[bytes], version: int = -1
    ) -> tuple[Any, dict[str, bytes]]:
        response = self.stub.Infer(
            pb.InferRequest(
                model_name=model, model_version=version, meta_data=header, raw_input=raw_inputs
            )
        )
        outputs: dict[str, bytes] = {}
        if response.request_status.code == request_status_pb2.SUCCESS:
            outputs, _ = split_outputs(
                response.meta_data, list(response.raw_output), shm_outputs(header)
            )
        return response, outputs
