"""Merging inputs, splitting outputs, ragged batching, batch_input tensors, batching keys."""

from __future__ import annotations

import numpy as np

from repokit.backends.base import BackendRequest, BackendResult
from repokit.errors import Code, invalid_arg
from repokit.scheduler.batch_tensors import (
    BatchingRules,
    batching_key,
    merge_requests,
    request_batch_size,
    split_result,
)
from tests.scheduler.helpers import config, tensor

RAGGED = """
name: "r" max_batch_size: 8
input [ { name: "RAG" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true },
        { name: "VAR" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "OPT" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_input [
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_FP32 source_input: "RAG" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "ACC" data_type: TYPE_INT32
    source_input: "RAG" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "ACC0" data_type: TYPE_INT32
    source_input: "RAG" },
  { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "MAX" data_type: TYPE_INT32
    source_input: "RAG" },
  { kind: BATCH_ITEM_SHAPE target_name: "SHAPE" data_type: TYPE_INT32 source_input: "VAR" },
  { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "FLAT" data_type: TYPE_INT32
    source_input: "VAR" }
]
batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "RAG" } ]
"""


def req(**inputs: list[list[float]]) -> BackendRequest:
    return BackendRequest(
        inputs={k: tensor(k, np.asarray(v, dtype=np.float32)) for k, v in inputs.items()},
        requested_outputs=(),
    )


def test_rules_from_config() -> None:
    rules = BatchingRules.from_config(config(RAGGED))
    assert rules.ragged_inputs == {"RAG"}
    assert rules.equal_shape_inputs == ("VAR",)  # variable-size and not ragged
    assert rules.optional_inputs == ("OPT",)
    assert rules.scatter_outputs == {"OUT": "RAG"}
    assert [b.datatype for b in rules.batch_inputs] == ["FP32", "INT32", "INT32", "INT32"] + [
        "INT32"
    ] * 2


def test_batching_key_compares_variable_shapes_and_optional_presence_not_ragged() -> None:
    rules = BatchingRules.from_config(config(RAGGED))
    a = req(RAG=[[1, 2, 3]], VAR=[[1, 2]])
    b = req(RAG=[[1]], VAR=[[3, 4]])  # ragged length differs: still batchable
    c = req(RAG=[[1]], VAR=[[3, 4, 5]])  # VAR shape differs
    d = req(RAG=[[1]], VAR=[[3, 4]], OPT=[[1]])  # optional input present
    assert batching_key(a, rules) == batching_key(b, rules)
    assert batching_key(a, rules) != batching_key(c, rules)
    assert batching_key(b, rules) != batching_key(d, rules)
    assert batching_key(a, BatchingRules(max_batch_size=8)) is None


def test_request_batch_size() -> None:
    assert request_batch_size(req(X=[[1], [2], [3]]), 8) == 3
    assert request_batch_size(req(X=[[1], [2], [3]]), 0) == 1


def test_merge_concatenates_ragged_flat_and_generates_batch_inputs() -> None:
    rules = BatchingRules.from_config(config(RAGGED))
    requests = [
        req(RAG=[[1, 2, 3]], VAR=[[1, 2]]),
        req(RAG=[[4, 5, 6, 7]], VAR=[[3, 4], [5, 6]]),
    ]
    # the second request has batch 2 on VAR but RAG batch 1: BATCH_ITEM_SHAPE follows VAR
    merged = merge_requests(requests, rules)
    rag = merged.inputs["RAG"]
    assert rag.shape == (7,) and np.array_equal(rag.data, [1, 2, 3, 4, 5, 6, 7])
    assert merged.inputs["VAR"].shape == (3, 2)
    assert np.array_equal(merged.inputs["COUNT"].data, [3, 4])
    assert merged.inputs["COUNT"].data.dtype == np.float32
    assert np.array_equal(merged.inputs["ACC"].data, [3, 7])
    assert np.array_equal(merged.inputs["ACC0"].data, [0, 3, 7])
    assert merged.inputs["MAX"].shape == (4,)
    assert merged.inputs["SHAPE"].shape == (3, 1)
    assert np.array_equal(merged.inputs["SHAPE"].data, [[2], [2], [2]])
    assert np.array_equal(merged.inputs["FLAT"].data, [2, 2, 2])


def test_single_request_without_batch_inputs_is_passed_through_untouched() -> None:
    one = req(X=[[1, 2]])
    assert merge_requests([one], BatchingRules(max_batch_size=8)) is one


def test_split_by_batch_size_gives_views() -> None:
    requests = [req(X=[[1, 1]]), req(X=[[2, 2], [3, 3]])]
    out = tensor("Y", np.arange(6, dtype=np.float32).reshape(3, 2))
    parts = split_result(
        BackendResult(outputs=[out]), requests, [1, 2], BatchingRules(max_batch_size=8)
    )
    assert parts[0].outputs[0].shape == (1, 2) and parts[1].outputs[0].shape == (2, 2)
    assert np.shares_memory(parts[1].outputs[0].data, out.data)
    assert np.array_equal(parts[1].outputs[0].data, [[2, 3], [4, 5]])


def test_split_scatters_with_the_source_input_shape() -> None:
    rules = BatchingRules.from_config(config(RAGGED))
    requests = [req(RAG=[[1, 2, 3]], VAR=[[1]]), req(RAG=[[4, 5]], VAR=[[1]])]
    out = tensor("OUT", np.arange(5, dtype=np.float32))
    parts = split_result(BackendResult(outputs=[out]), requests, [1, 1], rules)
    assert parts[0].outputs[0].shape == (1, 3)
    assert np.array_equal(parts[1].outputs[0].data, [[3, 4]])


def test_split_errors_when_the_output_does_not_match_the_batch() -> None:
    requests = [req(X=[[1]]), req(X=[[2]])]
    out = tensor("Y", np.zeros((3, 1), dtype=np.float32))
    parts = split_result(
        BackendResult(outputs=[out]), requests, [1, 1], BatchingRules(max_batch_size=8)
    )
    assert all(p.error is not None and p.error.code is Code.INTERNAL for p in parts)
    assert "output 'Y'" in (parts[0].error.message if parts[0].error else "")


def test_split_propagates_a_batch_error_and_filters_requested_outputs() -> None:
    requests = [req(X=[[1]]), req(X=[[2]])]
    failed = split_result(
        BackendResult(error=invalid_arg("nope")), requests, [1, 1], BatchingRules(8)
    )
    assert [p.error.message if p.error else "" for p in failed] == ["nope", "nope"]
    requests[0].requested_outputs = ("A",)
    outs = [tensor("A", np.zeros((2, 1))), tensor("B", np.zeros((2, 1)))]
    parts = split_result(BackendResult(outputs=outs), requests, [1, 1], BatchingRules(8))
    assert [t.name for t in parts[0].outputs] == ["A"]
    assert [t.name for t in parts[1].outputs] == ["A", "B"]
