"""The plain path of the request checks gives exactly what the full checks give, and hands every
request it does not fully vouch for (including every invalid one) to the full checks."""

from __future__ import annotations

import numpy as np
import pytest

from repokit.config.parse import parse_text
from repokit.core.plain_path import prepare_plain
from repokit.core.request_checks import ModelIO, prepare
from repokit.errors import RepokitError
from repokit.protocol.types import InferRequest, InputSpec, RequestedOutput, SharedMemoryRef

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ {dims} ] }},
        {{ name: "B" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
output [ {{ name: "X" data_type: TYPE_FP32 dims: [ {dims} ] }},
         {{ name: "Y" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
"""


def model_io(dims: str = "4", batch: int = 8) -> ModelIO:
    text = CONFIG.format(dims=dims).replace("max_batch_size: 8", f"max_batch_size: {batch}")
    return ModelIO(parse_text(text))


def request(shape: tuple[int, ...] = (2, 4), **kw: object) -> InferRequest:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(-1)
    b = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    fields: dict[str, object] = {
        "model_name": "m",
        "inputs": [InputSpec("A", "FP32", shape, a), InputSpec("B", "INT32", shape, b)],
    }
    fields.update(kw)
    return InferRequest(**fields)  # type: ignore[arg-type]


def raw(req: InferRequest) -> InferRequest:
    """The request as gRPC raw contents deliver it: every input as a uint8 view of its bytes."""
    for spec in req.inputs:
        assert spec.data is not None
        spec.data = np.frombuffer(spec.data.tobytes(), dtype=np.uint8)
    return req


def no_shm(ref: SharedMemoryRef) -> np.ndarray:
    raise AssertionError("no shared memory in these requests")


@pytest.mark.parametrize(
    ("dims", "batch", "req"),
    [
        ("4", 8, request()),
        ("4", 8, request(outputs=[RequestedOutput("Y"), RequestedOutput("Y")], id="r")),
        ("4", 8, request(parameters={"p": 1}, sequence_start=True, priority=2)),
        ("-1", 8, request((3, 5))),
        ("2, 2", 0, request((2, 2))),
        ("4", 8, raw(request())),  # gRPC raw_input_contents: uint8 views of the bytes
    ],
)
def test_plain_path_equals_full_checks(dims: str, batch: int, req: InferRequest) -> None:
    io = model_io(dims, batch)
    fast = prepare_plain(io, req)
    full = prepare(io, req, no_shm)
    assert fast is not None
    assert fast.batch_size == full.batch_size
    got, want = fast.backend_request, full.backend_request
    assert list(got.inputs) == list(want.inputs)
    for name, tensor in want.inputs.items():
        mine = got.inputs[name]
        assert (mine.name, mine.datatype) == (tensor.name, tensor.datatype)
        assert mine.shape == tensor.shape
        assert mine.data.shape == tensor.data.shape and mine.data.dtype == tensor.data.dtype
        assert np.array_equal(mine.data, tensor.data)
    assert got.requested_outputs == want.requested_outputs
    assert (got.parameters, got.request_id, got.flags, got.priority) == (
        want.parameters,
        want.request_id,
        want.flags,
        want.priority,
    )


def _with(req: InferRequest, index: int, **changes: object) -> InferRequest:
    for key, value in changes.items():
        setattr(req.inputs[index], key, value)
    return req


@pytest.mark.parametrize(
    "req",
    [
        _with(request(), 0, datatype="FP64"),  # wrong datatype
        _with(request(), 1, shape=(3, 4)),  # batch sizes differ
        _with(request(), 0, shape=(2, 5)),  # wrong dims
        _with(request(), 0, data=np.zeros(3, dtype=np.float32)),  # byte size
        _with(raw(request()), 0, data=np.zeros(31, dtype=np.uint8)),  # raw byte size
        _with(request(), 1, name="A"),  # duplicate input
        _with(request(), 1, name="C"),  # unknown input
        _with(request(), 0, data=None),  # no data
        request((9, 4)),  # batch too large
        request((0, 4)),  # empty batch
        request(outputs=[RequestedOutput("Z")]),  # unknown output
        InferRequest(model_name="m", inputs=request().inputs[:1]),  # missing input
    ],
)
def test_invalid_requests_go_to_the_full_checks(req: InferRequest) -> None:
    io = model_io()
    assert prepare_plain(io, req) is None
    with pytest.raises(RepokitError):
        prepare(io, req, no_shm)


def test_special_requests_go_to_the_full_checks() -> None:
    io = model_io()
    shm = SharedMemoryRef("r", 0, 32)
    assert prepare_plain(io, request(outputs=[RequestedOutput("X", shm=shm)])) is None
    assert prepare_plain(io, _with(request(), 0, shm=shm)) is None
    assert prepare_plain(io, request(raw_input=True)) is None
    # a wire dtype that only the full checks convert (same size and kind)
    assert prepare_plain(io, _with(request(), 1, data=np.zeros((2, 4), dtype=">i4"))) is None
    bytes_io = ModelIO(parse_text(CONFIG.format(dims="4").replace("TYPE_INT32", "TYPE_STRING")))
    assert bytes_io.fast_inputs is None
