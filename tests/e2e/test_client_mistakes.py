"""Client mistakes get client statuses (issue 17, item 12), over HTTP (JSON and binary) and gRPC.

What Triton 2.51 answers, asked the same (``anyshape`` takes FP32 ``[-1, -1, -1]``, no batching):

- shape ``[0, 2**40, 2**40]`` (no elements, dimensions whose product overflows) for a model
  whose dims do not take it: 400 "unexpected shape"; repokit the same. For ``anyshape``, which
  takes it: Triton's python stub dies ("Stub process ... is not healthy", 500, the model broken
  for good); repokit answers 400 saying the shape cannot be represented.
- a NUL byte in a ``file:`` key of a load request: 500 "attempt to access non-existing object
  member" (its JSON reader stops at the NUL); repokit 400 naming the key.
- an unknown ``Content-Encoding``: 501 "Unsupported compression type"; repokit the same (a
  server without that feature, which is what 501 says).
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import requests

from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

HUGE = [0, 2**40, 2**40]
ANYSHAPE_CONFIG = """
name: "anyshape"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, -1, -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, -1, -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
TOO_LARGE = (
    "input 'INPUT0' for model 'anyshape' has shape [0,1099511627776,1099511627776], which "
    "cannot be represented even without elements: the product of its non-zero dimensions "
    "times the element size (4 bytes) must stay below 2^63"
)
IDENTITY_SHAPE = (
    "unexpected shape for input 'INPUT0' for model 'identity'. Expected [-1], got "
    "[0,1099511627776,1099511627776]"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("mistakes") / "models")
    (repo / "anyshape" / "1").mkdir(parents=True)
    (repo / "anyshape" / "config.pbtxt").write_text(textwrap.dedent(ANYSHAPE_CONFIG))
    (repo / "anyshape" / "1" / "model.py").write_text(
        (repo / "identity" / "1" / "model.py").read_text()
    )
    with running_server(
        repo, allow_grpc=True, model_control_mode="explicit", load_models=["*"]
    ) as thread:
        yield thread


def _json_infer(model: str, shape: list[int]) -> dict[str, object]:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": []}]}


def _binary_infer(base: str, model: str, shape: list[int]) -> requests.Response:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": shape,
                    "parameters": {"binary_data_size": 0},
                }
            ]
        }
    ).encode()
    return requests.post(
        f"{base}/v2/models/{model}/infer",
        data=head,
        headers={"Inference-Header-Content-Length": str(len(head))},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("model", "expected"), [("anyshape", TOO_LARGE), ("identity", IDENTITY_SHAPE)]
)
def test_huge_empty_shape_http(server: ServerThread, model: str, expected: str) -> None:
    base = server.endpoints.http
    for reply in (
        requests.post(f"{base}/v2/models/{model}/infer", json=_json_infer(model, HUGE), timeout=60),
        _binary_infer(base, model, HUGE),
    ):
        assert reply.status_code == 400, reply.text
        assert expected in reply.json()["error"]


@pytest.mark.parametrize(
    ("model", "expected"), [("anyshape", TOO_LARGE), ("identity", IDENTITY_SHAPE)]
)
def test_huge_empty_shape_grpc(server: ServerThread, model: str, expected: str) -> None:
    with grpc.insecure_channel(server.endpoints.grpc) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        contents = pb.ModelInferRequest(model_name=model)
        contents.inputs.add(name="INPUT0", datatype="FP32", shape=HUGE).contents.SetInParent()
        raw = pb.ModelInferRequest(model_name=model, raw_input_contents=[b""])
        raw.inputs.add(name="INPUT0", datatype="FP32", shape=HUGE)
        for request in (contents, raw):
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(request, timeout=60)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert expected in info.value.details()


def test_small_empty_shape_still_runs(server: ServerThread) -> None:
    base = server.endpoints.http
    reply = requests.post(
        f"{base}/v2/models/anyshape/infer", json=_json_infer("anyshape", [0, 3, 4]), timeout=60
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["shape"] == [0, 3, 4]


def _load_parameters() -> dict[str, str]:
    config = json.loads(json.dumps({"backend": "python", "max_batch_size": 0}))
    model = base64.b64encode(b"raise SystemExit('must not run')\n").decode()
    return {"config": json.dumps(config), "file:1/mo\u0000del.py": model}


def test_nul_in_file_key_is_400(server: ServerThread) -> None:
    base = server.endpoints.http
    reply = requests.post(
        f"{base}/v2/repository/models/newmodel/load",
        json={"parameters": _load_parameters()},
        timeout=60,
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"] == (
        "Invalid file parameter 'file:1/mo\\0del.py': a file path must not contain a NUL byte"
    )
    with grpc.insecure_channel(server.endpoints.grpc) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.RepositoryModelLoadRequest(model_name="newmodel")
        request.parameters["config"].string_param = _load_parameters()["config"]
        request.parameters["file:1/mo\0del.py"].bytes_param = b"x = 1\n"
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(request, timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "must not contain a NUL byte" in info.value.details()


@pytest.mark.parametrize("encoding", ["br", "zzz", "gzip, zzz"])
def test_unknown_content_encoding_is_triton_s_501(server: ServerThread, encoding: str) -> None:
    base = server.endpoints.http
    reply = requests.post(
        f"{base}/v2/models/identity/infer",
        data=json.dumps(_json_infer("identity", [1])).encode(),
        headers={"Content-Encoding": encoding},
        timeout=60,
    )
    assert (reply.status_code, reply.json()) == (501, {"error": "Unsupported compression type"})


def test_the_server_still_serves(server: ServerThread) -> None:
    reply = requests.post(
        f"{server.endpoints.http}/v2/models/identity/infer",
        json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]},
        timeout=60,
    )
    assert reply.status_code == 200
    assert np.asarray(reply.json()["outputs"][0]["data"]).tolist() == [1.0, 2.0]
