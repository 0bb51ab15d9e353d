"""Restricted API categories hold on the legacy v1 API too (issue 17, item 1): with
``--http-restricted-api`` / ``--grpc-restricted-protocol``, every v1 HTTP endpoint and v1 gRPC
RPC is refused exactly as its v2 counterpart (HTTP 403 ``{"error": "This API is restricted,
expecting header '<key>'"}``; gRPC UNAVAILABLE ``This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'``) unless it carries the header, and categories that are not
restricted stay open."""

from __future__ import annotations

import json
from collections.abc import Iterator
from multiprocessing import shared_memory

import grpc
import pytest
import requests
from google.protobuf import text_format

from repokit.frontends.runner import ServerHandle
from repokit.protocol.generated.v1 import grpc_service_pb2 as pb
from repokit.protocol.generated.v1 import grpc_service_pb2_grpc as pb_grpc
from repokit.protocol.generated.v1 import request_status_pb2 as rs
from tests.frontends.grpc.serving import make_repository, running_server

HTTP_MESSAGE = "This API is restricted, expecting header 'admin-key'"
GRPC_KEY = "triton-grpc-protocol-admin-key"
GRPC_MESSAGE = f"This protocol is restricted, expecting header '{GRPC_KEY}'"
ADMIN = {"admin-key": "secret"}
GRPC_ADMIN = ((GRPC_KEY, "secret"),)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repo = make_repository(tmp_path_factory.mktemp("v1r"), with_types_model=False)
    with running_server(
        repo,
        http=True,
        allow_client_shm=True,
        model_control_mode="explicit",
        load_models=["*"],
        http_restricted_api=["model-repository,shared-memory,statistics:admin-key=secret"],
        grpc_restricted_protocol=["model-repository,shared-memory,statistics:admin-key=secret"],
    ) as handle:
        yield handle


@pytest.fixture
def base(server: ServerHandle) -> str:
    return f"http://127.0.0.1:{server.http_port}"


@pytest.fixture
def stub(server: ServerHandle) -> Iterator[pb_grpc.GRPCServiceStub]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        yield pb_grpc.GRPCServiceStub(channel)


def _assert_http_refused(reply: requests.Response) -> None:
    assert reply.status_code == 403, reply.text
    assert reply.json() == {"error": HTTP_MESSAGE}
    status = text_format.Parse(reply.headers["NV-Status"], rs.RequestStatus())
    assert (status.code, status.msg) == (rs.UNAVAILABLE, HTTP_MESSAGE)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/modelcontrol/unload/identity"),
        ("POST", "/api/modelcontrol/load/identity"),
        ("GET", "/api/sharedmemorycontrol/status"),
        ("POST", "/api/sharedmemorycontrol/register/r/k/0/64"),
        ("POST", "/api/sharedmemorycontrol/unregister/r"),
        ("POST", "/api/sharedmemorycontrol/unregister/all"),
        ("GET", "/api/repository/index"),
        ("GET", "/api/status"),
        ("GET", "/api/status/identity"),
    ],
)
def test_v1_http_restricted_without_header(base: str, method: str, path: str) -> None:
    _assert_http_refused(requests.request(method, base + path, timeout=30))
    wrong = {"admin-key": "guess"}
    _assert_http_refused(requests.request(method, base + path, headers=wrong, timeout=30))


def test_v1_http_unload_refused_leaves_model_loaded(base: str) -> None:
    _assert_http_refused(requests.post(base + "/api/modelcontrol/unload/identity", timeout=30))
    assert requests.get(base + "/v2/models/identity/ready", timeout=30).status_code == 200


def test_v1_http_with_header_passes(base: str) -> None:
    reply = requests.get(base + "/api/status/identity", headers=ADMIN, timeout=30)
    assert reply.status_code == 200
    assert "SUCCESS" in reply.headers["NV-Status"]
    index = requests.get(base + "/api/repository/index", headers=ADMIN, timeout=30)
    assert index.status_code == 200
    load = requests.post(base + "/api/modelcontrol/load/identity", headers=ADMIN, timeout=30)
    assert load.status_code == 200
    shm = requests.get(base + "/api/sharedmemorycontrol/status", headers=ADMIN, timeout=30)
    assert shm.status_code == 200


def test_v1_http_open_categories_need_no_header(base: str) -> None:
    assert requests.get(base + "/api/health/live", timeout=30).status_code == 200
    # an unknown v1 path is still 404 (restriction applies to known endpoints only)
    assert requests.get(base + "/api/nothing", timeout=30).status_code == 404


def test_v2_and_v1_http_answers_agree(base: str) -> None:
    v2 = requests.post(base + "/v2/repository/models/identity/unload", timeout=30)
    v1 = requests.post(base + "/api/modelcontrol/unload/identity", timeout=30)
    assert (v1.status_code, v1.json()) == (v2.status_code, json.loads(v2.text))


def _grpc_refused(call: object, request: object) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call(request)  # type: ignore[operator]
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == GRPC_MESSAGE


def test_v1_grpc_restricted_without_header(stub: pb_grpc.GRPCServiceStub) -> None:
    unload = pb.ModelControlRequest(model_name="identity", type=pb.ModelControlRequest.UNLOAD)
    _grpc_refused(stub.ModelControl, unload)
    _grpc_refused(stub.Status, pb.StatusRequest(model_name="identity"))
    _grpc_refused(stub.Repository, pb.RepositoryRequest(index=pb.RepositoryRequest.Index()))
    status = pb.SharedMemoryControlRequest(status=pb.SharedMemoryControlRequest.Status())
    _grpc_refused(stub.SharedMemoryControl, status)
    block = shared_memory.SharedMemory(create=True, size=64)
    try:
        register = pb.SharedMemoryControlRequest(
            register=pb.SharedMemoryControlRequest.Register(
                name="r",
                byte_size=64,
                system_shared_memory=pb.SharedMemoryControlRequest.SystemSharedMemoryIdentifier(
                    shared_memory_key="/" + block.name, offset=0
                ),
            )
        )
        _grpc_refused(stub.SharedMemoryControl, register)
    finally:
        block.close()
        block.unlink()


def test_v1_grpc_with_header_passes(stub: pb_grpc.GRPCServiceStub) -> None:
    reply = stub.Status(pb.StatusRequest(model_name="identity"), metadata=GRPC_ADMIN)
    assert reply.request_status.code == rs.SUCCESS
    assert "identity" in reply.server_status.model_status
    load = pb.ModelControlRequest(model_name="identity", type=pb.ModelControlRequest.LOAD)
    assert stub.ModelControl(load, metadata=GRPC_ADMIN).request_status.code == rs.SUCCESS
    health = stub.Health(pb.HealthRequest(mode="live"))  # health is not restricted
    assert health.health


def test_v1_grpc_unload_refused_leaves_model_loaded(
    stub: pb_grpc.GRPCServiceStub, base: str
) -> None:
    unload = pb.ModelControlRequest(model_name="identity", type=pb.ModelControlRequest.UNLOAD)
    _grpc_refused(stub.ModelControl, unload)
    assert requests.get(base + "/v2/models/identity/ready", timeout=30).status_code == 200


def test_every_v1_endpoint_has_categories() -> None:
    """A v1 RPC or URL kind added later cannot slip past the restriction tables."""
    from repokit.frontends.v1 import http_api
    from repokit.frontends.v1.restricted import GRPC_CATEGORIES, HTTP_CATEGORIES, V1_SERVICE

    service = pb.DESCRIPTOR.services_by_name["GRPCService"]
    assert {V1_SERVICE + m.name for m in service.methods} == set(GRPC_CATEGORIES)
    kinds = http_api._API.pattern.split("(", 2)[1].split(")")[0].split("|")
    assert set(kinds) == set(HTTP_CATEGORIES)
