"""repokit's implementation of Triton's ``triton_python_backend_utils`` module.

A python-backend model does ``import triton_python_backend_utils as pb_utils``; the instance
process (:mod:`repokit.backends.python.stub`) registers this module under that name before it
imports the model. It runs inside that process only, so it imports nothing but numpy and the
standard library.

Supported: Tensor (numpy, DLPack, BYTES as object arrays, BF16 inputs behind DLPack as in
Triton), InferenceRequest (as passed to ``execute``, and built by the model for BLS: ``exec``,
``async_exec``, ``exec(decoupled=True)``; ``trace=request.trace()`` traces the BLS request as
a child of the request's trace), InferenceTrace, InferenceResponse, InferenceResponseSender,
TritonError, TritonModelException, Logger, MetricFamily / Metric, load_model / unload_model /
is_model_ready, ModelConfig (for ``auto_complete_config``), the lookup helpers and the type
conversion helpers and constants of Triton's module. BLS and senders live in
:mod:`~repokit.backends.python.pb_bls`, logging, metrics and model control in
:mod:`~repokit.backends.python.pb_services`. Not supported: GPU tensors (CPU-only server).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.python import pb_bls
from repokit.backends.python.pb_args import (
    MISSING,
    as_text,
    incompatible_call,
    incompatible_constructor,
    is_int,
    is_list_of,
    is_str,
    is_text,
)
from repokit.backends.python.pb_bls import InferenceTrace as InferenceTrace
from repokit.backends.python.pb_bls import ResponseIterator as ResponseIterator
from repokit.backends.python.pb_bls import ResponseSender as InferenceResponseSender
from repokit.backends.python.pb_model_config import ModelConfig as ModelConfig
from repokit.backends.python.pb_runtime import RUNTIME
from repokit.backends.python.pb_services import Logger as Logger
from repokit.backends.python.pb_services import LogLevel as LogLevel
from repokit.backends.python.pb_services import Metric as Metric
from repokit.backends.python.pb_services import MetricFamily as MetricFamily
from repokit.backends.python.pb_services import MetricKind as MetricKind
from repokit.backends.python.pb_services import is_model_ready as is_model_ready
from repokit.backends.python.pb_services import load_model as load_model
from repokit.backends.python.pb_services import unload_model as unload_model
from repokit.protocol import datatypes

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# TYPE_* name -> numpy type, as Triton's helper (``bool`` for TYPE_BOOL; no TYPE_BF16)
_CONFIG_TO_NUMPY: dict[str, Any] = {
    d.config_name: d.numpy.type for d in datatypes.BY_CONFIG_NAME.values() if d.numpy is not None
} | {"TYPE_BOOL": bool}
# TYPE_* enum values of model_config.proto, in order from TYPE_BOOL = 1 to TYPE_STRING = 13
_ENUM_TO_NUMPY: tuple[Any, ...] = (
    None,
    *(datatypes.numpy_dtype(datatypes.protocol_name(value)).type for value in range(1, 14)),
)


# --- errors -----------------------------------------------------------------------------
class TritonError:
    """An error a model returns in an InferenceResponse (``code`` defaults to INTERNAL)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    _NAMES = (
        "UNKNOWN",
        "INTERNAL",
        "NOT_FOUND",
        "INVALID_ARG",
        "UNAVAILABLE",
        "UNSUPPORTED",
        "ALREADY_EXISTS",
        "CANCELLED",
    )

    def __init__(self, message: str, code: int = MISSING) -> None:
        if not is_str(message) or (code is not MISSING and not is_int(code)):
            given = (message,) if code is MISSING else (message, code)
            raise incompatible_constructor(_ERROR_SIGNATURE, given)
        if code is MISSING:
            code = self.INTERNAL
        self._message = message
        self._code = int(code) if 0 <= int(code) < len(self._NAMES) else self.INTERNAL

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def code_name(self) -> str:
        return self._NAMES[self._code]

    @classmethod
    def code_of(cls, name: str) -> int:
        return cls._NAMES.index(name) if name in cls._NAMES else cls.INTERNAL

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self.code_name()})"


_ERROR_SIGNATURE = "triton_python_backend_utils.TritonError(message: str, code: int = INTERNAL)"
_TENSOR_SIGNATURE = "triton_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)"
_DLPACK_SIGNATURE = "(self: str, arg0: object) -> triton_python_backend_utils.Tensor"
_REQUEST_SIGNATURE = (
    "triton_python_backend_utils.InferenceRequest(request_id: str = '', correlation_id: "
    "object = 0, inputs: List[Tensor], requested_output_names: List[str], model_name: str, "
    "model_version: int = -1, flags: int = 0, timeout: int = 0, preferred_memory: "
    "PreferredMemory = None, trace: InferenceTrace = None, parameters: object = None)"
)
_RESPONSE_SIGNATURE = (
    "triton_python_backend_utils.InferenceResponse(output_tensors: List[Tensor] = [], "
    "error: TritonError = None)"
)
EMPTY_TENSOR_NAME = "Tensor name cannot be an empty string."
DLPACK_UNSUPPORTED = (
    # Triton 2.51's text, with the run of spaces of its C++ line continuation
    "Provided tensor is not supported. Tensor must be a DLPack capsule         or have "
    "`__dlpack__` and `__dlpack_device__` attributes"
)


class TritonModelException(Exception):
    """Raised by this module's API on misuse (Triton's pb_utils.TritonModelException)."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


def _changed(**values: Any) -> dict[str, Any]:
    """The keyword arguments of an InferenceRequest that differ from their defaults."""
    defaults = {
        "request_id": "",
        "correlation_id": 0,
        "flags": 0,
        "model_version": -1,
        "timeout": 0,
    }
    return {k: v for k, v in values.items() if v is not defaults[k] and v != defaults[k]}


# --- tensors ------------------------------------------------------------------------------
class _Capsule:
    """Wraps a raw DLPack capsule so ``numpy.from_dlpack`` can import it (CPU only)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _as_tensor_array(name: Any, data: Any) -> npt.NDArray[Any]:
    if not is_str(name) or not isinstance(data, np.ndarray):
        raise incompatible_constructor(_TENSOR_SIGNATURE, (name, data))
    if not name:
        raise TritonModelException(EMPTY_TENSOR_NAME)
    if data.dtype.kind in _TEXT_KINDS:
        return data.astype(object)
    return data


_TEXT_KINDS = frozenset("SU")


class Tensor:
    """A named CPU tensor backed by a numpy array (BYTES tensors are object arrays; BF16
    tensors hold their raw 16-bit words and, as in Triton, are reachable only via DLPack).
    Like Triton's class it takes no attributes of its own (``__slots__``), which also makes
    the many tensors of a large batch cheap to build."""

    __slots__ = ("_array", "_bf16", "_name")

    def __init__(self, name: str, data: Any, *, bf16: bool = False) -> None:
        self._name = name
        if (
            type(name) is str
            and name
            and type(data) is np.ndarray
            and data.dtype.kind not in _TEXT_KINDS
        ):
            self._array: npt.NDArray[Any] = data
        else:
            self._array = _as_tensor_array(self._name, data)
        self._bf16 = bf16

    @classmethod
    def _wrap(cls, name: str, array: npt.NDArray[Any], bf16: bool) -> Tensor:
        """A tensor of an array the instance process received (already checked)."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._bf16 = bf16
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        if self._bf16:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
                "from_dlpack() instead."
            )
        return self._array

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def is_cpu(self) -> bool:
        return True

    def triton_dtype(self) -> int | None:
        if self._bf16:
            return 14
        return numpy_to_triton_type(self._array.dtype.type)

    def triton_datatype(self) -> str | None:
        """The protocol datatype when numpy cannot tell it (BF16), else None."""
        return "BF16" if self._bf16 else None

    def raw_array(self) -> npt.NDArray[Any]:
        """The backing array (BF16: the raw uint16 words)."""
        return self._array

    def to_dlpack(self) -> Any:
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not support BYTES tensors")
        if self._bf16:
            raise TritonModelException(
                "BF16 tensors cannot be exported through numpy's DLPack (numpy has no bfloat16)"
            )
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        if not is_str(name):
            raise incompatible_call("from_dlpack", _DLPACK_SIGNATURE, (name, capsule))
        if not name:
            raise TritonModelException(EMPTY_TENSOR_NAME)
        if capsule is None:
            raise TritonModelException(DLPACK_UNSUPPORTED)
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            array = np.from_dlpack(source)
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise TritonModelException(f"unable to import DLPack tensor '{name}': {exc}") from None
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class InferenceRequest:
    """A request as ``execute`` receives it, or one a model builds for BLS (no attributes of
    its own, as in Triton)."""

    __slots__ = (
        "_correlation_id",
        "_flags",
        "_inputs",
        "_key",
        "_model_name",
        "_model_version",
        "_parameters",
        "_release_flags",
        "_request_id",
        "_requested",
        "_sender",
        "_timeout",
        "_trace",
    )

    def __init__(
        self,
        model_name: str = MISSING,
        inputs: Sequence[Tensor] = MISSING,
        requested_output_names: Iterable[str] = MISSING,
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        parameters: str | dict[str, Any] | None = None,
        model_version: int = -1,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: InferenceTrace = MISSING,
        key: int = 0,
    ) -> None:
        if not (
            is_text(model_name)
            and (trace is MISSING or isinstance(trace, InferenceTrace))
            and is_list_of(inputs, Tensor, none_ok=True)
            and is_list_of(requested_output_names, (str, bytes))
            and is_text(request_id)
            and correlation_id is not None
            and is_int(flags)
            and is_int(model_version)
            and is_int(timeout)
        ):
            raise incompatible_constructor(
                _REQUEST_SIGNATURE,
                kwargs={
                    "model_name": model_name,
                    "inputs": inputs,
                    "requested_output_names": requested_output_names,
                    **_changed(request_id=request_id, correlation_id=correlation_id, flags=flags,
                               model_version=model_version, timeout=timeout),
                    **({} if trace is MISSING else {"trace": trace}),
                },
            )  # fmt: skip
        model_name, request_id = as_text(model_name), as_text(request_id)
        requested_output_names = [as_text(name) for name in requested_output_names]
        if any(tensor is None for tensor in inputs):
            raise TritonModelException(
                f"Input tensor for request with id '{request_id}' and model name "
                f"'{model_name}' should not be empty."
            )
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._model_name = model_name
        self._inputs = list(inputs)
        self._requested = set(requested_output_names)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        if parameters is None:
            parameters = "{}"
        elif not isinstance(parameters, (str, dict)):
            raise TritonModelException(f"Expect dict, got {type(parameters)}")
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters)
        self._model_version = model_version
        self._timeout = timeout
        self._key = key
        self._trace: InferenceTrace | None = None if trace is MISSING else trace
        self._sender: InferenceResponseSender | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    @classmethod
    def _received(
        cls,
        inputs: list[Tensor],
        requested: set[str],
        request_id: str,
        correlation_id: int | str,
        flags: int,
        parameters: str,
        key: int,
    ) -> InferenceRequest:
        """A request the instance process received for ``execute`` (fields already checked
        by the server; the same state :meth:`__init__` leaves)."""
        request = cls.__new__(cls)
        request._model_name = ""
        request._inputs = inputs
        request._requested = requested
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._flags = flags
        request._parameters = parameters
        request._model_version = -1
        request._timeout = 0
        request._key = key
        request._trace = None
        request._sender = None
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> set[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def get_request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def parameters(self) -> str:
        return self._parameters

    def timeout(self) -> int:
        return self._timeout

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def key(self) -> int:
        return self._key

    def trace(self) -> InferenceTrace:
        """The request's trace: a request the model received has its own (traced or not); a
        request the model built has the one it was given (by default none)."""
        trace = self._trace
        if trace is None:
            trace = self._trace = InferenceTrace._of(self._key)
        return trace

    def is_cancelled(self) -> bool:
        link = RUNTIME.link
        if link is None or not self._key:
            return False
        if self._key not in link.cancelled:
            link.poll()
        return self._key in link.cancelled

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            self._sender = InferenceResponseSender(self)
        return self._sender

    def response_sender_if_used(self) -> InferenceResponseSender | None:
        return self._sender

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: when ``execute`` returns, the request
        goes back to its iterative sequence instead of being answered (see the stub)."""
        if flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            RUNTIME.reschedule_requested = True
        elif flags != TRITONSERVER_REQUEST_RELEASE_ALL:
            raise TritonModelException("Unsupported release flags provided.")
        self._release_flags = flags

    def release_flags(self) -> int:
        return self._release_flags

    def exec(self, decoupled: bool = False) -> Any:
        return pb_bls.execute(self, decoupled)

    def async_exec(self, decoupled: bool = False) -> Any:
        return pb_bls.async_execute(self, decoupled)


def _all_tensors(items: list[Any]) -> bool:
    """Whether every item is a ``Tensor`` (a loop: ``all`` over a comprehension costs about
    twice as much for a response's few outputs)."""
    for item in items:  # noqa: SIM110 - a generator for all() costs more
        if type(item) is not Tensor:
            return False
    return True


class InferenceResponse:
    """The response for one request: output tensors, or an error (no attributes of its own,
    as in Triton)."""

    __slots__ = ("_error", "_outputs", "_parameters")

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = MISSING,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if (
            type(output_tensors) is list
            and error is None
            and parameters is None
            and _all_tensors(output_tensors)
        ):
            self._outputs: list[Tensor] = output_tensors[:]  # the common case, checked at once
            self._error = None
            self._parameters: dict[str, Any] = {}
            return
        if output_tensors is MISSING:
            self._outputs = []
        elif type(output_tensors) is list and all(type(t) is Tensor for t in output_tensors):
            self._outputs = output_tensors[:]  # the common case, checked at once
        elif is_list_of(output_tensors, Tensor, none_ok=True):
            self._outputs = list(output_tensors)
        else:
            raise incompatible_constructor(
                _RESPONSE_SIGNATURE, kwargs={"output_tensors": output_tensors, "error": error}
            )
        if error is not None and not isinstance(error, TritonError):
            raise incompatible_constructor(
                _RESPONSE_SIGNATURE, kwargs={"output_tensors": output_tensors, "error": error}
            )
        if any(tensor is None for tensor in self._outputs):
            raise TritonModelException("Output tensor for inference response should not be empty.")
        self._error = error
        if parameters is None:
            self._parameters = {}
            return
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        self._parameters = dict(parameters or {})

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def parameter_dict(self) -> dict[str, Any]:
        return self._parameters


# --- lookup helpers ---------------------------------------------------------------------------
def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    if type(inference_request) is InferenceRequest:  # the common case, without method calls
        for tensor in inference_request._inputs:
            if type(tensor) is Tensor and tensor._name == name:
                return tensor
            if type(tensor) is not Tensor and tensor.name() == name:
                return tensor
        return None
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _config_entry(model_config: dict[str, Any], key: str, name: str) -> dict[str, Any] | None:
    for entry in model_config.get(key, []):
        if entry.get("name") == name:
            return dict(entry)
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _config_entry(model_config, "output", name)


def requested_output_names(inference_request: InferenceRequest) -> set[str]:
    return inference_request.requested_output_names()


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


# --- type helpers ---------------------------------------------------------------------------
def triton_string_to_numpy(triton_type_string: str) -> Any:
    return _CONFIG_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    return _ENUM_TO_NUMPY[data_type] if 0 < data_type < len(_ENUM_TO_NUMPY) else None


def numpy_to_triton_type(data_type: Any) -> int | None:
    if data_type in (np.object_, np.bytes_):
        return 13
    for value, candidate in enumerate(_ENUM_TO_NUMPY):
        if candidate is not None and candidate == data_type:
            return value
    return None


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> npt.NDArray[Any] | None:
    """Length-prefixed bytes of a BYTES tensor as a 0-d object array (as Triton's helper)."""
    if input_tensor.size == 0:
        return np.empty(0, dtype=object)
    if input_tensor.dtype.kind not in ("O", "S"):
        return None
    parts: list[bytes] = []
    for item in np.ravel(input_tensor, order="C").tolist():
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    result = np.empty((), dtype=object)
    result[()] = b"".join(parts)
    return result


def deserialize_bytes_tensor(encoded_tensor: bytes) -> npt.NDArray[np.object_]:
    data = bytes(encoded_tensor)
    items: list[bytes] = []
    offset = 0
    while offset + 4 <= len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        items.append(data[offset : offset + length])
        offset += length
    result = np.empty(len(items), dtype=object)
    result[:] = items
    return result
