"""The trace extension through tritonclient (HTTP and gRPC) and raw HTTP requests: reading and
updating the global and per-model settings with Triton's fallback rules, and every refusal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from repokit.core.tracing.options import parse_trace_flags
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    tmp = tmp_path_factory.mktemp("trace")
    repo = copy_models(tmp / "repo", ("add_sub",))
    trace = parse_trace_flags([f"triton,file={tmp / 'global.log'}", "level=TIMESTAMPS", "rate=1"])
    with running_server(repo, allow_grpc=True, trace=trace) as srv:
        yield srv


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _initial(server: ServerThread) -> dict[str, Any]:
    trace_file = server.settings.core.trace.file
    return {
        "trace_file": trace_file,
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_mode": "triton",
    }


class Client:
    """tritonclient of either protocol, answers as plain dicts (gRPC's as JSON)."""

    def __init__(self, server: ServerThread, protocol: str) -> None:
        self.protocol = protocol
        self.inner: Any = server.client(protocol)

    def _plain(self, answer: Any) -> dict[str, Any]:
        if self.protocol == "http":
            return dict(answer)
        settings = json_format.MessageToDict(answer)["settings"]
        return {
            key: (v["value"] if key == "trace_level" else v["value"][0])
            for key, v in settings.items()
        }

    def get(self, model: str | None = None) -> dict[str, Any]:
        return self._plain(self.inner.get_trace_settings(model_name=model))

    def update(self, settings: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        return self._plain(self.inner.update_trace_settings(model_name=model, settings=settings))


@pytest.fixture
def client(server: ServerThread, protocol: str) -> Iterator[Client]:
    c = Client(server, protocol)
    yield c
    # back to the startup state for the next test
    clear = {"trace_rate": None, "trace_count": None, "trace_level": None, "log_frequency": None}
    c.update(clear, model="add_sub")
    c.update(clear)
    c.inner.close()


def test_server_metadata_lists_trace(server: ServerThread) -> None:
    extensions = server.client("http").get_server_metadata()["extensions"]
    assert extensions[-2:] == ["trace", "logging"]


def test_get_settings_global_and_model(server: ServerThread, client: Client) -> None:
    assert client.get() == _initial(server)
    assert client.get("add_sub") == _initial(server)


def test_global_update_reaches_models_that_follow_it(server: ServerThread, client: Client) -> None:
    expected = {**_initial(server), "trace_level": ["TIMESTAMPS", "TENSORS"]}
    assert client.update({"trace_level": ["TIMESTAMPS", "TENSORS"]}) == expected
    assert client.get("add_sub") == expected


def test_clear_falls_back_to_global_and_to_startup(server: ServerThread, client: Client) -> None:
    client.update({"trace_rate": "12", "log_frequency": "34"}, model="add_sub")
    client.update({"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]})
    startup = _initial(server)
    # clearing global settings returns them to their startup values
    cleared_global = {**startup, "trace_level": ["OFF"]}
    assert client.update({"trace_rate": None, "trace_count": None}) == cleared_global
    # the model keeps its own rate and log frequency, follows the global level and count
    assert client.get("add_sub") == {
        **cleared_global,
        "trace_rate": "12",
        "log_frequency": "34",
    }
    # clearing the model's rate: the global one again
    assert client.update({"trace_rate": None, "trace_level": None}, model="add_sub") == {
        **cleared_global,
        "log_frequency": "34",
    }
    assert client.get() == cleared_global


def test_model_update_leaves_global_alone(server: ServerThread, client: Client) -> None:
    model = client.update({"trace_count": "5", "trace_level": ["TENSORS"]}, model="add_sub")
    assert model == {**_initial(server), "trace_count": "5", "trace_level": ["TENSORS"]}
    assert client.get() == _initial(server)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"trace_file": "other.log"}, "trace file location can not be updated through network"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
        ({"trace_level": ["LOUD"]}, "Unknown trace level 'LOUD'"),
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
        ({"trace_rate": "12abc"}, "Unable to parse 'trace_rate', got: 12abc"),
        ({"trace_rate": "-1"}, "value is out of range [ 0, 4294967295 ], got: -1"),
        ({"trace_rate": "0"}, "Attempting to set invalid trace setting :sample rate must be"),
        ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got"),
        ({"trace_count": "99999999999"}, "value is out of range [ -1, 2147483647 ]"),
        ({"log_frequency": "often"}, "Unable to parse 'log_frequency', got: often"),
    ],
)
def test_refused_updates(
    server: ServerThread, client: Client, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.update(settings)
    assert message in str(info.value.message())
    expected = "UNIMPLEMENTED" if "trace_file" in settings else "INVALID_ARGUMENT"
    if client.protocol == "http":
        expected = "501" if "trace_file" in settings else "400"
    assert expected in str(info.value.status())
    assert client.get() == _initial(server)  # nothing changed


def test_unknown_model(client: Client) -> None:
    for call in (lambda: client.get("nope"), lambda: client.update({"trace_rate": "5"}, "nope")):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert info.value.message() == "Request for unknown model : nope"


# --- raw HTTP (curl-like) ------------------------------------------------------------------


def _post(server: ServerThread, body: bytes, path: str = "/v2/trace/setting") -> Any:
    return requests.post(f"http://{server.http_url}{path}", data=body, timeout=30)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"trace_file": null}', 501, "trace file location can not be updated"),
        (b'{"trace_level": "TIMESTAMPS"}', 400, "attempt to access JSON non-array as array"),
        (b'{"trace_level": [1]}', 400, "attempt to access JSON non-string as string"),
        (b'{"trace_rate": 5}', 400, "attempt to access JSON non-string as string"),
        (b"", 400, "failed to parse the request JSON buffer"),
        (b"nope", 400, "failed to parse the request JSON buffer"),
        (b"[1]", 400, "the trace setting request body must be a JSON object"),
    ],
)
def test_raw_http_refusals(server: ServerThread, body: bytes, status: int, message: str) -> None:
    response = _post(server, body)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert message in response.json()["error"]


def test_raw_http_null_clears_and_unknown_keys_are_ignored(server: ServerThread) -> None:
    base = f"http://{server.http_url}"
    try:
        answer = _post(
            server, b'{"trace_rate": "7", "colour": "blue"}', "/v2/models/add_sub/trace/setting"
        )
        assert (answer.status_code, answer.json()["trace_rate"]) == (200, "7")
        answer = _post(server, b'{"trace_level": []}', "/v2/models/add_sub/trace/setting")
        assert answer.json()["trace_level"] == ["TIMESTAMPS"]  # an empty array changes nothing
        answer = _post(server, b'{"trace_rate": null}', "/v2/models/add_sub/trace/setting")
        assert answer.json()["trace_rate"] == "1"
    finally:
        _post(server, b'{"trace_rate": null}', "/v2/models/add_sub/trace/setting")
    assert requests.get(f"{base}/v2/models/add_sub/trace/setting", timeout=30).status_code == 200
    assert requests.put(f"{base}/v2/trace/setting", timeout=30).status_code == 405
    versioned = requests.get(f"{base}/v2/models/add_sub/versions/1/trace/setting", timeout=30)
    assert versioned.status_code == 404  # as Triton: no per-version trace settings


def test_grpc_value_count_and_clear(server: ServerThread) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.TraceSettingRequest()
        request.settings["trace_rate"].value.extend(["1", "2"])
        with pytest.raises(grpc.RpcError) as info:
            stub.TraceSetting(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "expect only 1 value for 'trace_rate'"
        request = pb.TraceSettingRequest(model_name="add_sub")
        request.settings["trace_count"].value.append("3")
        assert list(stub.TraceSetting(request).settings["trace_count"].value) == ["3"]
        request = pb.TraceSettingRequest(model_name="add_sub")
        request.settings["trace_count"].SetInParent()  # no values: clear
        assert list(stub.TraceSetting(request).settings["trace_count"].value) == ["-1"]


def test_level_needs_a_trace_file(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "repo", ("add_sub",))
    with running_server(repo) as srv:  # no --trace-config: OFF, no file
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.get_trace_settings() == {
            "trace_level": ["OFF"],
            "trace_rate": "1000",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_file": "",
            "trace_mode": "triton",
        }
        with pytest.raises(InferenceServerException) as info:
            client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        assert info.value.message() == (
            "Attempting to set invalid trace setting :trace file name is not given"
        )
        # turning it off (or changing other settings while off) is fine
        assert client.update_trace_settings(settings={"trace_rate": "3"})["trace_rate"] == "3"
        client.close()


def test_grpc_client_unknown_model_status(server: ServerThread) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        client.get_trace_settings(model_name="nope")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    client.close()


def test_restricted_trace_api(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "repo", ("add_sub",))
    with running_server(
        repo,
        allow_grpc=True,
        http_restricted_api=["trace:admin-key=secret"],
        grpc_restricted_protocol=["trace:admin-key=secret"],
    ) as srv:
        base = f"http://{srv.http_url}"
        refused = requests.get(f"{base}/v2/trace/setting", timeout=30)
        assert refused.status_code == 403
        allowed = requests.get(
            f"{base}/v2/models/add_sub/trace/setting", headers={"admin-key": "secret"}, timeout=30
        )
        assert allowed.status_code == 200
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        with pytest.raises(InferenceServerException) as info:
            client.get_trace_settings()
        assert "UNAVAILABLE" in str(info.value.status())
        headers = {"triton-grpc-protocol-admin-key": "secret"}
        assert client.get_trace_settings(headers=headers).settings["trace_mode"].value == ["triton"]
        client.close()


def test_opentelemetry_packages_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from repokit.core.tracing.manager import TraceManager

    monkeypatch.delitem(sys.modules, "repokit.core.tracing.otel", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # import fails
    manager = TraceManager(parse_trace_flags(["mode=opentelemetry", "level=TIMESTAMPS"]))
    with pytest.raises(ValueError, match="install repokit with the 'tracing' extra"):
        manager.start()
