"""The generate extension against real Triton 2.51: the same python models
(``generate_models``) served by both, the same /generate and /generate_stream requests
(``generate_cases``) sent to both, status, content type and body (or SSE events) compared.
Where repokit deliberately differs, the difference is named here."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.differential.triton_reference import running_triton
from tests.e2e.generate_cases import CASES, answer, post
from tests.e2e.generate_models import MODELS, build_generate_repository
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_generate_repository(tmp_path_factory.mktemp("generate_diff") / "models")


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    workdir = tmp_path_factory.mktemp("triton_generate")
    with running_triton(repository, workdir, ready=tuple(MODELS)) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True) as srv:
        yield srv.endpoints


def _ask(endpoints: Endpoints, suffix: str, body: Any) -> tuple[int, str, Any]:
    address = urlsplit(endpoints.http)
    assert address.hostname is not None and address.port is not None
    return answer(*post(address.hostname, address.port, suffix, body))


# JSON values of the wrong kind: Triton answers 500 (TritonJson errors are INTERNAL), repokit
# 400 as for /infer (repokit/protocol/json_codec.py); the messages are the same
JSON_KIND_ERRORS = {"wrong_type", "parameters_not_object", "nested_wrong_type", "bytes_not_string"}


@pytest.mark.parametrize(("name", "suffix", "body"), CASES, ids=[c[0] for c in CASES])
def test_generate_matches_triton(
    triton: Endpoints, repokit: Endpoints, name: str, suffix: str, body: Any
) -> None:
    ours, theirs = _ask(repokit, suffix, body), _ask(triton, suffix, body)
    if name in JSON_KIND_ERRORS:
        assert (ours[0], theirs[0]) == (400, 500)
        ours, theirs = ours[1:], theirs[1:]
    assert ours == theirs


def test_generate_is_not_listed_as_an_extension(triton: Endpoints, repokit: Endpoints) -> None:
    """Triton 2.51 serves generate without listing it among its extensions."""
    lists = []
    for endpoints in (triton, repokit):
        address = urlsplit(endpoints.http)
        assert address.hostname is not None and address.port is not None
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
        try:
            connection.request("GET", "/v2")
            lists.append(json.loads(connection.getresponse().read())["extensions"])
        finally:
            connection.close()
    assert "generate" not in lists[0]
    assert "generate" not in lists[1]
