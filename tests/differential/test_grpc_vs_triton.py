"""Differential: real Triton 2.51 and repokit serve the same python-backend repository; the same
gRPC requests (valid and malformed, unary and streamed, every typed-contents field, shared
memory, parameters, versions, the non-inference RPCs) must get the same status codes, messages
and outputs. Run with ``-m triton``.

Deliberate differences, and how the comparison handles them:
- repokit disables client shared memory unless ``--allow-client-shm=true`` (Triton allows it by
  default), so repokit runs here with it enabled.
- ``TraceSetting`` is compared in ``tests/differential/test_trace_vs_triton.py``.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from tests.differential.triton_reference import running_triton
from tests.frontends.grpc.serving import make_repository, running_server

pytestmark = pytest.mark.triton

SHM_NAME = "diff_region"
RAW_INFER = "/inference.GRPCInferenceService/ModelInfer"  # called with bytes, not a message
SHM_SIZE = 1024

# one optional input per datatype the typed ``contents`` rules distinguish; each is echoed
_MIXED_INPUTS = {
    "I8": "INT8", "I16": "INT16", "I32": "INT32", "I64": "INT64",
    "U8": "UINT8", "U16": "UINT16", "U32": "UINT32", "U64": "UINT64",
    "F16": "FP16", "F32": "FP32", "F64": "FP64", "S": "STRING", "Z": "BOOL",
}  # fmt: skip

_MIXED_MODEL = """
import triton_python_backend_utils as pb_utils

NAMES = {names!r}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in NAMES:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor("OUT_" + name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def _write_mixed_model(repo: Path) -> None:
    tensors = [(name, dtype) for name, dtype in _MIXED_INPUTS.items()]
    inputs = ",\n".join(
        f'  {{ name: "{n}" data_type: TYPE_{d} dims: [ -1 ] optional: true }}' for n, d in tensors
    )
    outputs = ",\n".join(
        f'  {{ name: "OUT_{n}" data_type: TYPE_{d} dims: [ -1 ] }}' for n, d in tensors
    )
    config = (
        'name: "mixed"\nbackend: "python"\nmax_batch_size: 0\n'
        f"input [\n{inputs}\n]\noutput [\n{outputs}\n]\n"
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )
    (repo / "mixed" / "1").mkdir(parents=True)
    (repo / "mixed" / "config.pbtxt").write_text(config)
    (repo / "mixed" / "1" / "model.py").write_text(
        textwrap.dedent(_MIXED_MODEL.format(names=list(_MIXED_INPUTS)))
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = make_repository(tmp_path_factory.mktemp("grpc-diff"))
    _write_mixed_model(repository)
    return repository


@pytest.fixture(scope="module")
def region() -> Iterator[str]:
    """One POSIX shm region (registered on both servers under SHM_NAME) holding A at 0 and
    A at 64; outputs are written at 128 and beyond."""
    key = f"/repokit_grpc_diff_{os.getpid()}"
    handle = shm.create_shared_memory_region(SHM_NAME, key, SHM_SIZE)
    try:
        shm.set_shared_memory_region(handle, [A, A])
        yield key
    finally:
        shm.destroy_shared_memory_region(handle)


def _register(stub: pb_grpc.GRPCInferenceServiceStub, key: str) -> None:
    stub.SystemSharedMemoryRegister(
        pb.SystemSharedMemoryRegisterRequest(name=SHM_NAME, key=key, offset=0, byte_size=SHM_SIZE)
    )


@pytest.fixture(scope="module")
def triton(
    repo: Path, region: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with (
        running_triton(repo, tmp_path_factory.mktemp("triton"), ready=()) as server,
        grpc.insecure_channel(server.grpc_url) as channel,
    ):
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        _register(stub, region)
        stub.raw_model_infer = channel.unary_unary(RAW_INFER)
        yield stub


@pytest.fixture(scope="module")
def ours(repo: Path, region: str) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    # deliberate difference: repokit needs client shm enabled explicitly (Triton: on by default)
    with running_server(repo, allow_client_shm=True) as handle:
        channel = grpc.insecure_channel(f"127.0.0.1:{handle.grpc_port}")
        try:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            _register(stub, region)
            stub.raw_model_infer = channel.unary_unary(RAW_INFER)
            yield stub
        finally:
            channel.close()


A = np.arange(16, dtype=np.float32).reshape(1, 16)


def _add_sub(**kw: object) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="add_sub", **kw)  # type: ignore[arg-type]
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    msg.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    return msg


def _raw(msg: pb.ModelInferRequest, *chunks: bytes) -> pb.ModelInferRequest:
    msg.raw_input_contents.extend(chunks or (A.tobytes(), A.tobytes()))
    return msg


def _bytes_raw(*items: bytes) -> bytes:
    return b"".join(len(i).to_bytes(4, "little") + i for i in items)


def _mixed(
    name: str, shape: list[int], datatype: str | None = None
) -> tuple[pb.ModelInferRequest, pb.ModelInferRequest.InferInputTensor]:
    msg = pb.ModelInferRequest(model_name="mixed", id=f"mixed-{name}")
    declared = _MIXED_INPUTS[name].replace("STRING", "BYTES")
    tensor = msg.inputs.add(name=name, datatype=datatype or declared, shape=shape)
    return msg, tensor


def _set_shm(params: object, offset: int, size: int, region: str = SHM_NAME) -> None:
    p = params  # a protobuf map<string, InferParameter>
    p["shared_memory_region"].string_param = region  # type: ignore[index]
    p["shared_memory_offset"].int64_param = offset  # type: ignore[index]
    p["shared_memory_byte_size"].int64_param = size  # type: ignore[index]


def _typed_cases(cases: dict[str, pb.ModelInferRequest]) -> None:
    """Every typed field on the datatype it serves (with Triton's narrowing) and on wrong ones."""
    good: list[tuple[str, str, list[object]]] = [
        ("I8", "int_contents", [-128, 5, 127, 300, -129]),  # 300/-129: low byte kept
        ("I16", "int_contents", [-32768, 7, 70000]),
        ("I32", "int_contents", [-(2**31), 0, 2**31 - 1]),
        ("I64", "int64_contents", [-(2**63), 2**40]),
        ("U8", "uint_contents", [0, 255, 257]),
        ("U16", "uint_contents", [1, 65535, 65537]),
        ("U32", "uint_contents", [0, 2**32 - 1]),
        ("U64", "uint64_contents", [2**64 - 1, 3]),
        ("F32", "fp32_contents", [1.5, -0.25]),
        ("F64", "fp64_contents", [1e300, -2.5]),
        ("S", "bytes_contents", [b"a", b"", "\u00e9".encode()]),
        ("Z", "bool_contents", [True, False, True]),
    ]
    for name, field, values in good:
        msg, tensor = _mixed(name, [len(values)])
        getattr(tensor.contents, field).extend(values)
        cases[f"typed {field} for {_MIXED_INPUTS[name]}"] = msg
    wrong = [
        ("I8", "int64_contents", [1]),
        ("U8", "int_contents", [1]),
        ("I16", "uint_contents", [1]),
        ("U64", "uint_contents", [1]),
        ("F16", "fp32_contents", [1.0]),
        ("F64", "fp32_contents", [1.0]),
        ("Z", "int_contents", [1]),
        ("S", "int_contents", [1]),
        ("F32", "bytes_contents", [b"abcd"]),
    ]
    for name, field, values in wrong:
        msg, tensor = _mixed(name, [len(values)])
        getattr(tensor.contents, field).extend(values)
        cases[f"wrong field {field} for {_MIXED_INPUTS[name]}"] = msg
    msg, tensor = _mixed("I32", [4])
    tensor.contents.int_contents.extend([1, 2, 3])
    cases["typed count short"] = msg
    msg, tensor = _mixed("S", [1])
    tensor.contents.bytes_contents.extend([b"a", b"b"])
    cases["typed bytes count long"] = msg
    msg, tensor = _mixed("I32", [0])
    tensor.contents.SetInParent()
    cases["typed empty contents, zero elements"] = msg
    msg, tensor = _mixed("I32", [2])
    tensor.contents.SetInParent()
    cases["typed empty contents, two elements"] = msg
    msg, tensor = _mixed("I32", [1], datatype="FOO")
    tensor.contents.int_contents.append(1)
    cases["unknown datatype with contents"] = msg
    msg, tensor = _mixed("I32", [1], datatype="FOO")
    msg.raw_input_contents.append(b"\0" * 4)
    cases["unknown datatype raw"] = msg


def _raw_encoding_cases(cases: dict[str, pb.ModelInferRequest]) -> None:
    msg, _ = _mixed("F16", [2])
    msg.raw_input_contents.append(np.array([1.5, -2.0], np.float16).tobytes())
    cases["raw FP16"] = msg
    msg, _ = _mixed("Z", [3])
    msg.raw_input_contents.append(np.array([True, False, True]).tobytes())
    cases["raw BOOL"] = msg
    msg, _ = _mixed("S", [2])
    msg.raw_input_contents.append(_bytes_raw(b"xy", b"\x00\xff"))
    cases["raw BYTES"] = msg
    msg, _ = _mixed("S", [3])
    msg.raw_input_contents.append(_bytes_raw(b"xy", b"z"))
    cases["raw BYTES too few elements"] = msg
    msg, _ = _mixed("S", [1])
    msg.raw_input_contents.append(_bytes_raw(b"xy", b"z"))
    cases["raw BYTES too many elements"] = msg
    msg, _ = _mixed("S", [1])
    msg.raw_input_contents.append((10).to_bytes(4, "little") + b"abc")
    cases["raw BYTES length past the end"] = msg
    msg, _ = _mixed("S", [1])
    msg.raw_input_contents.append(b"\x01\x00")
    cases["raw BYTES truncated prefix"] = msg
    msg, _ = _mixed("U16", [3])
    msg.raw_input_contents.append(b"\0" * 5)
    cases["raw UINT16 odd size"] = msg
    msg = pb.ModelInferRequest(model_name="types", id="t")
    for name, dt, data in (
        ("B", "BYTES", _bytes_raw(b"a", b"bc")),
        ("Z", "BOOL", np.array([True, False]).tobytes()),
        ("H", "FP16", np.array([0.5, 2.0], np.float16).tobytes()),
        ("I", "INT8", np.array([-1, 1], np.int8).tobytes()),
    ):
        msg.inputs.add(name=name, datatype=dt, shape=[2])
        msg.raw_input_contents.append(data)
    cases["types all raw"] = msg


def _parameter_cases(cases: dict[str, pb.ModelInferRequest]) -> None:
    for name, key, param in [
        ("sequence_id bool", "sequence_id", pb.InferParameter(bool_param=True)),
        ("sequence_id double", "sequence_id", pb.InferParameter(double_param=1.0)),
        ("sequence_id string, non-sequence model", "sequence_id",
         pb.InferParameter(string_param="abc")),
        ("sequence_start int64", "sequence_start", pb.InferParameter(int64_param=1)),
        ("sequence_end string", "sequence_end", pb.InferParameter(string_param="true")),
        ("negative priority", "priority", pb.InferParameter(int64_param=-1)),
        ("priority string", "priority", pb.InferParameter(string_param="1")),
        ("priority uint64", "priority", pb.InferParameter(uint64_param=1)),
        ("timeout string", "timeout", pb.InferParameter(string_param="1")),
        ("timeout uint64", "timeout", pb.InferParameter(uint64_param=1)),
        ("timeout int64", "timeout", pb.InferParameter(int64_param=10_000_000)),
        ("triton_ reserved", "triton_x", pb.InferParameter(bool_param=True)),
        ("triton_enable_empty_final_response bool", "triton_enable_empty_final_response",
         pb.InferParameter(bool_param=True)),
        ("triton_enable_empty_final_response int64", "triton_enable_empty_final_response",
         pb.InferParameter(int64_param=1)),
        ("custom uint64", "mine", pb.InferParameter(uint64_param=1)),
        ("custom double", "mine", pb.InferParameter(double_param=0.5)),
        ("custom string", "mine", pb.InferParameter(string_param="s")),
        ("custom unset", "mine", pb.InferParameter()),
    ]:  # fmt: skip
        m = _raw(_add_sub())
        m.parameters[key].CopyFrom(param)
        cases[name] = m


def _shm_cases(cases: dict[str, pb.ModelInferRequest]) -> None:
    m = _add_sub(id="shm-in")
    _set_shm(m.inputs[0].parameters, 0, 64)
    _set_shm(m.inputs[1].parameters, 64, 64)
    cases["shm inputs"] = m
    m = _raw(_add_sub(id="shm-mix"), A.tobytes())
    _set_shm(m.inputs[0].parameters, 0, 64)
    cases["shm input then raw compacted"] = m
    m = _raw(_add_sub(), A.tobytes())
    _set_shm(m.inputs[0].parameters, 0, 64)
    m.inputs[0].contents.fp32_contents.extend([0.0] * 16)
    cases["shm input with contents"] = m
    m = _add_sub()
    _set_shm(m.inputs[0].parameters, 0, 64, region="unregistered")
    _set_shm(m.inputs[1].parameters, 64, 64)
    cases["shm unregistered region"] = m
    m = _add_sub()
    _set_shm(m.inputs[0].parameters, SHM_SIZE - 32, 64)
    _set_shm(m.inputs[1].parameters, 64, 64)
    cases["shm past the region"] = m
    m = _add_sub()
    _set_shm(m.inputs[0].parameters, 0, 60)
    _set_shm(m.inputs[1].parameters, 64, 64)
    cases["shm byte size short"] = m
    m = _raw(_add_sub())
    m.inputs[0].parameters["shared_memory_region"].string_param = SHM_NAME
    cases["shm region without byte size"] = m
    m = _raw(_add_sub())
    m.inputs[0].parameters["shared_memory_offset"].int64_param = 0
    cases["shm offset without region"] = m
    m = _raw(_add_sub())
    m.inputs[0].parameters["shared_memory_region"].int64_param = 1
    cases["shm region int64"] = m
    m = _raw(_add_sub(id="shm-out"))
    m.outputs.add(name="OUTPUT1")
    _set_shm(m.outputs.add(name="OUTPUT0").parameters, 128, 64)
    cases["shm output listed in model order"] = m
    m = _raw(_add_sub())
    out = m.outputs.add(name="OUTPUT0")
    _set_shm(out.parameters, 128, 64)
    out.parameters["classification"].int64_param = 2
    cases["shm output with classification"] = m
    m = _raw(_add_sub())
    _set_shm(m.outputs.add(name="OUTPUT0").parameters, 128, 32)
    cases["shm output too small"] = m


def _cases() -> dict[str, pb.ModelInferRequest]:
    cases: dict[str, pb.ModelInferRequest] = {}
    cases["valid"] = _raw(_add_sub(id="v1"))
    cases["extra raw contents"] = _raw(_add_sub(), A.tobytes(), A.tobytes(), A.tobytes())
    cases["wrong raw size"] = _raw(_add_sub(), A.tobytes()[:60], A.tobytes())
    cases["wrong raw size with id"] = _raw(_add_sub(id="q"), A.tobytes()[:60], A.tobytes())
    cases["empty raw entry"] = _raw(_add_sub(), b"", A.tobytes())
    m = _raw(_add_sub(), A.tobytes())
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["contents and raw together"] = m
    m = _add_sub()
    m.inputs[0].contents.int_contents.extend(range(16))
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["wrong typed field"] = m
    m = _add_sub()
    m.inputs[0].contents.fp32_contents.extend(A.ravel().tolist())
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["typed contents"] = m
    m = _add_sub()
    m.inputs[0].contents.fp32_contents.extend(A.ravel().tolist())
    m.inputs[0].contents.fp64_contents.extend(A.ravel().tolist())
    m.inputs[1].contents.fp32_contents.extend(A.ravel().tolist())
    cases["two typed fields"] = m
    cases["missing data"] = _raw(_add_sub(), A.tobytes())
    m = _raw(_add_sub())
    m.inputs[0].datatype = "FP64"
    cases["wrong datatype"] = m
    m = _raw(_add_sub())
    m.inputs[0].shape[:] = [1, 8, 2]
    cases["wrong shape"] = m
    m = _raw(_add_sub(), *(np.zeros((9, 16), np.float32).tobytes(),) * 2)
    m.inputs[0].shape[:] = [9, 16]
    m.inputs[1].shape[:] = [9, 16]
    cases["batch too large"] = m
    m = _raw(_add_sub(), A.tobytes(), A.tobytes(), A.tobytes())
    m.inputs.add(name="NOPE", datatype="FP32", shape=[1, 16])
    cases["unknown input"] = m
    m = _raw(_add_sub(), A.tobytes())
    del m.inputs[1]
    cases["missing input"] = m
    m = _raw(_add_sub(), A.tobytes(), A.tobytes(), A.tobytes())
    m.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    cases["duplicate input"] = m
    _parameter_cases(cases)
    m = _raw(_add_sub())
    m.model_name = "nope"
    cases["unknown model"] = m
    for version in ("7", "abc", "-1", "1.0", "0", " 1", "+1", "1abc", "99999999999999999999"):
        m = _raw(_add_sub())
        m.model_version = version
        cases[f"version {version!r}"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 3
    cases["classification"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 0
    cases["classification zero"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="OUTPUT0").parameters["classification"].string_param = "3"
    cases["classification string"] = m
    m = _raw(_add_sub())
    m.outputs.add(name="NOPE")
    cases["unknown output"] = m
    m = _raw(_add_sub(id="order"))
    m.outputs.add(name="OUTPUT1")
    m.outputs.add(name="OUTPUT0")
    cases["outputs requested in reverse order"] = m
    m = pb.ModelInferRequest(model_name="accumulate", id="acc")
    m.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    m.raw_input_contents.append(np.array([[5]], np.int32).tobytes())
    cases["sequence model without sequence id"] = m
    _typed_cases(cases)
    _raw_encoding_cases(cases)
    _shm_cases(cases)
    return cases


CASES = _cases()


def _params(msg: object) -> dict[str, object]:
    return {k: getattr(v, str(v.WhichOneof("parameter_choice"))) for k, v in msg.parameters.items()}


_GOT_INPUTS = re.compile(r"Got input\(s\) \[([^\]]*)\]")


def _same_input_order(message: str) -> str:
    """Deliberate difference: Triton lists the inputs of a count error in the order of its
    hash map (here the reverse of the request's); repokit keeps the request's order."""
    return _GOT_INPUTS.sub(
        lambda m: "Got input(s) [" + ",".join(sorted(m.group(1).split(","))) + "]", message
    )


def _outcome(
    stub: pb_grpc.GRPCInferenceServiceStub, msg: pb.ModelInferRequest
) -> tuple[object, ...]:
    try:
        reply = stub.ModelInfer(msg, timeout=30)
    except grpc.RpcError as error:
        return ("error", error.code(), _same_input_order(str(error.details())))
    outputs = [(o.name, o.datatype, list(o.shape), _params(o)) for o in reply.outputs]
    return ("ok", reply.id, reply.model_name, reply.model_version, _params(reply), outputs,
            list(reply.raw_output_contents))  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_unary_infer_matches_triton(
    case: str, triton: pb_grpc.GRPCInferenceServiceStub, ours: pb_grpc.GRPCInferenceServiceStub
) -> None:
    assert _outcome(ours, CASES[case]) == _outcome(triton, CASES[case])


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x09add_sub"])
def test_unparsable_infer_bytes_match_triton(
    body: bytes, triton: pb_grpc.GRPCInferenceServiceStub, ours: pb_grpc.GRPCInferenceServiceStub
) -> None:
    """Bytes that are no ModelInferRequest (a bad tag, a truncated field): Triton answers
    INTERNAL "Unable to parse request" (grpc.aio's own answer would be UNKNOWN)."""
    outcomes = []
    for stub in (ours, triton):
        with pytest.raises(grpc.RpcError) as caught:
            stub.raw_model_infer(body, timeout=30)
        outcomes.append((caught.value.code(), caught.value.details()))
    assert outcomes[0] == outcomes[1] == (grpc.StatusCode.INTERNAL, "Unable to parse request")


def _stream_replies(
    stub: pb_grpc.GRPCInferenceServiceStub, requests: list[pb.ModelInferRequest]
) -> list[tuple[object, ...]]:
    replies = []
    for reply in stub.ModelStreamInfer(iter(requests), timeout=60):
        r = reply.infer_response
        replies.append((r.id, reply.error_message, r.model_name, r.model_version, _params(r),
                        list(r.raw_output_contents)))  # fmt: skip
    return replies


def _mixed_stream() -> list[pb.ModelInferRequest]:
    bad_param = _raw(_add_sub(id="b3"))
    bad_param.parameters["sequence_start"].int64_param = 1
    bad_version = _raw(_add_sub(id="b4"))
    bad_version.model_version = "x"
    typed_bad, tensor = _mixed("U8", [1])
    tensor.contents.int_contents.append(1)
    return [
        _raw(_add_sub(id="g1")),
        CASES["unknown model"],
        _raw(_add_sub(id="b2"), A.tobytes()[:60], A.tobytes()),
        bad_param,
        bad_version,
        typed_bad,
        CASES["typed bytes_contents for STRING"],
        _raw(_add_sub(id="g2")),
    ]


def _sequence_stream() -> list[pb.ModelInferRequest]:
    """One accumulate sequence with bad requests in the middle: the good ones keep order."""
    requests = []
    for i, value in enumerate([1, 2, 3, 4]):
        m = pb.ModelInferRequest(model_name="accumulate", id=f"s{i}")
        m.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
        m.raw_input_contents.append(np.array([[value]], np.int32).tobytes())
        m.parameters["sequence_id"].int64_param = 777
        m.parameters["sequence_start"].bool_param = i == 0
        m.parameters["sequence_end"].bool_param = i == 3
        requests.append(m)
    wrong_size = pb.ModelInferRequest(model_name="accumulate", id="bad-size")
    wrong_size.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    wrong_size.raw_input_contents.append(b"\0\0")
    wrong_size.parameters["sequence_id"].int64_param = 777
    requests.insert(2, wrong_size)
    no_start = pb.ModelInferRequest(model_name="accumulate", id="no-start")
    no_start.CopyFrom(requests[1])
    no_start.id = "no-start"
    no_start.parameters["sequence_id"].int64_param = 778
    requests.insert(1, no_start)
    return requests


@pytest.mark.parametrize(
    ("name", "build", "ordered"),
    [("mixed", _mixed_stream, False), ("sequence", _sequence_stream, True)],
)
def test_stream_with_bad_requests_matches_triton(
    name: str,
    build: Callable[[], list[pb.ModelInferRequest]],
    ordered: bool,
    triton: pb_grpc.GRPCInferenceServiceStub,
    ours: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    theirs_replies = _stream_replies(triton, build())
    ours_replies = _stream_replies(ours, build())
    if ordered:  # one sequence: responses in request order on both servers
        assert [r for r in ours_replies if not r[1]] == [r for r in theirs_replies if not r[1]]

    def key(t: tuple[object, ...]) -> str:
        return str(t[0]) + str(t[1])

    assert sorted(ours_replies, key=key) == sorted(theirs_replies, key=key)


def _load_param(**kw: object) -> pb.ModelRepositoryParameter:
    return pb.ModelRepositoryParameter(**kw)  # type: ignore[arg-type]


OTHER_CALLS: list[tuple[str, object]] = [
    ("ServerLive", pb.ServerLiveRequest()),
    ("ServerReady", pb.ServerReadyRequest()),
    ("ModelReady", pb.ModelReadyRequest(name="nope")),
    ("ModelReady", pb.ModelReadyRequest(name="add_sub")),
    ("ModelReady", pb.ModelReadyRequest(name="add_sub", version="3")),
    ("ModelReady", pb.ModelReadyRequest(name="add_sub", version="abc")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="mixed")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub", version="1")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub", version="2")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub", version="-3")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
    ("ModelConfig", pb.ModelConfigRequest(name="nope")),
    ("ModelConfig", pb.ModelConfigRequest(name="add_sub", version="x")),
    ("ModelStatistics", pb.ModelStatisticsRequest(name="nope")),
    ("ModelStatistics", pb.ModelStatisticsRequest(name="add_sub", version="5")),
    ("RepositoryIndex", pb.RepositoryIndexRequest(repository_name="x")),
    ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="add_sub")),
    ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(repository_name="r", model_name="a")),
    ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="add_sub")),
    (
        "RepositoryModelUnload",
        pb.RepositoryModelUnloadRequest(
            model_name="add_sub", parameters={"unload_dependents": _load_param(string_param="1")}
        ),
    ),
    ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest(name="x")),
    ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest()),
    ("CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest(name="x")),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="x")),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name=SHM_NAME)),
    ("SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest(name="x")),
    (
        "SystemSharedMemoryRegister",
        pb.SystemSharedMemoryRegisterRequest(name="y", key="/no_such_key_xyz", byte_size=16),
    ),
    (
        "SystemSharedMemoryRegister",
        pb.SystemSharedMemoryRegisterRequest(name=SHM_NAME, key="/no_such_key_xyz", byte_size=16),
    ),
    ("LogSettings", pb.LogSettingsRequest()),
]


@pytest.mark.parametrize(
    "call",
    OTHER_CALLS,
    ids=lambda c: f"{c[0]}({str(c[1]).strip() or '-'})".replace("\n", " "),
)
def test_other_rpcs_match_triton(
    call: tuple[str, object],
    triton: pb_grpc.GRPCInferenceServiceStub,
    ours: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    method, request = call

    def outcome(stub: pb_grpc.GRPCInferenceServiceStub) -> tuple[object, ...]:
        try:
            return ("ok", str(getattr(stub, method)(request, timeout=30)))
        except grpc.RpcError as error:
            return ("error", error.code(), error.details())

    assert outcome(ours) == outcome(triton)
