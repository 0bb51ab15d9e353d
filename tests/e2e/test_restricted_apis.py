"""``--http-restricted-api`` / ``--grpc-restricted-protocol`` on the v2 API, as Triton 2.51 does
them (server ``src/http_server.cc`` ``RespondIfRestricted``, ``src/grpc/grpc_server.cc``
``CommonCallData::ExecutePrecondition``): every endpoint and RPC of a restricted group needs
its header (HTTP ``<key>: <value>``, any case, else 403 ``{"error": "This API is restricted,
expecting header '<key>'"}``; gRPC metadata ``triton-grpc-protocol-<key>: <value>``, else
UNAVAILABLE ``This protocol is restricted, expecting header '...'``), and the groups that are
not restricted answer without one. Real servers on port 0 (one process and ``--workers 2``; the
native gRPC transport and grpc.aio) driven by the real tritonclient with ``headers=``."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

INFER = {"infer-key": "infer-value"}
ADMIN = {"admin-key": "admin-value"}
GROUPS_BY_KEY = {
    "infer-key": ("health", "metadata", "inference", "shared-memory"),
    "admin-key": ("model-config", "model-repository", "statistics", "trace", "logging"),
}
FLAGS = [
    f"{','.join(GROUPS_BY_KEY['infer-key'])}:infer-key=infer-value",
    f"{','.join(GROUPS_BY_KEY['admin-key'])}:admin-key=admin-value",
]
HEADER_OF = {group: key for key, groups in GROUPS_BY_KEY.items() for group in groups}
GRPC_PREFIX = "triton-grpc-protocol-"
MODEL = "add_sub"


@pytest.fixture(
    scope="module",
    params=[("native", 1), ("grpcio", 1), ("native", 2)],
    ids=["native", "grpcio", "workers2"],
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    transport, workers = request.param
    repo = copy_models(tmp_path_factory.mktemp("restricted") / "models", (MODEL,))
    with running_server(
        repo,
        allow_grpc=True,
        allow_client_shm=True,
        grpc_transport=transport,
        workers=workers,
        http_restricted_api=FLAGS,
        grpc_restricted_protocol=FLAGS,
    ) as srv:
        yield srv


def _headers(group: str, value: str | None = None) -> dict[str, str]:
    key = HEADER_OF[group]
    return {key: value if value is not None else (INFER if key == "infer-key" else ADMIN)[key]}


def _grpc_headers(group: str, value: str | None = None) -> dict[str, str]:
    return {GRPC_PREFIX + k: v for k, v in _headers(group, value).items()}


def _inputs(module: Any) -> list[Any]:
    inputs = [module.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    return inputs


# --- HTTP: every endpoint of each group, raw (status, body, content type) -------------------
HTTP_ENDPOINTS: list[tuple[str, str, str, str | None]] = [
    ("health", "GET", "/v2/health/live", None),
    ("health", "GET", "/v2/health/ready", None),
    ("health", "GET", f"/v2/models/{MODEL}/ready", None),
    ("metadata", "GET", "/v2", None),
    ("metadata", "GET", f"/v2/models/{MODEL}", None),
    ("inference", "POST", f"/v2/models/{MODEL}/infer", None),
    ("inference", "POST", f"/v2/models/{MODEL}/generate", "{}"),
    ("inference", "POST", f"/v2/models/{MODEL}/generate_stream", "{}"),
    ("shared-memory", "GET", "/v2/systemsharedmemory/status", None),
    ("shared-memory", "POST", "/v2/systemsharedmemory/unregister", None),
    ("shared-memory", "GET", "/v2/cudasharedmemory/status", None),
    ("model-config", "GET", f"/v2/models/{MODEL}/config", None),
    ("model-repository", "POST", "/v2/repository/index", None),
    ("model-repository", "POST", f"/v2/repository/models/{MODEL}/load", None),
    ("statistics", "GET", f"/v2/models/{MODEL}/stats", None),
    ("statistics", "GET", "/v2/models/stats", None),
    ("trace", "GET", "/v2/trace/setting", None),
    ("trace", "GET", f"/v2/models/{MODEL}/trace/setting", None),
    ("logging", "GET", "/v2/logging", None),
]


@pytest.mark.parametrize(("group", "method", "path", "body"), HTTP_ENDPOINTS)
def test_http_endpoint_needs_its_groups_header(
    server: ServerThread, group: str, method: str, path: str, body: str | None
) -> None:
    url = f"http://{server.http_url}{path}"
    key = HEADER_OF[group]
    refused = [
        {},  # no header
        _headers(group, "wrong-value"),
        _headers(group, _headers(group)[key].upper()),  # values are compared exactly
        {"admin-key" if key == "infer-key" else "infer-key": "x", "test": "1"},  # another key
    ]
    for headers in refused:
        reply = requests.request(method, url, data=body, headers=headers, timeout=30)
        assert reply.status_code == 403, (headers, reply.text)
        assert reply.json() == {"error": f"This API is restricted, expecting header '{key}'"}
        assert reply.headers["content-type"] == "text/plain"
    # the right header (names in any case): the endpoint's own answer, whatever it is
    for headers in (_headers(group), {key.upper(): _headers(group)[key]}):
        reply = requests.request(method, url, data=body, headers=headers, timeout=30)
        assert reply.status_code != 403, (path, reply.text)
        assert "restricted" not in reply.text


def test_http_restriction_comes_before_the_method_check(server: ServerThread) -> None:
    # Triton's handlers check the restriction first: a wrong method without the header is 403
    reply = requests.delete(f"http://{server.http_url}/v2/health/live", timeout=30)
    assert reply.status_code == 403
    reply = requests.delete(
        f"http://{server.http_url}/v2/health/live", headers=_headers("health"), timeout=30
    )
    assert reply.status_code == 405


def test_http_unknown_paths_are_not_restricted(server: ServerThread) -> None:
    reply = requests.get(f"http://{server.http_url}/v2/nowhere", timeout=30)
    assert reply.status_code == 404


# --- HTTP through tritonclient ---------------------------------------------------------------
HttpCall = Callable[[httpclient.InferenceServerClient, dict[str, str]], Any]
HTTP_CALLS: list[tuple[str, HttpCall]] = [
    ("metadata", lambda c, h: c.get_server_metadata(headers=h)),
    ("metadata", lambda c, h: c.get_model_metadata(MODEL, headers=h)),
    ("inference", lambda c, h: c.infer(MODEL, _inputs(httpclient), headers=h)),
    ("shared-memory", lambda c, h: c.get_system_shared_memory_status(headers=h)),
    ("shared-memory", lambda c, h: c.unregister_system_shared_memory(headers=h)),
    ("model-config", lambda c, h: c.get_model_config(MODEL, headers=h)),
    ("model-repository", lambda c, h: c.get_model_repository_index(headers=h)),
    ("statistics", lambda c, h: c.get_inference_statistics(MODEL, headers=h)),
    ("trace", lambda c, h: c.get_trace_settings(headers=h)),
    ("logging", lambda c, h: c.get_log_settings(headers=h)),
]


@pytest.mark.parametrize(("group", "call"), HTTP_CALLS)
def test_tritonclient_http(server: ServerThread, group: str, call: HttpCall) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        key = HEADER_OF[group]
        with pytest.raises(InferenceServerException) as caught:
            call(client, {"test": "1"})
        assert caught.value.status() == "403"
        assert caught.value.message() == f"This API is restricted, expecting header '{key}'"
        call(client, _headers(group))
    finally:
        client.close()


def test_tritonclient_http_health_and_model_control(server: ServerThread) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert not client.is_server_live() and not client.is_model_ready(MODEL)
        assert client.is_server_live(headers=INFER) and client.is_server_ready(headers=INFER)
        assert client.is_model_ready(MODEL, headers=INFER)
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            client.unload_model(MODEL, headers=INFER)
        # through the restriction: the real answer of a server in model control mode none
        with pytest.raises(InferenceServerException, match="explicit model load / unload"):
            client.unload_model(MODEL, headers=ADMIN)
    finally:
        client.close()


# --- gRPC through tritonclient ---------------------------------------------------------------
GrpcCall = Callable[[grpcclient.InferenceServerClient, dict[str, str]], Any]
GRPC_CALLS: list[tuple[str, GrpcCall]] = [
    ("health", lambda c, h: c.is_server_live(headers=h)),
    ("health", lambda c, h: c.is_server_ready(headers=h)),
    ("health", lambda c, h: c.is_model_ready(MODEL, headers=h)),
    ("metadata", lambda c, h: c.get_server_metadata(headers=h)),
    ("metadata", lambda c, h: c.get_model_metadata(MODEL, headers=h)),
    ("inference", lambda c, h: c.infer(MODEL, _inputs(grpcclient), headers=h)),
    ("shared-memory", lambda c, h: c.get_system_shared_memory_status(headers=h)),
    ("shared-memory", lambda c, h: c.unregister_system_shared_memory(headers=h)),
    ("shared-memory", lambda c, h: c.get_cuda_shared_memory_status(headers=h)),
    ("shared-memory", lambda c, h: c.unregister_cuda_shared_memory(headers=h)),
    ("model-config", lambda c, h: c.get_model_config(MODEL, headers=h)),
    ("model-repository", lambda c, h: c.get_model_repository_index(headers=h)),
    ("statistics", lambda c, h: c.get_inference_statistics(MODEL, headers=h)),
    ("trace", lambda c, h: c.get_trace_settings(headers=h)),
    ("logging", lambda c, h: c.get_log_settings(headers=h)),
]


@pytest.mark.parametrize(("group", "call"), GRPC_CALLS)
def test_tritonclient_grpc(server: ServerThread, group: str, call: GrpcCall) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        key = GRPC_PREFIX + HEADER_OF[group]
        for headers in ({"test": "1"}, _grpc_headers(group, "wrong"), _headers(group)):
            # the HTTP header without the prefix does not count on gRPC
            with pytest.raises(InferenceServerException) as caught:
                call(client, headers)
            assert caught.value.status() == "StatusCode.UNAVAILABLE"
            assert caught.value.message() == (
                f"This protocol is restricted, expecting header '{key}'"
            )
        call(client, _grpc_headers(group))
    finally:
        client.close()


def test_tritonclient_grpc_model_control(server: ServerThread) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            client.unload_model(MODEL, headers=_grpc_headers("inference"))
        with pytest.raises(InferenceServerException, match="explicit model load / unload"):
            client.unload_model(MODEL, headers=_grpc_headers("model-repository"))
    finally:
        client.close()


def test_grpc_stream_without_the_header_ends_unavailable(server: ServerThread) -> None:
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(lambda result, error: results.put(error or result), headers={"t": "1"})
        error = results.get(timeout=30)  # the stream ends before any request is read
        assert isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert error.message() == (
            "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
        )
        client.stop_stream()
        client.start_stream(
            lambda result, error: results.put(error or result),
            headers=_grpc_headers("inference"),
        )
        client.async_stream_infer(MODEL, _inputs(grpcclient))
        answer = results.get(timeout=30)
        assert not isinstance(answer, InferenceServerException), answer
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), np.full((1, 16), 2.0))
        client.stop_stream()
    finally:
        client.close()


# --- what is not restricted stays open --------------------------------------------------------
@pytest.fixture(scope="module")
def partly(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("partly") / "models", (MODEL,))
    flags = ["model-repository:admin-key=admin-value", "inference,metadata:infer-key=infer-value"]
    with running_server(
        repo,
        allow_grpc=True,
        allow_client_shm=True,
        http_restricted_api=flags,
        grpc_restricted_protocol=flags,
    ) as srv:
        yield srv


def test_unrestricted_groups_answer_without_headers(partly: ServerThread) -> None:
    http = httpclient.InferenceServerClient(partly.http_url)
    grpc = grpcclient.InferenceServerClient(partly.grpc_url)
    try:
        for client in (http, grpc):
            assert client.is_server_live() and client.is_model_ready(MODEL)
            assert client.get_model_config(MODEL)
            assert client.get_inference_statistics(MODEL)
            assert client.get_inference_statistics(MODEL, headers={"infer-key": "infer-value"})
            assert client.get_trace_settings() and client.get_log_settings()
            client.get_system_shared_memory_status()
        reply = requests.get(f"http://{partly.http_url}/v2", timeout=30)
        assert reply.status_code == 403
        body = json.loads(reply.text)
        assert body == {"error": "This API is restricted, expecting header 'infer-key'"}
    finally:
        http.close()
        grpc.close()
