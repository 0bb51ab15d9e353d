"""Merging the requests of a batch into one set of tensors, and splitting the outputs back.

Pure numpy, no asyncio. ``merge_requests`` concatenates each input once over the batch
(``np.concatenate``); ``allow_ragged_batch`` inputs are flattened and concatenated into a 1-D
tensor, as Triton's backends do; ``batch_input`` tensors are generated after the batch is formed.
``split_result`` cuts each output back into per-request views (no copies) by the requests'
batch sizes, or by the source input's element counts for ``BATCH_SCATTER_WITH_INPUT_SHAPE``.

``batching_key`` is what decides whether two requests may share a batch: the non-batch shape of
every variable-size input that is not ragged, the values of shape tensors, and which optional
inputs are present (Triton's ``RequiredEqualInputs``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.base import BackendRequest, BackendResult
from repokit.errors import internal
from repokit.protocol.datatypes import protocol_name
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor

_BI = mc.BatchInput


@dataclass(frozen=True)
class BatchInputSpec:
    kind: int  # mc.BatchInput.Kind value
    target_names: tuple[str, ...]
    datatype: str  # "INT32" or "FP32"
    source_inputs: tuple[str, ...]


@dataclass(frozen=True)
class BatchingRules:
    """What the config says about combining requests; built once at load."""

    max_batch_size: int = 0
    equal_shape_inputs: tuple[str, ...] = ()
    shape_tensor_inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    ragged_inputs: frozenset[str] = frozenset()
    batch_inputs: tuple[BatchInputSpec, ...] = ()
    scatter_outputs: dict[str, str] = field(default_factory=dict)  # output -> source input

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchingRules:
        equal: list[str] = []
        shape_tensors: list[str] = []
        for inp in config.input:
            if inp.is_shape_tensor:
                shape_tensors.append(inp.name)
            elif not inp.allow_ragged_batch and any(d < 0 for d in inp.dims):
                equal.append(inp.name)
        scatter: dict[str, str] = {}
        for bo in config.batch_output:
            for target in bo.target_name:
                if bo.source_input:
                    scatter[target] = bo.source_input[0]
        return cls(
            max_batch_size=int(config.max_batch_size),
            equal_shape_inputs=tuple(equal),
            shape_tensor_inputs=tuple(shape_tensors),
            optional_inputs=tuple(i.name for i in config.input if i.optional),
            ragged_inputs=frozenset(i.name for i in config.input if i.allow_ragged_batch),
            batch_inputs=tuple(
                BatchInputSpec(
                    kind=int(bi.kind),
                    target_names=tuple(bi.target_name),
                    datatype=protocol_name(bi.data_type),
                    source_inputs=tuple(bi.source_input),
                )
                for bi in config.batch_input
            ),
            scatter_outputs=scatter,
        )

    @property
    def checks_inputs(self) -> bool:
        return bool(self.equal_shape_inputs or self.shape_tensor_inputs or self.optional_inputs)


def request_batch_size(request: BackendRequest, max_batch_size: int) -> int:
    """The request's own batch size: the first dim of its inputs (1 for non-batching models)."""
    if max_batch_size <= 0:
        return 1
    for tensor in request.inputs.values():
        if tensor.shape:
            return max(1, int(tensor.shape[0]))
    return 1


def batching_key(request: BackendRequest, rules: BatchingRules) -> Hashable:
    """Requests batch together only when their keys are equal (None: no constraint)."""
    if not rules.checks_inputs:
        return None
    parts: list[Hashable] = []
    for name in rules.equal_shape_inputs:
        tensor = request.inputs.get(name)
        parts.append(None if tensor is None else tuple(tensor.shape[1:]))
    for name in rules.shape_tensor_inputs:
        tensor = request.inputs.get(name)
        parts.append(None if tensor is None else (tuple(tensor.shape), tensor.data.tobytes()))
    if rules.optional_inputs:
        parts.append(frozenset(n for n in rules.optional_inputs if n in request.inputs))
    return tuple(parts)


def _shaped(tensor: InferTensor) -> npt.NDArray[Any]:
    data = tensor.data
    if data.shape != tuple(tensor.shape):
        data = data.reshape(tensor.shape)
    return data


def _element_count(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


def _merged_requested_outputs(requests: Sequence[BackendRequest]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for request in requests:
        if not request.requested_outputs:
            return ()
        names.update(dict.fromkeys(request.requested_outputs))
    return tuple(names)


def merge_requests(requests: Sequence[BackendRequest], rules: BatchingRules) -> BackendRequest:
    """One request holding the whole batch (inputs concatenated once, batch inputs added)."""
    first = requests[0]
    if len(requests) == 1 and not rules.batch_inputs and not rules.ragged_inputs:
        return first
    inputs: dict[str, InferTensor] = {}
    for name, tensor in first.inputs.items():
        parts = [_shaped(r.inputs[name]) for r in requests]
        if name in rules.ragged_inputs:
            data = np.concatenate([p.reshape(-1) for p in parts])
        elif len(parts) == 1:
            data = parts[0]
        else:
            data = np.concatenate(parts, axis=0)
        inputs[name] = InferTensor(name, tensor.datatype, tuple(data.shape), data)
    for spec in rules.batch_inputs:
        data = batch_input_data(spec, requests)
        for target in spec.target_names:
            inputs[target] = InferTensor(target, spec.datatype, tuple(data.shape), data)
    return BackendRequest(
        inputs=inputs,
        requested_outputs=_merged_requested_outputs(requests),
        parameters=dict(first.parameters),
        request_id=first.request_id,
        correlation_id=first.correlation_id,
        flags=first.flags,
    )


def batch_input_data(spec: BatchInputSpec, requests: Sequence[BackendRequest]) -> npt.NDArray[Any]:
    """The tensor Triton generates for one ``batch_input`` of a formed batch."""
    dtype = np.float32 if spec.datatype == "FP32" else np.int32
    source = spec.source_inputs[0]
    shapes = [tuple(r.inputs[source].shape) for r in requests]
    counts = np.array([_element_count(s) for s in shapes], dtype=np.int64)
    kind = spec.kind
    if kind == _BI.BATCH_ELEMENT_COUNT:
        return counts.astype(dtype)
    if kind == _BI.BATCH_ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts).astype(dtype)
    if kind == _BI.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.concatenate([[0], np.cumsum(counts)]).astype(dtype)
    if kind == _BI.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros(int(counts.max()) if counts.size else 0, dtype=dtype)
    # BATCH_ITEM_SHAPE / _FLATTEN: the shape of every batch item (the source shape without
    # its batch dimension), repeated for each item of a request's own batch.
    items = [s[1:] for s in shapes for _ in range(max(1, s[0] if s else 1))]
    rank = len(items[0]) if items else 0
    table = np.array(items, dtype=dtype).reshape(len(items), rank)
    if kind == _BI.BATCH_ITEM_SHAPE:
        return table
    return table.reshape(-1)


def split_result(
    result: BackendResult,
    requests: Sequence[BackendRequest],
    batch_sizes: Sequence[int],
    rules: BatchingRules,
) -> list[BackendResult]:
    """Cut the merged batch's outputs back into one result per request (views)."""
    if len(requests) == 1 and not rules.scatter_outputs:
        return [result]
    if result.error is not None:
        return [BackendResult(error=result.error) for _ in requests]
    bounds = [0, *accumulate(batch_sizes)]
    total = bounds[-1]
    pieces: list[list[InferTensor]] = [[] for _ in requests]
    for tensor in result.outputs:
        data = _shaped(tensor)
        source = rules.scatter_outputs.get(tensor.name)
        if source is not None:
            shapes = [tuple(r.inputs[source].shape) for r in requests]
            sizes = [_element_count(s) for s in shapes]
            starts = [0, *accumulate(sizes)]
            if data.shape[:1] != (starts[-1],):
                return _split_error(requests, tensor.name, starts[-1], data.shape)
            for i, shape in enumerate(shapes):
                piece = data[starts[i] : starts[i + 1]].reshape(shape + data.shape[1:])
                pieces[i].append(InferTensor(tensor.name, tensor.datatype, piece.shape, piece))
            continue
        if not data.shape or data.shape[0] != total:
            return _split_error(requests, tensor.name, total, data.shape)
        for i in range(len(requests)):
            piece = data[bounds[i] : bounds[i + 1]]
            pieces[i].append(InferTensor(tensor.name, tensor.datatype, tuple(piece.shape), piece))
    return [
        BackendResult(outputs=_only_requested(p, r), parameters=dict(result.parameters))
        for p, r in zip(pieces, requests, strict=True)
    ]


def _only_requested(outputs: list[InferTensor], request: BackendRequest) -> list[InferTensor]:
    if not request.requested_outputs:
        return outputs
    wanted = set(request.requested_outputs)
    return [t for t in outputs if t.name in wanted]


def _split_error(
    requests: Sequence[BackendRequest], name: str, expected: int, shape: tuple[int, ...]
) -> list[BackendResult]:
    error = internal(
        f"output '{name}' of the batch has shape {list(shape)}, expected a first dimension "
        f"of {expected} to split it back to the {len(requests)} requests of the batch"
    )
    return [BackendResult(error=error) for _ in requests]
