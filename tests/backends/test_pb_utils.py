"""repokit's triton_python_backend_utils, in-process (the parts models call directly)."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from repokit.backends.python import pb_utils


def test_tensor_accessors_and_dlpack_round_trip() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", array)
    assert tensor.name() == "X" and tensor.shape() == [2, 3] and tensor.is_cpu()
    assert tensor.as_numpy() is array
    assert tensor.triton_dtype() == 11
    again = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    np.testing.assert_array_equal(again.as_numpy(), array)
    from_object = pb_utils.Tensor.from_dlpack("Z", array)
    assert from_object.name() == "Z"


def test_tensor_rejects_non_arrays_and_converts_fixed_width_strings() -> None:
    with pytest.raises(TypeError, match=r"incompatible constructor arguments"):
        pb_utils.Tensor("X", [1, 2])
    strings = pb_utils.Tensor("S", np.array([b"ab", b"c"]))
    assert strings.as_numpy().dtype == object
    with pytest.raises(pb_utils.TritonModelException, match="DLPack"):
        strings.to_dlpack()


def test_objects_take_no_new_attributes_as_in_triton() -> None:
    tensor = pb_utils.Tensor("X", np.zeros(2, np.float32))
    request = pb_utils.InferenceRequest(model_name="m", inputs=[tensor], requested_output_names=[])
    response = pb_utils.InferenceResponse([tensor])
    for obj in (tensor, request, response):
        with pytest.raises(AttributeError):
            obj.extra = 1  # type: ignore[union-attr]


def test_tensor_name_is_a_string_and_non_array_subclasses_are_checked() -> None:
    with pytest.raises(TypeError, match=r"Invoked with: 7, array"):
        pb_utils.Tensor(7, np.zeros(1))  # type: ignore[arg-type]
    matrix = np.ma.masked_array([1.0, 2.0])  # an ndarray subclass: taken as it is
    assert pb_utils.Tensor("M", matrix).as_numpy() is matrix
    assert pb_utils.Tensor("U", np.array(["a", "bc"])).as_numpy().dtype == object


def test_response_and_error() -> None:
    error = pb_utils.TritonError("nope", pb_utils.TritonError.INVALID_ARG)
    response = pb_utils.InferenceResponse(output_tensors=[], error=error)
    assert response.has_error() and response.error() is error
    assert error.message() == "nope" and error.code_name() == "INVALID_ARG"
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        pb_utils.InferenceResponse(output_tensors=[np.zeros(1)])  # type: ignore[list-item]
    ok = pb_utils.InferenceResponse([pb_utils.Tensor("O", np.zeros(1))], parameters='{"a": 1}')
    assert pb_utils.get_output_tensor_by_name(ok, "O") is not None
    assert pb_utils.get_output_tensor_by_name(ok, "P") is None
    assert json.loads(ok.parameters()) == {"a": 1}


def test_request_helpers_and_unsupported_bls() -> None:
    request = pb_utils.InferenceRequest(
        model_name="m", inputs=[pb_utils.Tensor("A", np.zeros(1))], requested_output_names=["O"]
    )
    assert pb_utils.get_input_tensor_by_name(request, "A") is not None
    assert pb_utils.get_input_tensor_by_name(request, "B") is None
    assert pb_utils.requested_output_names(request) == {"O"}
    with pytest.raises(pb_utils.TritonModelException, match="BLS"):
        request.exec()


def test_config_lookups_and_type_helpers() -> None:
    config = {"input": [{"name": "A", "data_type": "TYPE_FP32"}], "output": []}
    assert pb_utils.get_input_config_by_name(config, "A") == config["input"][0]
    assert pb_utils.get_output_config_by_name(config, "A") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(config)
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    assert pb_utils.numpy_to_triton_type(np.int64) == 9
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    wire = pb_utils.serialize_byte_tensor(np.array([b"ab", "c"], dtype=object))
    assert wire is not None
    assert pb_utils.deserialize_bytes_tensor(wire.item()).tolist() == [b"ab", b"c"]


def test_logger_writes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    line = inspect.currentframe().f_lineno  # type: ignore[union-attr]
    pb_utils.Logger.log_info("hello")
    pb_utils.Logger.log_error("bad")
    pb_utils.Logger.log("v", pb_utils.Logger.VERBOSE)
    err = capsys.readouterr().err
    assert f"INFO test_pb_utils.py:{line + 1}] hello" in err
    assert f"ERROR test_pb_utils.py:{line + 2}] bad" in err


def test_model_config_auto_complete_rules() -> None:
    config = pb_utils.ModelConfig(
        json.dumps({"name": "m", "max_batch_size": 4, "input": [], "output": []})
    )
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="specified max_batch_size 2"):
        config.set_max_batch_size(2)
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        config.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError, match="is missing 'dims' property"):
        config.add_output({"name": "C", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="contains property other than"):
        config.set_model_transaction_policy({"streaming": True})
    # Triton's wording (L0_model_config autofill_noplatform/python/*_wrong_property)
    with pytest.raises(ValueError) as wrong:
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4], "shape": [4]})
    assert str(wrong.value).endswith(
        "contains property other than 'name', 'data_type', 'dims' and 'optional'."
    )
    with pytest.raises(ValueError) as wrong:
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    assert str(wrong.value).endswith("contains property other than 'name', 'data_type' and 'dims'.")
    # a policy the config file sets cannot be changed, only repeated
    config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError) as changed:
        config.set_model_transaction_policy({"decoupled": True})
    assert str(changed.value) == (
        "trying to change decoupled property in auto-complete-config for model 'm', which is "
        "already set to 'False'."
    )
    assert config.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}]
    assert config.as_dict()["dynamic_batching"] == {}


def test_release_flags_reschedule_is_recorded_and_other_flags_refused() -> None:
    # the stub reads the flags when execute returns (e2e: tests/e2e/test_python_rescheduling.py)
    request = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], key=1)
    assert request.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    assert request.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported release flags"):
        request.set_release_flags(7)
