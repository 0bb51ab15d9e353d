"""A client that shrinks its shared-memory region after registering it gets a 400 / INVALID_ARGUMENT
naming the region, over HTTP and gRPC, and the server keeps serving (issue 17, item 2: this was
SIGBUS, and is in Triton 2.51 too). A symlink in /dev/shm is refused at registration (item 3)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

SHM = Path("/dev/shm")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("shm") / "models")
    with running_server(repo, allow_grpc=True, allow_client_shm=True) as thread:
        yield thread


@pytest.fixture
def region() -> Iterator[str]:
    """The key of a fresh 4096-byte file in /dev/shm (removed afterwards)."""
    key = f"repokit_test_{uuid.uuid4().hex[:12]}"
    path = SHM / key
    path.write_bytes(np.arange(1024, dtype=np.float32).tobytes())
    try:
        yield key
    finally:
        path.unlink(missing_ok=True)


def _inputs(module: object, region_name: str) -> list[object]:
    inputs = []
    for index, name in enumerate(("INPUT0", "INPUT1")):
        item = module.InferInput(name, [1, 16], "FP32")  # type: ignore[attr-defined]
        item.set_shared_memory(region_name, 64, offset=64 * index)
        inputs.append(item)
    return inputs


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_truncated_region_answers_400_and_server_lives(
    server: ServerThread, region: str, protocol: str
) -> None:
    client = server.client(protocol)
    module = httpclient if protocol == "http" else grpcclient
    name = f"trunc_{protocol}"
    client.register_system_shared_memory(name, "/" + region, 4096)
    try:
        result = client.infer("add_sub", _inputs(module, name))
        np.testing.assert_array_equal(
            result.as_numpy("OUTPUT0")[0], np.arange(16) + np.arange(16, 32)
        )
        os.truncate(SHM / region, 0)
        with pytest.raises(InferenceServerException) as info:
            client.infer("add_sub", _inputs(module, name))
        assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        assert (
            f"shared memory region '{name}' (key '/{region}') is 0 bytes now, too small for "
            "bytes [0, 64) of the request: the file was truncated after registration"
        ) in info.value.message()
        assert client.is_server_live() and client.is_model_ready("add_sub")
    finally:
        client.unregister_system_shared_memory(name)


def test_symlink_in_dev_shm_is_refused(server: ServerThread, region: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 4096)
    link = SHM / (region + "_link")
    link.symlink_to(secret)
    try:
        client = server.client("http")
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("link", "/" + link.name, 64)
        assert info.value.status() == "500"  # as Triton 2.51 (shm_open refuses symlinks)
        assert info.value.message() == f"Unable to open shared memory region: '/{link.name}'"
        assert client.get_system_shared_memory_status() == []
    finally:
        link.unlink()
