"""Request checks through InferenceService.infer: codes and messages as Triton 2.51 answers.

Every quoted message was recorded from real Triton 2.51 (tritonserver started with
tools/triton_reference.py) serving the same models, except where a comment says otherwise.
Where several inputs are wrong or listed, Triton walks them in its input map's order
(:mod:`repokit.core.triton_input_order`), not the request's.
"""

from __future__ import annotations

import numpy as np
import pytest

from repokit.core.service import InferenceService
from repokit.errors import Code, RepokitError
from repokit.protocol.types import InferRequest, InputSpec, RequestedOutput

from .conftest import Controls, f32

NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)
NOID = "[request id: <id_unknown>] "


def spec(name: str, array: np.ndarray, datatype: str = "FP32") -> InputSpec:
    return InputSpec(name, datatype, tuple(array.shape), array)


def add_sub(*shape: int, rid: str = "", **kw: object) -> InferRequest:
    a, b = f32(*shape), f32(*shape, start=1)
    return InferRequest("add_sub", id=rid, inputs=[spec("INPUT0", a), spec("INPUT1", b)], **kw)  # type: ignore[arg-type]


async def rejected(service: InferenceService, request: InferRequest) -> RepokitError:
    with pytest.raises(RepokitError) as info:
        await service.infer(request)
    return info.value


async def test_add_sub_runs_and_echoes_id(service: InferenceService) -> None:
    response = await service.infer(add_sub(2, 16, rid="r1"))
    assert (response.id, response.model_name, response.model_version) == ("r1", "add_sub", "1")
    out = {t.name: t for t in response.outputs}
    np.testing.assert_array_equal(out["OUTPUT0"].data, f32(2, 16) * 2 + 1)
    np.testing.assert_array_equal(out["OUTPUT1"].data, np.full((2, 16), -1, np.float32))
    assert out["OUTPUT0"].shape == (2, 16)


async def test_requested_output_subset(service: InferenceService) -> None:
    request = add_sub(1, 16, outputs=[RequestedOutput("OUTPUT1")])
    response = await service.infer(request)
    assert [t.name for t in response.outputs] == ["OUTPUT1"]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            add_sub(16, rid="x"),
            "[request id: x] inference request batch-size must be <= 8 for 'add_sub'",
        ),
        (add_sub(9, 16), NOID + "inference request batch-size must be <= 8 for 'add_sub'"),
        (
            add_sub(1, 15),  # both inputs are wrong: Triton names the first of its input map
            NOID + "unexpected shape for input 'INPUT1' for model 'add_sub'. Expected [-1,16], "
            "got [1,15]. " + NOTE,
        ),
        (
            InferRequest("add_sub", inputs=[spec("INPUT0", f32(1, 16))]),
            NOID + "expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
            "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required "
            "input(s).",
        ),
        (
            InferRequest("add_sub", id="abc", inputs=[]),
            "[request id: abc] expected 2 inputs but got 0 inputs for model 'add_sub'. Got "
            "input(s) [], but missing required input(s) ['INPUT0','INPUT1']. Please provide all "
            "required input(s).",
        ),
        (
            # Triton lists the inputs in hash-map order; repokit in request order
            InferRequest(
                "add_sub",
                inputs=[spec(n, f32(1, 16)) for n in ("INPUT0", "INPUT1", "FOO")],
            ),
            NOID + "expected 2 inputs but got 3 inputs for model 'add_sub'. Got input(s) "
            "['FOO','INPUT1','INPUT0'], but missing required input(s) ]. Please provide all "
            "required input(s).",
        ),
        (
            InferRequest("add_sub", inputs=[spec("INPUT0", f32(1, 16)), spec("FOO", f32(1, 16))]),
            "unexpected inference input 'FOO' for model 'add_sub'",
        ),
        (
            add_sub(1, 16, outputs=[RequestedOutput("NOPE")]),
            "unexpected inference output 'NOPE' for model 'add_sub'",
        ),
        (
            InferRequest(
                "add_sub", inputs=[spec("INPUT0", f32(2, 16)), spec("INPUT1", f32(1, 16))]
            ),
            NOID + "input 'INPUT0' batch size does not match other inputs for 'add_sub'",
        ),
        (
            add_sub(0, 16),
            NOID + "input byte size mismatch for input 'INPUT1' for model 'add_sub'. "
            "Expected 64, got 0",
        ),
        (
            InferRequest("add_sub", inputs=[spec("INPUT0", f32()), spec("INPUT1", f32())]),
            NOID + "input 'INPUT1' has no shape but model requires batch dimension for 'add_sub'",
        ),
        (
            InferRequest(
                "add_sub",
                inputs=[
                    spec("INPUT0", f32(1, 16).astype(np.float64), "FP64"),
                    spec("INPUT1", f32(1, 16)),
                ],
            ),
            NOID
            + "inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' expects 'FP32'",
        ),
        (
            InferRequest("opt_in", inputs=[]),
            NOID + "expected number of inputs between 1 and 2 but got 0 inputs for model "
            "'opt_in'. Got input(s) [], but missing required input(s) ['A']. Please provide all "
            "required input(s).",
        ),
        (
            InferRequest("opt_in", inputs=[spec(n, f32(2)) for n in ("A", "B", "C")]),
            NOID + "expected number of inputs between 1 and 2 but got 3 inputs for model "
            "'opt_in'. Got input(s) ['B','C','A'], but missing required input(s) ]. Please "
            "provide all required input(s).",
        ),
        (
            InferRequest("reshape_in", inputs=[spec("X", f32(1, 2, 2))]),
            NOID + "unexpected shape for input 'X' for model 'reshape_in'. Expected [-1,4], got "
            "[1,2,2]. " + NOTE,
        ),
        (
            InferRequest(
                "strin",
                inputs=[InputSpec("S", "BYTES", (2,), np.array([b"hi", b"x"], dtype=object))],
            ),
            NOID + "unexpected shape for input 'S' for model 'strin'. Expected [1], got [2]. ",
        ),
        (
            # a -1 in a request shape (possible over gRPC); message from core infer_request.cc
            InferRequest("dyn2", inputs=[InputSpec("X", "INT32", (2, -1), np.zeros(2, np.int32))]),
            NOID + "All input dimensions should be specified for input 'X' for model 'dyn2', "
            "got [2,-1]",
        ),
    ],
)
async def test_invalid_requests(
    service: InferenceService, request_: InferRequest, message: str
) -> None:
    error = await rejected(service, request_)
    assert (error.code, error.message) == (Code.INVALID_ARG, message)


async def test_optional_input_may_be_left_out(service: InferenceService) -> None:
    response = await service.infer(InferRequest("opt_in", inputs=[spec("A", f32(2))]))
    np.testing.assert_array_equal(response.outputs[0].data, f32(2))


async def test_reshape_goes_to_the_backend_and_back(
    service: InferenceService, controls: Controls
) -> None:
    response = await service.infer(InferRequest("reshape_in", inputs=[spec("X", f32(2, 4))]))
    assert controls.seen[-1].inputs["X"].shape == (2, 2, 2)
    assert controls.seen[-1].inputs["X"].data.shape == (2, 2, 2)
    assert response.outputs[0].shape == (2, 4)
    np.testing.assert_array_equal(response.outputs[0].data, f32(2, 4))


async def test_variable_dims_accept_any_size(service: InferenceService) -> None:
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    response = await service.infer(InferRequest("dyn2", inputs=[spec("X", data, "INT32")]))
    assert response.outputs[0].shape == (2, 3)


async def test_sequence_parameters_are_ignored_without_sequence_batching(
    service: InferenceService, controls: Controls
) -> None:
    # Triton 2.51 answers 200 for sequence_id/start on add_sub (no sequence batcher)
    await service.infer(add_sub(1, 16, sequence_id=5, sequence_start=True, priority=3))
    assert controls.seen[-1].correlation_id == 5
    assert controls.seen[-1].flags == 1


async def test_custom_parameters_reach_the_backend(
    service: InferenceService, controls: Controls
) -> None:
    await service.infer(add_sub(1, 16, parameters={"my_param": "x", "n": 3}))
    assert controls.seen[-1].parameters == {"my_param": "x", "n": 3}


def raw(model: str, payload: bytes) -> InferRequest:
    data = np.frombuffer(payload, dtype=np.uint8)
    return InferRequest(model, inputs=[InputSpec("", "", (len(payload),), data)], raw_input=True)


async def test_raw_request_deduces_the_shape(service: InferenceService) -> None:
    payload = np.array([1, 2, 3], np.float32).tobytes()
    response = await service.infer(raw("identity", payload))
    assert response.outputs[0].shape == (3,)
    np.testing.assert_array_equal(response.outputs[0].data, [1, 2, 3])
    batched = await service.infer(raw("classify", np.arange(4, dtype=np.float32).tobytes()))
    assert batched.outputs[0].shape == (1, 4)


async def test_raw_bytes_input_is_one_string(service: InferenceService) -> None:
    response = await service.infer(raw("strin", b"hello"))
    assert response.outputs[0].data.tolist() == [b"hello"]


@pytest.mark.parametrize(
    ("model", "payload", "message"),
    [
        (
            "add_sub",
            b"\0" * 64,
            "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in "
            "'add_sub' model configuration",
        ),
        (
            "dyn2",
            b"\0" * 16,
            "The shape of the raw input 'X' can not be deduced because there are more than one "
            "variable-sized dimension",
        ),
        (
            "identity",
            b"\0" * 7,
            "input byte size mismatch for input 'raw_input' for model 'identity'. Expected 4, "
            "got 7",
        ),
        (
            "classify",
            b"\0" * 12,
            "input byte size mismatch for input 'raw_input' for model 'classify'. Expected 16, "
            "got 12",
        ),
    ],
)
async def test_raw_request_errors(
    service: InferenceService, model: str, payload: bytes, message: str
) -> None:
    error = await rejected(service, raw(model, payload))
    assert (error.code, error.message) == (Code.INVALID_ARG, NOID + message)


@pytest.mark.parametrize(
    ("model", "version", "code", "message"),
    [
        ("nope", "", Code.NOT_FOUND, "Request for unknown model: 'nope' is not found"),
        (
            "add_sub",
            "7",
            Code.NOT_FOUND,
            "Request for unknown model: 'add_sub' version 7 is not found",
        ),
        (
            "multiver",
            "2",
            Code.NOT_FOUND,
            "Request for unknown model: 'multiver' version 2 is not found",
        ),
        (
            "add_sub",
            "x",
            Code.INVALID_ARG,
            "failed to get model version from specified version string 'x' (details: stol), "
            "version should be an integral value > 0",
        ),
        (
            "add_sub",
            "-1",
            Code.INVALID_ARG,
            "invalid model version specified '-1' , version should be an integral value > 0",
        ),
    ],
)
async def test_version_selection_errors(
    service: InferenceService, model: str, version: str, code: Code, message: str
) -> None:
    request = add_sub(1, 16)
    request.model_name, request.model_version = model, version
    error = await rejected(service, request)
    assert (error.code, error.message) == (code, message)


async def test_latest_ready_version_is_chosen(service: InferenceService) -> None:
    data = np.array([7], np.int32)
    latest = await service.infer(InferRequest("multiver", inputs=[spec("X", data, "INT32")]))
    assert latest.model_version == "3"
    first = await service.infer(
        InferRequest("multiver", model_version="1", inputs=[spec("X", data, "INT32")])
    )
    assert first.model_version == "1"


async def test_decoupled_flag(service: InferenceService) -> None:
    assert service.is_decoupled("decoupled") is True
    assert service.is_decoupled("add_sub") is False
