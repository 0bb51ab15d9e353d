"""pb_utils refuses bad arguments as Triton's python backend does: a TypeError with the call's
signature for a wrong type (None, int, set ...), TritonModelException for a bad value. The
cases are those of Triton's qa/L0_backend_python/argument_validation model; the same calls
against real Triton 2.51 are compared in tests/differential/test_pb_arguments_vs_triton.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from repokit.backends.python import pb_utils

ARRAY = np.asarray([1, 2], dtype=np.int32)
INPUTS = [pb_utils.Tensor("INPUT0", ARRAY)]


def _request(**kwargs: Any) -> pb_utils.InferenceRequest:
    args: dict[str, Any] = {"inputs": INPUTS, "model_name": "m", "requested_output_names": ["o"]}
    args.update(kwargs)
    return pb_utils.InferenceRequest(**args)


TYPE_ERRORS: dict[str, Callable[[], Any]] = {
    "request inputs None": lambda: _request(inputs=None),
    "request inputs str": lambda: _request(inputs="abc"),
    "request model_name None": lambda: _request(model_name=None),
    "request output names [None]": lambda: _request(requested_output_names=[None]),
    "request output names None": lambda: _request(requested_output_names=None),
    "request output names set": lambda: _request(requested_output_names={"o"}),
    "request correlation_id None": lambda: _request(correlation_id=None),
    "request request_id None": lambda: _request(request_id=None),
    "request model_version None": lambda: _request(model_version=None),
    "request flags None": lambda: _request(flags=None),
    "request timeout None": lambda: _request(timeout=None),
    "request without arguments": lambda: pb_utils.InferenceRequest(),
    "response None": lambda: pb_utils.InferenceResponse(output_tensors=None),  # type: ignore[arg-type]
    "response [1]": lambda: pb_utils.InferenceResponse(output_tensors=[1]),  # type: ignore[list-item]
    "response error str": lambda: pb_utils.InferenceResponse([], error="boom"),  # type: ignore[arg-type]
    "tensor name None": lambda: pb_utils.Tensor(None, ARRAY),  # type: ignore[arg-type]
    "tensor data None": lambda: pb_utils.Tensor("OUTPUT0", None),
    "tensor data list": lambda: pb_utils.Tensor("OUTPUT0", [1, 2]),
    "tensor empty name and None": lambda: pb_utils.Tensor("", None),
    "from_dlpack name None": lambda: pb_utils.Tensor.from_dlpack(None, ARRAY),  # type: ignore[arg-type]
    "log level None": lambda: pb_utils.Logger.log("Invalid Level", None),  # type: ignore[arg-type]
    "log level int": lambda: pb_utils.Logger.log("Invalid Level", 1),  # type: ignore[arg-type]
    "log_info None": lambda: pb_utils.Logger.log_info(None),  # type: ignore[arg-type]
    "log_warn None": lambda: pb_utils.Logger.log_warn(None),  # type: ignore[arg-type]
    "log_error None": lambda: pb_utils.Logger.log_error(None),  # type: ignore[arg-type]
    "log_verbose None": lambda: pb_utils.Logger.log_verbose(None),  # type: ignore[arg-type]
    "error message None": lambda: pb_utils.TritonError(None),  # type: ignore[arg-type]
    "error code str": lambda: pb_utils.TritonError("x", "y"),  # type: ignore[arg-type]
}

MODEL_EXCEPTIONS: dict[str, tuple[Callable[[], Any], str]] = {
    "request inputs [None]": (
        lambda: _request(inputs=[None]),
        "Input tensor for request with id '' and model name 'm' should not be empty.",
    ),
    "request correlation_id float": (
        lambda: _request(correlation_id=1.5),
        "Correlation ID must be integer or string",
    ),
    "response [None]": (
        lambda: pb_utils.InferenceResponse(output_tensors=[None]),  # type: ignore[list-item]
        "Output tensor for inference response should not be empty.",
    ),
    "tensor empty name": (
        lambda: pb_utils.Tensor("", ARRAY),
        "Tensor name cannot be an empty string.",
    ),
    "from_dlpack None": (
        lambda: pb_utils.Tensor.from_dlpack("OUTPUT0", None),
        "Provided tensor is not supported. Tensor must be a DLPack capsule",
    ),
    "from_dlpack empty name": (
        lambda: pb_utils.Tensor.from_dlpack("", None),
        "Tensor name cannot be an empty string.",
    ),
}


@pytest.mark.parametrize("case", sorted(TYPE_ERRORS))
def test_wrong_types_raise_type_errors_naming_the_call(case: str) -> None:
    with pytest.raises(TypeError, match=r"^\w+\(\): incompatible (constructor|function) arguments"):
        TYPE_ERRORS[case]()


@pytest.mark.parametrize("case", sorted(MODEL_EXCEPTIONS))
def test_bad_values_raise_triton_model_exception(case: str) -> None:
    call, message = MODEL_EXCEPTIONS[case]
    with pytest.raises(pb_utils.TritonModelException) as raised:
        call()
    assert str(raised.value).startswith(message)


def test_type_error_says_what_the_call_was_invoked_with() -> None:
    with pytest.raises(TypeError) as raised:
        pb_utils.Logger.log("Invalid Level", 1)  # type: ignore[arg-type]
    assert str(raised.value).endswith("Invoked with: 'Invalid Level', 1")
    with pytest.raises(TypeError) as raised:
        _request(flags=None)
    assert "kwargs: model_name='m'" in str(raised.value) and "flags=None" in str(raised.value)


def test_valid_calls_still_work() -> None:
    assert _request(correlation_id=5).correlation_id() == 5
    assert _request(correlation_id="id-5").correlation_id() == "id-5"
    assert _request().correlation_id() == 0
    assert _request(inputs=tuple(INPUTS), flags=np.int64(1)).flags() == 1
    pb_utils.InferenceRequest(requested_output_names=[], inputs=[], model_name="m")
    pb_utils.InferenceResponse(output_tensors=[])
    pb_utils.InferenceResponse(INPUTS)
    assert pb_utils.TritonError("x", pb_utils.TritonError.CANCELLED).code_name() == "CANCELLED"
    pb_utils.Logger.log("Level unspecified")
    pb_utils.Logger.log("warned", pb_utils.Logger.WARNING)


def test_request_strings_may_be_bytes() -> None:
    """pybind11 takes bytes for a std::string: a BLS model that reads the model to call from
    a BYTES input (qa/python_models/bls_simple: ``model_name.as_numpy()[0]``) passes bytes."""
    request = _request(model_name=b"m", request_id=b"r-1", requested_output_names=[b"o"])
    assert request.model_name() == "m"
    assert request.request_id() == "r-1"
    assert request.requested_output_names() == {"o"}
