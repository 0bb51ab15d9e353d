"""Shared-memory endpoints against real Triton 2.51 (its release build, with GPU support, on
this machine without GPUs): register, unregister and status of unknown regions, requests
without a body or with a malformed one, over HTTP and gRPC; the same status and message.

Documented differences: where Triton answers 500 for a body that is not JSON or holds a
wrong JSON type (its TritonJson errors are INTERNAL), repokit answers 400 with the same
message; for malformed JSON only the status is compared (Triton quotes RapidJSON's parser,
repokit its own; an empty body reads the same on both).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.differential.triton_reference import running_triton
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton

HANDLE = base64.b64encode(bytes(64)).decode()  # the size of a cudaIpcMemHandle_t
SYSTEM = "/v2/systemsharedmemory"
CUDA = "/v2/cudasharedmemory"
MALFORMED = b"{bad"

# name -> (method, path, body: JSON document, raw bytes, or None)
HTTP_CASES: dict[str, tuple[str, str, Any]] = {
    "system_status": ("GET", f"{SYSTEM}/status", None),
    "system_status_unknown": ("GET", f"{SYSTEM}/region/zz/status", None),
    "system_unregister_all_without_body": ("POST", f"{SYSTEM}/unregister", None),
    "system_unregister_all_empty_object": ("POST", f"{SYSTEM}/unregister", {}),
    "system_unregister_all_malformed": ("POST", f"{SYSTEM}/unregister", MALFORMED),
    "system_unregister_unknown": ("POST", f"{SYSTEM}/region/zz/unregister", None),
    "system_register_without_body": ("POST", f"{SYSTEM}/region/r/register", None),
    "system_register_malformed": ("POST", f"{SYSTEM}/region/r/register", MALFORMED),
    "system_register_array": ("POST", f"{SYSTEM}/region/r/register", [1]),
    "system_register_empty_object": ("POST", f"{SYSTEM}/region/r/register", {}),
    "system_register_no_key": ("POST", f"{SYSTEM}/region/r/register", {"byte_size": 8}),
    "system_register_no_size": ("POST", f"{SYSTEM}/region/r/register", {"key": "/nope_zz"}),
    "system_register_key_number": (
        "POST",
        f"{SYSTEM}/region/r/register",
        {"key": 5, "byte_size": 8},
    ),
    "system_register_size_string": (
        "POST",
        f"{SYSTEM}/region/r/register",
        {"key": "/nope_zz", "byte_size": "8"},
    ),
    "system_register_negative_offset": (
        "POST",
        f"{SYSTEM}/region/r/register",
        {"key": "/nope_zz", "offset": -1, "byte_size": 8},
    ),
    "system_register_missing_key": (
        "POST",
        f"{SYSTEM}/region/r/register",
        {"key": "/nope_zz_repokit", "byte_size": 8},
    ),
    "system_register_without_region": ("POST", f"{SYSTEM}/register", {"key": "/k"}),
    "system_register_get": ("GET", f"{SYSTEM}/region/r/register", None),
    "system_status_post": ("POST", f"{SYSTEM}/status", None),
    "cuda_status": ("GET", f"{CUDA}/status", None),
    "cuda_status_unknown": ("GET", f"{CUDA}/region/zz/status", None),
    "cuda_unregister_all_without_body": ("POST", f"{CUDA}/unregister", None),
    "cuda_unregister_unknown": ("POST", f"{CUDA}/region/zz/unregister", None),
    "cuda_register_without_body": ("POST", f"{CUDA}/region/r/register", None),
    "cuda_register_malformed": ("POST", f"{CUDA}/region/r/register", MALFORMED),
    "cuda_register_empty_object": ("POST", f"{CUDA}/region/r/register", {}),
    "cuda_register_without_region": ("POST", f"{CUDA}/register", {}),
    "cuda_register_handle_not_object": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": HANDLE, "device_id": 0, "byte_size": 8},
    ),
    "cuda_register_b64_number": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": {"b64": 5}, "device_id": 0, "byte_size": 8},
    ),
    "cuda_register_no_size": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": {"b64": HANDLE}, "device_id": 0},
    ),
    "cuda_register_device_negative": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": {"b64": HANDLE}, "device_id": -1, "byte_size": 8},
    ),
    "cuda_register_short_handle": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8},
    ),
    "cuda_register_handle": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": {"b64": HANDLE}, "device_id": 0, "byte_size": 8},
    ),
    "cuda_register_handle_unpadded_noise": (
        "POST",
        f"{CUDA}/region/r/register",
        {"raw_handle": {"b64": "!" + HANDLE.rstrip("=")}, "device_id": 0, "byte_size": 8},
    ),
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shared_memory") / "models"
    root.mkdir()
    return root


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    with running_triton(repository, tmp_path_factory.mktemp("triton_shm")) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    # Triton 2.51 predates --allow-client-shm (client shared memory was always on)
    with running_server(repository, allow_grpc=True, allow_client_shm=True) as server:
        yield server.endpoints


def _http(base: str, method: str, path: str, body: Any) -> tuple[int, str]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    response = requests.request(method, base + path, data=data, timeout=30)
    return response.status_code, response.text


@pytest.mark.parametrize("case", HTTP_CASES, ids=list(HTTP_CASES))
def test_http(triton: Endpoints, repokit: Endpoints, case: str) -> None:
    method, path, body = HTTP_CASES[case]
    status, text = _http(triton.http, method, path, body)
    ours = _http(repokit.http, method, path, body)
    if status == 500 and ours != (status, text):
        # documented: a malformed or ill-typed document is a bad request
        assert ours[0] == 400
        if body != MALFORMED:
            assert ours[1] == text
        return
    assert ours == (status, text)


GRPC_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "system_status": ("SystemSharedMemoryStatus", {}),
    "system_status_unknown": ("SystemSharedMemoryStatus", {"name": "zz"}),
    "system_unregister_all": ("SystemSharedMemoryUnregister", {}),
    "system_unregister_unknown": ("SystemSharedMemoryUnregister", {"name": "zz"}),
    "system_register_empty": ("SystemSharedMemoryRegister", {}),
    "system_register_without_name": (
        "SystemSharedMemoryRegister",
        {"key": "/nope_zz", "byte_size": 8},
    ),
    "system_register_without_key": ("SystemSharedMemoryRegister", {"name": "r", "byte_size": 8}),
    "system_register_missing_key": (
        "SystemSharedMemoryRegister",
        {"name": "r", "key": "/nope_zz_repokit", "byte_size": 8},
    ),
    "cuda_status": ("CudaSharedMemoryStatus", {}),
    "cuda_status_unknown": ("CudaSharedMemoryStatus", {"name": "zz"}),
    "cuda_unregister_all": ("CudaSharedMemoryUnregister", {}),
    "cuda_unregister_unknown": ("CudaSharedMemoryUnregister", {"name": "zz"}),
    "cuda_register_empty": ("CudaSharedMemoryRegister", {}),
    "cuda_register": (
        "CudaSharedMemoryRegister",
        {"name": "r", "raw_handle": bytes(64), "device_id": 0, "byte_size": 8},
    ),
}


def _grpc(address: str, method: str, fields: dict[str, Any]) -> tuple[str, str]:
    request = getattr(service_pb2, f"{method}Request")(**fields)
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            answer = getattr(stub, method)(request, timeout=30)
        except grpc.RpcError as exc:
            return exc.code().name, str(exc.details())
    return "OK", str(answer)


@pytest.mark.parametrize("case", GRPC_CASES, ids=list(GRPC_CASES))
def test_grpc(triton: Endpoints, repokit: Endpoints, case: str) -> None:
    method, fields = GRPC_CASES[case]
    assert _grpc(repokit.grpc, method, fields) == _grpc(triton.grpc, method, fields)
