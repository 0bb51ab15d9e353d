"""One corpus of infer requests, valid and invalid, run through every decoder: the standard path
(the HTTP decoder with JSON data, the HTTP decoder with binary tensor data, the gRPC decoder;
each followed by the core's request checks, plain path first as the service runs them) and the
wire lane's decoders in the instance process (HTTP JSON and gRPC bytes).

Every standard-path decoder must accept the same requests and refuse the same ones with the same
status and message; a lane decoder may only take a request the standard path accepts, and then
must give the model exactly the standard path's tensors, batch size and requested outputs (a
request it does not take goes to the standard path, which answers it). Each plain request must
be taken by the lane (or the lane would be proven correct by taking nothing).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pytest

from repokit.backends.python import wire_grpc, wire_http
from repokit.backends.wire_plan import WirePlan
from repokit.config.parse import parse_text
from repokit.core.plain_path import prepare_plain
from repokit.core.request_checks import ModelIO, prepare
from repokit.errors import RepokitError
from repokit.frontends.grpc.codec import decode_infer_request as decode_grpc
from repokit.frontends.http.infer_request import decode_infer_request as decode_http
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.types import InferRequest, SharedMemoryRef
from repokit.protocol.wire_batch_size import grpc_batch_size, json_batch_size

LIMIT = 1 << 20  # the HTTP decoder's maximum input size

# A: fixed dims; B: a variable dim; both batched (max_batch_size 4)
NUMERIC = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""
# a BYTES input: never on the wire lane, the standard path's decoders still agree
TEXT = """
name: "t"
backend: "python"
max_batch_size: 2
input [ { name: "S" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "N" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Z" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
MODELS = {"m": ModelIO(parse_text(NUMERIC)), "t": ModelIO(parse_text(TEXT))}


@dataclass
class In:
    name: str
    datatype: str
    shape: list[int]
    values: Any  # numbers, or bytes objects for BYTES
    raw: bytes | None = None  # binary/gRPC bytes instead of the values' own (wrong sizes)


@dataclass
class Out:
    name: str
    classification: int = 0


@dataclass
class Case:
    model: str
    inputs: list[In]
    outputs: list[Out] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""
    plain: bool = False  # a well-formed plain request: the wire lane must take it
    json: bool = True  # expressible as JSON data (not a byte size of its own)


_NUMPY = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64}


def _bytes_of(item: In) -> bytes:
    if item.raw is not None:
        return item.raw
    if item.datatype == "BYTES":
        return b"".join(struct.pack("<I", len(v)) + v for v in item.values)
    return np.asarray(item.values, dtype=_NUMPY[item.datatype]).tobytes()


def _json_values(item: In) -> list[Any]:
    if item.datatype == "BYTES":
        return [v.decode() for v in item.values]
    return list(item.values)


def http_json(case: Case) -> bytes:
    document: dict[str, Any] = {
        "inputs": [
            {"name": i.name, "datatype": i.datatype, "shape": i.shape, "data": _json_values(i)}
            for i in case.inputs
        ]
    }
    _common_json(case, document)
    return orjson.dumps(document)


def http_binary(case: Case) -> tuple[bytes, int]:
    """The body and its JSON header's length (Inference-Header-Content-Length)."""
    blobs = [_bytes_of(i) for i in case.inputs]
    document: dict[str, Any] = {
        "inputs": [
            {
                "name": i.name,
                "datatype": i.datatype,
                "shape": i.shape,
                "parameters": {"binary_data_size": len(blob)},
            }
            for i, blob in zip(case.inputs, blobs, strict=True)
        ]
    }
    _common_json(case, document)
    header = orjson.dumps(document)
    return header + b"".join(blobs), len(header)


def _common_json(case: Case, document: dict[str, Any]) -> None:
    if case.request_id:
        document["id"] = case.request_id
    if case.parameters:
        document["parameters"] = case.parameters
    if case.outputs:
        document["outputs"] = [
            {"name": o.name, "parameters": {"classification": o.classification}}
            if o.classification
            else {"name": o.name}
            for o in case.outputs
        ]


def grpc_bytes(case: Case) -> bytes:
    msg = pb.ModelInferRequest(model_name=case.model, id=case.request_id)
    for item in case.inputs:
        msg.inputs.add(name=item.name, datatype=item.datatype, shape=item.shape)
        msg.raw_input_contents.append(_bytes_of(item))
    for key, value in case.parameters.items():
        msg.parameters[key].int64_param = value
    for output in case.outputs:
        requested = msg.outputs.add(name=output.name)
        if output.classification:
            requested.parameters["classification"].int64_param = output.classification
    body: bytes = msg.SerializeToString()
    return body


def _no_shm(ref: SharedMemoryRef) -> Any:
    raise AssertionError("no shared memory in the corpus")


# (tensors by name, batch size, requested output names) or (code, message)
Accepted = tuple[dict[str, np.ndarray], int, frozenset[str]]
Outcome = Accepted | tuple[str, str]


def _checked(io: ModelIO, request: InferRequest) -> Outcome:
    prepared = prepare_plain(io, request) or prepare(io, request, _no_shm)
    backend_request = prepared.backend_request
    tensors = {name: t.data for name, t in backend_request.inputs.items()}
    requested = frozenset(backend_request.requested_outputs or io.all_outputs)
    return tensors, prepared.batch_size, requested


def standard_outcomes(case: Case) -> dict[str, Outcome]:
    """What each standard-path decoder, then the request checks, make of the case."""
    io = MODELS[case.model]
    message = pb.ModelInferRequest.FromString(grpc_bytes(case))
    decoders: dict[str, Any] = {"grpc": lambda: decode_grpc(message)}
    body, header_length = http_binary(case)
    decoders["http binary"] = lambda: decode_http(case.model, "", body, header_length, LIMIT)
    if case.json:
        json_body = http_json(case)
        decoders["http json"] = lambda: decode_http(
            case.model, "", json_body, len(json_body), LIMIT
        )
    outcomes: dict[str, Outcome] = {}
    for name, decode in decoders.items():
        try:
            outcomes[name] = _checked(io, decode().request)
        except RepokitError as exc:
            outcomes[name] = (exc.code.name, exc.message)
    return outcomes


def lane_outcomes(case: Case) -> dict[str, Accepted | None]:
    """What the wire lane's decoders take (None: the standard path answers the request)."""
    io = MODELS[case.model]
    if io.fast_inputs is None:
        return {}
    plan = WirePlan(case.model, "1", io.max_batch_size, dict(io.fast_inputs), frozenset(io.outputs))
    outcomes: dict[str, Accepted | None] = {}
    decoded = {"grpc": wire_grpc.decode_request(grpc_bytes(case), plan)}
    if case.json:
        decoded["http json"] = wire_http.decode_request(http_json(case), plan, LIMIT)
    for name, taken in decoded.items():
        if taken is None:
            outcomes[name] = None
            continue
        arrays, requested, request_id, batch_size = taken
        assert request_id == case.request_id
        outcomes[name] = (dict(arrays), batch_size, frozenset(requested))
    return outcomes


def a(n: int, start: float = 0.0) -> list[float]:
    return [start + i for i in range(n)]


def plain(batch: int = 1, width: int = 3, **kw: Any) -> Case:
    inputs = [
        In("A", "FP32", [batch, 4], a(4 * batch, 0.5)),
        In("B", "INT32", [batch, width], [int(v) for v in a(width * batch)]),
    ]
    return Case("m", inputs, **kw)


def _replace(case: Case, index: int, **changes: Any) -> Case:
    for key, value in changes.items():
        setattr(case.inputs[index], key, value)
    return case


def text(**kw: Any) -> Case:
    inputs = [In("S", "BYTES", [1, 1], [b"hello"]), In("N", "FP32", [1, 2], [1.0, 2.0])]
    return Case("t", inputs, **kw)


CORPUS: dict[str, Case] = {
    # accepted, and taken by the lane
    "plain": plain(plain=True),
    "plain batch 4 with id": plain(batch=4, request_id="r-1", plain=True),
    "requested output": plain(outputs=[Out("Y")], plain=True),
    "both outputs": plain(outputs=[Out("Y"), Out("X")], plain=True),
    "variable dim 1": plain(width=1, plain=True),
    "inputs in another order": Case("m", list(reversed(plain().inputs)), plain=True),
    # accepted, the standard path's own
    "request parameter": plain(parameters={"p": 1}),
    "sequence id": plain(parameters={"sequence_id": 5}),
    "priority": plain(parameters={"priority": 1}),
    "classification": plain(outputs=[Out("X", classification=2)]),
    "empty variable dim": _replace(plain(), 1, shape=[1, 0], values=[]),
    # refused
    "wrong datatype": _replace(plain(), 0, datatype="FP64"),
    "integer datatype for float": _replace(plain(), 0, datatype="INT64", values=[1, 2, 3, 4]),
    "wrong dims": _replace(plain(), 0, shape=[1, 5], values=a(5)),
    "no batch dim": _replace(plain(), 0, shape=[4], values=a(4)),
    "batch too large": plain(batch=5),
    "batch sizes differ": _replace(plain(), 1, shape=[2, 3], values=list(range(6))),
    "missing input": Case("m", plain().inputs[:1]),
    "extra input": Case("m", [*plain().inputs, In("C", "FP32", [1, 1], [1.0])]),
    "unknown input": _replace(plain(), 1, name="C"),
    "duplicate input": _replace(plain(), 1, name="A", datatype="FP32", shape=[1, 4], values=a(4)),
    "unknown output": plain(outputs=[Out("Z")]),
    "classification of unknown output": plain(outputs=[Out("Z", classification=1)]),
    "short bytes": _replace(plain(), 0, raw=b"\0" * 12),
    "long bytes": _replace(plain(), 0, raw=b"\0" * 20),
    "bytes not a multiple of the item": _replace(plain(), 0, raw=b"\0" * 15),
    # BYTES inputs (no lane): decoders agree
    "bytes plain": text(),
    "bytes two elements for one": _replace(text(), 0, values=[b"a", b"b"]),
    "bytes truncated": _replace(text(), 0, raw=struct.pack("<I", 9) + b"abc"),
    "bytes datatype wrong": _replace(text(), 0, datatype="INT32", values=[1]),
    "bytes missing": Case("t", text().inputs[1:]),
}
# Cases whose bytes disagree with their shape have no JSON form: JSON data is nested lists whose
# length the HTTP decoder checks against the shape itself (Triton's HTTP frontend too).
CORPUS["bytes two elements for one"].json = False
for _case in CORPUS.values():
    if any(i.raw is not None for i in _case.inputs):
        _case.json = False


def _same(got: Outcome, want: Outcome) -> bool:
    if len(want) == 2 or len(got) == 2:
        return got == want
    tensors, batch, requested = got
    want_tensors, want_batch, want_requested = want
    return (
        (batch, requested) == (want_batch, want_requested)
        and sorted(tensors) == sorted(want_tensors)
        and all(_same_array(tensors[n], want_tensors[n]) for n in tensors)
    )


def _same_array(got: np.ndarray, want: np.ndarray) -> bool:
    if got.dtype == object or want.dtype == object:
        return got.shape == want.shape and got.tolist() == want.tolist()
    return bool(got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want))


@pytest.mark.parametrize("name", list(CORPUS))
def test_every_decoder_gives_the_same_answer(name: str) -> None:
    case = CORPUS[name]
    outcomes = standard_outcomes(case)
    first = outcomes["grpc"]
    for decoder, outcome in outcomes.items():
        assert _same(outcome, first), f"{decoder} differs from grpc: {outcome!r} != {first!r}"
    accepted = len(first) == 3
    for decoder, taken in lane_outcomes(case).items():
        if taken is None:
            assert not case.plain, f"the {decoder} lane decoder left a plain request"
            continue
        assert accepted, f"the {decoder} lane decoder took a request the standard path refuses"
        assert _same(taken, first), f"{decoder} lane: {taken!r} != standard {first!r}"
        # the lane hands the model writable arrays, as the packed path does
        assert all(array.flags.writeable for array in taken[0].values())


def test_the_corpus_has_both_answers() -> None:
    """The corpus is worth its name: plain, accepted-not-plain and refused requests."""
    answers = [standard_outcomes(case)["grpc"] for case in CORPUS.values()]
    refused = [answer for answer in answers if len(answer) == 2]
    assert len(refused) >= 15 and len(answers) - len(refused) >= 10
    assert sum(case.plain for case in CORPUS.values()) >= 5


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_batchers_lane_reads_the_batch_size_the_decoders_find(name: str) -> None:
    """The dynamic batcher queues a lane request with the batch size read from its bytes
    (:mod:`repokit.protocol.wire_batch_size`): for every request the lane's decoders take, it
    is the batch size they find; a request with parameters is never queued there (its priority
    or timeout would be lost), although its shape is fine."""
    case = CORPUS[name]
    io = MODELS[case.model]
    readers = {"grpc": grpc_batch_size(grpc_bytes(case), io.max_batch_size)}
    if case.json:
        readers["http json"] = json_batch_size(http_json(case), io.max_batch_size)
    for decoder, taken in lane_outcomes(case).items():
        if taken is not None:
            assert readers[decoder] == taken[1], decoder
    if case.parameters:
        assert set(readers.values()) == {None}
