"""v1 encoding and decoding without a server: body splitting, header -> InferRequest,
InferResponse -> header + raw outputs, structured classification, RequestStatus codes."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from repokit.config.parse import parse_text
from repokit.errors import Code, RepokitError
from repokit.frontends.v1 import request_status as rstatus
from repokit.frontends.v1.classes import batch_classes, top_k
from repokit.frontends.v1.infer_codec import decode_request, encode_response, split_body
from repokit.frontends.v1.operations import model_version
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.generated.v1 import request_status_pb2 as rs
from repokit.protocol.types import InferResponse, InferTensor, SharedMemoryRef
from tests.frontends.v1.client import request_header

CONFIG = parse_text(
    """
name: "m"
max_batch_size: 4
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "S" data_type: TYPE_STRING dims: [ -1 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
)
FLAT = parse_text(
    'name: "flat" max_batch_size: 0 '
    'input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] } ] '
    'output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]'
)


def test_split_body_cuts_inputs_in_header_order() -> None:
    header = request_header(
        'batch_size: 2 input { name: "A" } input { name: "S" dims: 1 batch_byte_size: 6 }'
    )
    body = bytes(range(16)) + b"\1\0\0\0x\0"
    a, s = split_body(header, CONFIG, body)
    assert bytes(a or b"") == bytes(range(16)) and bytes(s or b"") == b"\1\0\0\0x\0"


@pytest.mark.parametrize(
    ("header", "size", "fragment"),
    [
        ('batch_size: 1 input { name: "A" }', 7, "needs 8 bytes at offset 0"),
        ('batch_size: 1 input { name: "A" }', 9, "has 9 bytes but the inputs"),
        ('batch_size: 1 input { name: "S" dims: 1 }', 5, "must give its batch_byte_size"),
        ('batch_size: 1 input { name: "S" batch_byte_size: 5 }', 5, "must give its dims"),
        ('batch_size: 1 input { name: "Q" }', 0, "unexpected inference input 'Q'"),
        ('input { name: "A" }', 8, "batch-size must be >= 1"),
    ],
)
def test_split_body_errors(header: str, size: int, fragment: str) -> None:
    with pytest.raises(RepokitError) as caught:
        split_body(request_header(header), CONFIG, b"\0" * size)
    assert caught.value.code is Code.INVALID_ARG
    assert fragment in caught.value.message


def test_decode_maps_header_fields_onto_the_core_request() -> None:
    header = request_header(
        "id: 9 batch_size: 2 correlation_id: 77 flags: 3 priority: 2 timeout_microseconds: 500 "
        'input { name: "A" } input { name: "S" dims: 1 shared_memory { name: "r" offset: 4 '
        'byte_size: 12 } } output { name: "OUT" cls { count: 2 } }'
    )
    decoded = decode_request("m", "", header, [b"\0" * 16, None], CONFIG)
    request = decoded.request
    assert (request.id, request.sequence_id, request.priority, request.timeout_us) == (
        "9", 77, 2, 500,
    )  # fmt: skip
    assert request.sequence_start and request.sequence_end
    a, s = request.inputs
    assert (a.datatype, a.shape) == ("FP32", (2, 2)) and a.data is not None
    assert (s.datatype, s.shape, s.data) == ("BYTES", (2, 1), None)
    assert s.shm == SharedMemoryRef("r", 4, 12)
    assert decoded.classes == {"OUT": 2} and decoded.batch_size == 2
    assert request.outputs[0].classification == 0  # computed by the v1 frontend


@pytest.mark.parametrize(
    ("config", "header", "buffers", "fragment"),
    [
        (FLAT, 'batch_size: 2 input { name: "X" dims: 1 }', [b"\0" * 8], "not support batching"),
        (CONFIG, 'batch_size: 1 input { name: "A" }', [], "expected 1 raw inputs"),
        (CONFIG, 'batch_size: 1 input { name: "A" }', [None], "no data for input 'A'"),
        (CONFIG, 'batch_size: 1 input { name: "A" batch_byte_size: 8 }', [b"1234"],
         "unexpected size 4 for input 'A'"),
        (CONFIG, 'batch_size: 1 input { name: "A" } output { name: "OUT" cls { count: 0 } }',
         [b"\0" * 8], "must be >= 1"),
    ],
)  # fmt: skip
def test_decode_errors(config: mc.ModelConfig, header: str, buffers: list, fragment: str) -> None:
    with pytest.raises(RepokitError) as caught:
        decode_request(config.name, "", request_header(header), buffers, config)
    assert caught.value.code is Code.INVALID_ARG
    assert fragment in caught.value.message


def test_encode_orders_outputs_as_requested_and_keeps_shm_out_of_the_body() -> None:
    header = request_header(
        'batch_size: 2 input { name: "A" } output { name: "OUT" } '
        'output { name: "SHM" shared_memory { name: "r" byte_size: 64 } }'
    )
    config = mc.ModelConfig()
    config.CopyFrom(CONFIG)
    config.output.add(name="SHM", data_type=mc.TYPE_INT64, dims=[2])
    decoded = decode_request("m", "", header, [b"\0" * 16], config)
    out = np.arange(6, dtype=np.float32).reshape(2, 3)
    response = InferResponse(
        "m", "3", outputs=[InferTensor("OUT", "FP32", (2, 3), out)],
        shm_outputs={"SHM": (SharedMemoryRef("r", 0, 64), "INT64", (2, 2))},
    )  # fmt: skip
    head, raw = encode_response(decoded, response, lambda name: (), 11)
    assert (head.id, head.model_version, head.batch_size) == (11, 3, 2)
    assert [o.name for o in head.output] == ["OUT", "SHM"]
    assert list(head.output[0].raw.dims) == [3] and head.output[0].raw.batch_byte_size == 24
    assert list(head.output[1].raw.dims) == [2] and head.output[1].raw.batch_byte_size == 32
    assert head.output[1].data_type == mc.TYPE_INT64
    assert [bytes(b) for b in raw] == [out.tobytes()]
    line = text_format.MessageToString(head, as_one_line=True)
    # ShortDebugString-like: one line, fields in field-number order (id is field 5)
    assert line.startswith('model_name: "m" model_version: 3 batch_size: 2 output {')
    assert line.endswith("id: 11") and "\n" not in line


def test_batch_classes_sorted_with_labels_per_batch_item() -> None:
    scores = np.array([[1, 9, 5], [7, 2, 8]], dtype=np.int32)
    result = batch_classes("OUT", "INT32", scores, 2, batching=True, labels=["a", "b"])
    got = [[(c.idx, c.value, c.label) for c in b.cls] for b in result]
    assert got == [[(1, 9.0, "b"), (2, 5.0, "")], [(2, 8.0, ""), (0, 7.0, "a")]]
    single = batch_classes("OUT", "FP64", np.array([0.5, 0.25]), 5, batching=False)
    assert [(c.idx, c.value) for c in single[0].cls] == [(0, 0.5), (1, 0.25)]
    indices, values = top_k(np.array([[3.0, 1.0, 2.0]]), 0)
    assert indices.shape == (1, 0) and values.shape == (1, 0)


def test_batch_classes_rejects_unsupported_types() -> None:
    with pytest.raises(RepokitError) as caught:
        batch_classes("OUT", "FP16", np.zeros(3, np.float16), 1, batching=False)
    assert caught.value.code is Code.INVALID_ARG and "'FP16'" in caught.value.message


def test_every_core_code_has_a_request_status_code() -> None:
    for code in Code:
        status = rstatus.failure(5, RepokitError(code, "boom"))
        assert status.code not in (rs.SUCCESS, rs.INVALID)
        assert (status.msg, status.server_id, status.request_id) == ("boom", "inference:0", 5)
    ok = rstatus.success(3)
    assert rstatus.one_line(ok) == 'code: SUCCESS server_id: "inference:0" request_id: 3'
    ids = rstatus.RequestIds()
    assert [ids.next() for _ in range(3)] == [1, 2, 3]


def test_model_version_parsing() -> None:
    assert [model_version(v) for v in ("", "-1", "0", "2", 3, -1)] == ["", "", "", "2", "3", ""]
    with pytest.raises(RepokitError) as caught:
        model_version("two")
    assert caught.value.code is Code.INVALID_ARG
