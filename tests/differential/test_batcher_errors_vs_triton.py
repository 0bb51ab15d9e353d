"""Bad requests to a dynamically batched python model (whose plain requests take the batcher's
wire lane) and to the same model without dynamic batching, against real Triton 2.51: the same
status code and the same message, over HTTP JSON, HTTP binary and gRPC.

One documented difference stays: where Triton answers 500 for ill-typed JSON (its TritonJson
errors are INTERNAL), repokit answers 400 with the same message (the KServe v2 spec's code).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import orjson
import pytest
import requests
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.differential.triton_reference import running_triton
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton

_NUMERIC = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 2 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2 ] }}
]
{batching}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
_NUMERIC_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a * 2), pb_utils.Tensor("OUTPUT1", b + 1)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""
_STRINGS = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ 2 ] }} ]
{batching}
"""
_STRINGS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy())]
            )
            for r in requests
        ]
"""
BATCHING = "dynamic_batching { }"
NUMERIC_MODELS = ("dyn", "plain")  # with and without dynamic batching
STRING_MODELS = ("dyn_text", "plain_text")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batcher_errors") / "models"
    for name, config, model in (
        ("dyn", _NUMERIC, _NUMERIC_MODEL),
        ("plain", _NUMERIC, _NUMERIC_MODEL),
        ("dyn_text", _STRINGS, _STRINGS_MODEL),
        ("plain_text", _STRINGS, _STRINGS_MODEL),
    ):
        (root / name / "1").mkdir(parents=True)
        batching = BATCHING if name.startswith("dyn") else ""
        (root / name / "config.pbtxt").write_text(config.format(name=name, batching=batching))
        (root / name / "1" / "model.py").write_text(model)
    return root


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    workdir = tmp_path_factory.mktemp("triton_batcher_errors")
    ready = NUMERIC_MODELS + STRING_MODELS
    with running_triton(repository, workdir, ready=ready) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True) as server:
        yield server.endpoints


# ------------------------------------------------------------------------------- HTTP JSON


def _in0(shape: tuple[Any, ...] = (1, 4), data: Any = None, **fields: Any) -> dict[str, Any]:
    item = {"name": "INPUT0", "shape": list(shape), "datatype": "FP32"}
    item["data"] = [1.0] * 4 if data is None else data
    item.update(fields)
    return {k: v for k, v in item.items() if v is not ...}


def _in1(shape: tuple[Any, ...] = (1, 2), data: Any = None, **fields: Any) -> dict[str, Any]:
    item = {"name": "INPUT1", "shape": list(shape), "datatype": "INT32"}
    item["data"] = [1, 2] if data is None else data
    item.update(fields)
    return item


JSON_CASES: dict[str, dict[str, Any]] = {
    "ok": {"inputs": [_in0(), _in1()]},
    "ok_nested": {"inputs": [_in0(data=[[1, 2, 3, 4]]), _in1(data=[[1, 2]])]},
    "unknown_input": {"inputs": [_in0(), _in1(), _in0(name="NOPE")]},
    "missing_input": {"inputs": [_in0()]},
    "renamed_input": {"inputs": [_in0(), _in1(name="INPUTX")]},
    "two_unknown": {"inputs": [_in0(name="A"), _in1(name="B")]},
    "duplicate_input": {"inputs": [_in0(), _in0(), _in1()]},
    "wrong_datatype": {"inputs": [_in0(datatype="INT64", data=[1] * 4), _in1()]},
    "both_datatypes_wrong": {"inputs": [_in1(datatype="INT64"), _in0(datatype="FP64")]},
    "unknown_datatype": {"inputs": [_in0(datatype="FLOAT"), _in1()]},
    "wrong_shape": {"inputs": [_in0(shape=(1, 5), data=[1.0] * 5), _in1()]},
    "both_shapes_wrong": {"inputs": [_in0(shape=(1, 5), data=[1.0] * 5), _in1((1, 3), [1] * 3)]},
    "extra_dim": {"inputs": [_in0(shape=(1, 4, 1)), _in1()]},
    "no_batch_dim": {"inputs": [_in0(shape=(4,)), _in1(shape=(2,))]},
    "batch_over_max": {"inputs": [_in0((5, 4), [1.0] * 20), _in1((5, 2), [1] * 10)]},
    "batch_sizes_differ": {"inputs": [_in0((2, 4), [1.0] * 8), _in1()]},
    "empty_batch": {"inputs": [_in0((0, 4), []), _in1((0, 2), [])]},
    "negative_dim": {"inputs": [_in0(shape=(-1, 4)), _in1()]},
    "too_few_elements": {"inputs": [_in0(data=[1.0] * 3), _in1()]},
    "too_many_elements": {"inputs": [_in0(data=[1.0] * 5), _in1()]},
    "too_few_ints": {"inputs": [_in0(), _in1(data=[1])]},
    "string_element": {"inputs": [_in0(data=["a", 1, 2, 3]), _in1()]},
    "bool_element": {"inputs": [_in0(data=[True, 1, 2, 3]), _in1()]},
    "null_element": {"inputs": [_in0(data=[None, 1, 2, 3]), _in1()]},
    "wrong_element_before_shortage": {"inputs": [_in0(data=[1, "x"]), _in1()]},
    "wrong_element_after_overrun": {"inputs": [_in0(data=[1, 2, 3, 4, "x"]), _in1()]},
    "data_scalar": {"inputs": [_in0(data=1.0), _in1()]},
    "data_object": {"inputs": [_in0(data={"a": 1}), _in1()]},
    "float_for_int": {"inputs": [_in0(), _in1(data=[1.5, 2])]},
    "no_data": {"inputs": [_in0(data=...), _in1()]},
    "shape_strings": {"inputs": [_in0(shape=("1", "4")), _in1()]},
    "name_number": {"inputs": [_in0(name=5), _in1()]},
    "no_name": {"inputs": [_in0(name=...), _in1()]},
    "no_datatype": {"inputs": [_in0(datatype=...), _in1()]},
    "unknown_output": {"inputs": [_in0(), _in1()], "outputs": [{"name": "NOPE"}]},
    "output_binary_not_bool": {
        "inputs": [_in0(), _in1()],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": 1}}],
    },
    "output_without_name": {"inputs": [_in0(), _in1()], "outputs": [{}]},
    "id_number": {"id": 5, "inputs": [_in0(), _in1()]},
    "inputs_object": {"inputs": {"a": 1}},
    "inputs_empty": {"inputs": []},
    "binary_data_output_string": {
        "inputs": [_in0(), _in1()],
        "parameters": {"binary_data_output": "yes"},
    },
    "timeout_string": {"inputs": [_in0(), _in1()], "parameters": {"timeout": "x"}},
    "unknown_shm_region": {
        "inputs": [
            _in0(
                data=...,
                parameters={"shared_memory_region": "zz", "shared_memory_byte_size": 16},
            ),
            _in1(),
        ]
    },
}


def _text(shape: tuple[int, ...] = (1, 2), data: Any = None, **fields: Any) -> dict[str, Any]:
    item = {"name": "TEXT", "shape": list(shape), "datatype": "BYTES"}
    item["data"] = ["a", "bc"] if data is None else data
    item.update(fields)
    return item


TEXT_JSON_CASES: dict[str, dict[str, Any]] = {
    "ok": {"inputs": [_text()]},
    "too_few_strings": {"inputs": [_text(data=["a"])]},
    "too_many_strings": {"inputs": [_text(data=["a", "b", "c"])]},
    "number_among_strings": {"inputs": [_text(data=["a", 1])]},
    "number_and_too_few": {"inputs": [_text(data=[1])]},
    "nested_strings": {"inputs": [_text(data=[["a", "b"]])]},
    "empty_batch": {"inputs": [_text((0, 2), [])]},
    "wrong_datatype": {"inputs": [_text(datatype="INT32", data=[1, 2])]},
}


def _http(base: str, model: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
    response = requests.post(
        f"{base}/v2/models/{model}/infer", data=body, headers=headers or {}, timeout=60
    )
    if response.status_code == 200:
        return 200, None
    return response.status_code, response.json().get("error")


def _same(theirs: tuple[Any, Any], ours: tuple[Any, Any]) -> None:
    status, message = theirs
    if status == 500 and str(message).startswith("Unable to parse"):
        status = 400  # documented: ill-typed JSON is a bad request in repokit
    assert ours == (status, message)


@pytest.mark.parametrize("model", NUMERIC_MODELS)
@pytest.mark.parametrize("case", JSON_CASES, ids=list(JSON_CASES))
def test_json_errors(triton: Endpoints, repokit: Endpoints, model: str, case: str) -> None:
    body = orjson.dumps(JSON_CASES[case])
    _same(_http(triton.http, model, body), _http(repokit.http, model, body))


@pytest.mark.parametrize("model", STRING_MODELS)
@pytest.mark.parametrize("case", TEXT_JSON_CASES, ids=list(TEXT_JSON_CASES))
def test_json_string_errors(triton: Endpoints, repokit: Endpoints, model: str, case: str) -> None:
    body = orjson.dumps(TEXT_JSON_CASES[case])
    _same(_http(triton.http, model, body), _http(repokit.http, model, body))


# ----------------------------------------------------------------------------- HTTP binary

A4 = np.arange(4, dtype=np.float32).tobytes()
B2 = np.arange(2, dtype=np.int32).tobytes()


def _blob(name: str, shape: tuple[int, ...], datatype: str, size: Any) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(shape),
        "datatype": datatype,
        "parameters": {"binary_data_size": size},
    }


def _pair(size0: Any = 16, size1: Any = 8, batch: int = 1) -> list[dict[str, Any]]:
    return [
        _blob("INPUT0", (batch, 4), "FP32", size0),
        _blob("INPUT1", (batch, 2), "INT32", size1),
    ]


BINARY_CASES: dict[str, tuple[dict[str, Any], bytes]] = {
    "ok": ({"inputs": _pair()}, A4 + B2),
    "size_too_small": ({"inputs": _pair(12)}, A4[:12] + B2),
    "size_too_large": ({"inputs": _pair(20)}, A4 + b"xxxx" + B2),
    "size_beyond_body": ({"inputs": _pair(16, 80)}, A4 + B2),
    "trailing_bytes": ({"inputs": _pair()}, A4 + B2 + b"zz"),
    "empty_batch": ({"inputs": _pair(0, 0, batch=0)}, b""),
    "batch_over_max": ({"inputs": _pair(80, 40, batch=5)}, A4 * 5 + B2 * 5),
    "wrong_datatype": (
        {"inputs": [_blob("INPUT0", (1, 4), "INT32", 16), _blob("INPUT1", (1, 2), "INT32", 8)]},
        A4 + B2,
    ),
    "unknown_input": (
        {"inputs": [*_pair(), _blob("NOPE", (1, 2), "INT32", 8)]},
        A4 + B2 + B2,
    ),
    "missing_input": ({"inputs": _pair()[:1]}, A4),
    "wrong_shape": (
        {"inputs": [_blob("INPUT0", (1, 2), "FP32", 8), _blob("INPUT1", (1, 2), "INT32", 8)]},
        A4[:8] + B2,
    ),
    "data_and_binary": (
        {"inputs": [{**_pair()[0], "data": [1, 2, 3, 4]}, _pair()[1]]},
        A4 + B2,
    ),
    "negative_size": ({"inputs": _pair(-16)}, A4 + B2),
    "size_string": ({"inputs": _pair("16")}, A4 + B2),
    "unknown_binary_output": (
        {"inputs": _pair(), "outputs": [{"name": "NOPE", "parameters": {"binary_data": True}}]},
        A4 + B2,
    ),
}


def _strings(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


TEXT_BINARY_CASES: dict[str, bytes] = {
    "ok": _strings(b"a", b"bc"),
    "too_few": _strings(b"a"),
    "too_many": _strings(b"a", b"b", b"c"),
    "length_cut": _strings(b"a") + b"\x05\x00",
    "string_cut": _strings(b"a") + struct.pack("<I", 10) + b"abc",
}


def _binary(base: str, model: str, doc: dict[str, Any], blob: bytes) -> Any:
    head = orjson.dumps(doc)
    headers = {"Inference-Header-Content-Length": str(len(head))}
    return _http(base, model, head + blob, headers)


@pytest.mark.parametrize("model", NUMERIC_MODELS)
@pytest.mark.parametrize("case", BINARY_CASES, ids=list(BINARY_CASES))
def test_binary_errors(triton: Endpoints, repokit: Endpoints, model: str, case: str) -> None:
    doc, blob = BINARY_CASES[case]
    _same(_binary(triton.http, model, doc, blob), _binary(repokit.http, model, doc, blob))


@pytest.mark.parametrize("model", STRING_MODELS)
@pytest.mark.parametrize("case", TEXT_BINARY_CASES, ids=list(TEXT_BINARY_CASES))
def test_binary_string_errors(triton: Endpoints, repokit: Endpoints, model: str, case: str) -> None:
    blob = TEXT_BINARY_CASES[case]
    doc = {"inputs": [_blob("TEXT", (1, 2), "BYTES", len(blob))]}
    _same(_binary(triton.http, model, doc, blob), _binary(repokit.http, model, doc, blob))


# ------------------------------------------------------------------------------------ gRPC

Tensor = service_pb2.ModelInferRequest.InferInputTensor


def _tensor(name: str, shape: tuple[int, ...], datatype: str, **contents: list[Any]) -> Any:
    tensor = Tensor(name=name, datatype=datatype, shape=list(shape))
    for field_name, values in contents.items():
        getattr(tensor.contents, field_name).extend(values)
    return tensor


def _request(
    inputs: list[Any], raw: list[bytes] | None = None, outputs: tuple[str, ...] = ()
) -> Any:
    request = service_pb2.ModelInferRequest(inputs=inputs, raw_input_contents=raw or [])
    for name in outputs:
        request.outputs.add(name=name)
    return request


def _g0(shape: tuple[int, ...] = (1, 4), datatype: str = "FP32", **contents: list[Any]) -> Any:
    return _tensor("INPUT0", shape, datatype, **contents)


def _g1(shape: tuple[int, ...] = (1, 2), datatype: str = "INT32", **contents: list[Any]) -> Any:
    return _tensor("INPUT1", shape, datatype, **contents)


GRPC_CASES: dict[str, Any] = {
    "ok": _request([_g0(), _g1()], [A4, B2]),
    "ok_typed": _request([_g0(fp32_contents=[1, 2, 3, 4]), _g1(int_contents=[1, 2])]),
    "unknown_input": _request([_g0(), _g1(), _tensor("NOPE", (1, 2), "INT32")], [A4, B2, B2]),
    "missing_input": _request([_g0()], [A4]),
    "duplicate_input": _request([_g0(), _g0(), _g1()], [A4, A4, B2]),
    "wrong_datatype": _request([_g0(datatype="INT32"), _g1()], [A4, B2]),
    "unknown_datatype": _request([_g0(datatype="FLOAT"), _g1()], [A4, B2]),
    "wrong_shape": _request([_g0(shape=(1, 2)), _g1()], [A4[:8], B2]),
    "no_batch_dim": _request([_g0(shape=(4,)), _g1(shape=(2,))], [A4, B2]),
    "batch_over_max": _request([_g0(shape=(5, 4)), _g1(shape=(5, 2))], [A4 * 5, B2 * 5]),
    "batch_sizes_differ": _request([_g0(shape=(2, 4)), _g1()], [A4 * 2, B2]),
    "empty_batch": _request([_g0(shape=(0, 4)), _g1(shape=(0, 2))], [b"", b""]),
    "raw_too_short": _request([_g0(), _g1()], [A4[:12], B2]),
    "raw_too_long": _request([_g0(), _g1()], [A4 + b"xxxx", B2]),
    "fewer_raw_than_inputs": _request([_g0(), _g1()], [A4]),
    "more_raw_than_inputs": _request([_g0(), _g1()], [A4, B2, B2]),
    "typed_too_short": _request([_g0(fp32_contents=[1, 2, 3]), _g1(int_contents=[1, 2])]),
    "typed_wrong_field": _request([_g0(int_contents=[1, 2, 3, 4]), _g1(int_contents=[1, 2])]),
    "typed_and_raw": _request([_g0(fp32_contents=[1, 2, 3, 4]), _g1()], [B2]),
    "typed_beside_raw": _request([_g0(fp32_contents=[1, 2, 3, 4]), _g1()], [A4, B2]),
    "no_data": _request([_g0(), _g1()]),
    "unknown_output": _request([_g0(), _g1()], [A4, B2], outputs=("NOPE",)),
    "negative_dim": _request([_g0(shape=(-1, 4)), _g1()], [A4, B2]),
    "no_inputs": _request([]),
}

TEXT_GRPC_CASES: dict[str, Any] = {
    "ok": _request([_tensor("TEXT", (1, 2), "BYTES")], [_strings(b"a", b"bc")]),
    "too_few": _request([_tensor("TEXT", (1, 2), "BYTES")], [_strings(b"a")]),
    "too_many": _request([_tensor("TEXT", (1, 2), "BYTES")], [_strings(b"a", b"b", b"c")]),
    "string_cut": _request(
        [_tensor("TEXT", (1, 2), "BYTES")], [_strings(b"a") + struct.pack("<I", 10) + b"abc"]
    ),
    "typed_too_few": _request([_tensor("TEXT", (1, 2), "BYTES", bytes_contents=[b"a"])]),
    "typed_too_many": _request(
        [_tensor("TEXT", (1, 2), "BYTES", bytes_contents=[b"a", b"b", b"c"])]
    ),
    "empty_batch": _request([_tensor("TEXT", (0, 2), "BYTES")], [b""]),
}


def _grpc(address: str, model: str, template: Any) -> tuple[str, str]:
    request = service_pb2.ModelInferRequest()
    request.CopyFrom(template)
    request.model_name = model
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.ModelInfer(request, timeout=60)
        except grpc.RpcError as exc:
            return exc.code().name, str(exc.details())
    return "OK", ""


@pytest.mark.parametrize("model", NUMERIC_MODELS)
@pytest.mark.parametrize("case", GRPC_CASES, ids=list(GRPC_CASES))
def test_grpc_errors(triton: Endpoints, repokit: Endpoints, model: str, case: str) -> None:
    request = GRPC_CASES[case]
    assert _grpc(repokit.grpc, model, request) == _grpc(triton.grpc, model, request)


@pytest.mark.parametrize("model", STRING_MODELS)
@pytest.mark.parametrize("case", TEXT_GRPC_CASES, ids=list(TEXT_GRPC_CASES))
def test_grpc_string_errors(triton: Endpoints, repokit: Endpoints, model: str, case: str) -> None:
    request = TEXT_GRPC_CASES[case]
    assert _grpc(repokit.grpc, model, request) == _grpc(triton.grpc, model, request)


# --------------------------------------------------------------------- in the same batches


def test_bad_requests_beside_good_ones_in_batches(triton: Endpoints, repokit: Endpoints) -> None:
    """Good and bad requests sent together to the batched model: every answer is the one
    Triton gives the same request on its own (a bad request costs its neighbours nothing)."""
    cases = ["ok", "unknown_input", "batch_sizes_differ", "ok_nested", "too_few_elements"]
    cases += ["wrong_shape", "empty_batch", "unknown_output", "float_for_int"]
    bodies = [orjson.dumps(JSON_CASES[case]) for case in cases]
    expected = [_http(triton.http, "dyn", body) for body in bodies]
    grpc_cases = ["ok", "raw_too_short", "ok_typed", "missing_input", "typed_wrong_field"]
    grpc_expected = [_grpc(triton.grpc, "dyn", GRPC_CASES[case]) for case in grpc_cases]
    rounds = 8
    with ThreadPoolExecutor(max_workers=16) as pool:
        http_answers = [
            pool.submit(_http, repokit.http, "dyn", body) for _ in range(rounds) for body in bodies
        ]
        grpc_answers = [
            pool.submit(_grpc, repokit.grpc, "dyn", GRPC_CASES[case])
            for _ in range(rounds)
            for case in grpc_cases
        ]
        for index, answer in enumerate(http_answers):
            _same(expected[index % len(bodies)], answer.result())
        for index, answer in enumerate(grpc_answers):
            assert answer.result() == grpc_expected[index % len(grpc_cases)]
