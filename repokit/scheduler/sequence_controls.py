"""Sequence-batcher control tensors, implicit state and request checks (pure numpy).

Control tensors (``sequence_batching.control_input``) are added to every request the sequence
batcher sends to the backend, with shape ``[1]``, or ``[1, 1]`` when the model batches:
START/END/READY take the configured ``[false, true]`` value (int32, fp32 or bool), CORRID the
correlation id in its ``data_type`` (32-bit types keep the low-order bits; STRING ids are BYTES).
A string id on an integer CORRID control is accepted, as Triton 2.51 does, and the model gets
what Triton's memcpy leaves there (measured: "abc" -> 27974191445704707 as UINT64, 3 as INT32):
the id's 4-byte little-endian byte length followed by its UTF-8 bytes, zero padded, cut to the
type's size and read as that type.

Implicit state (``sequence_batching.state``): at START each state input is initialised from
``initial_state`` (zeros, or ``<model_dir>/initial_state/<data_file>``) or zeros, with variable
dims taken as 1 (as Triton's ``SequenceStates::Initialize``); after each request the model's
``output_name`` output becomes the next request's ``input_name`` input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import ConfigError, RepokitError, invalid_arg
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor
from repokit.scheduler.warmup import parse_length_prefixed

_Kind = mc.ModelSequenceBatching.Control
START, READY, END, CORRID = (
    _Kind.CONTROL_SEQUENCE_START,
    _Kind.CONTROL_SEQUENCE_READY,
    _Kind.CONTROL_SEQUENCE_END,
    _Kind.CONTROL_SEQUENCE_CORRID,
)
MAX_STRING_ID = 128
FLAG_START = 1
FLAG_END = 2

CorrelationId = int | str


@dataclass(frozen=True)
class _BoolControl:
    tensor: str
    datatype: str
    values: tuple[npt.NDArray[Any], npt.NDArray[Any]]  # (false, true), read-only


def _readonly(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.flags.writeable = False
    return array


class SequenceControls:
    """Builds the control tensors of one request; parsed once from the config."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self.model = config.name
        self.shape: tuple[int, ...] = (1, 1) if config.max_batch_size > 0 else (1,)
        self._flags: dict[int, _BoolControl] = {}
        self.corrid_tensor: str | None = None
        self.corrid_datatype = "UINT64"
        for control_input in config.sequence_batching.control_input:
            for control in control_input.control:
                if control.kind == CORRID:
                    self.corrid_tensor = control_input.name
                    self.corrid_datatype = datatypes.protocol_name(control.data_type)
                    continue
                if control.int32_false_true:
                    dtype: Any = np.int32
                    pair: list[Any] = list(control.int32_false_true)
                    name = "INT32"
                elif control.fp32_false_true:
                    dtype, pair, name = np.float32, list(control.fp32_false_true), "FP32"
                else:
                    dtype, pair, name = np.bool_, list(control.bool_false_true), "BOOL"
                if len(pair) != 2:
                    continue  # rejected at load by the config validation
                values = (
                    _readonly(np.full(self.shape, pair[0], dtype=dtype)),
                    _readonly(np.full(self.shape, pair[1], dtype=dtype)),
                )
                self._flags[control.kind] = _BoolControl(control_input.name, name, values)

    def tensors(
        self, *, start: bool, end: bool, ready: bool, corrid: CorrelationId
    ) -> dict[str, InferTensor]:
        out: dict[str, InferTensor] = {}
        for kind, flag in ((START, start), (END, end), (READY, ready)):
            control = self._flags.get(kind)
            if control is not None:
                data = control.values[1 if flag else 0]
                out[control.tensor] = InferTensor(
                    control.tensor, control.datatype, self.shape, data
                )
        if self.corrid_tensor is not None:
            data = self._corrid_array(corrid)
            out[self.corrid_tensor] = InferTensor(
                self.corrid_tensor, self.corrid_datatype, self.shape, data
            )
        return out

    def _corrid_array(self, corrid: CorrelationId) -> npt.NDArray[Any]:
        if self.corrid_datatype == "BYTES":
            text = corrid if isinstance(corrid, str) else str(corrid) if corrid else ""
            return np.full(self.shape, text.encode(), dtype=object)
        dtype = datatypes.BY_PROTOCOL[self.corrid_datatype].numpy
        if isinstance(corrid, str):
            return _string_in_integer(corrid, np.dtype(dtype)).reshape(self.shape)
        value = int(corrid)
        bits = 8 * (dtype.itemsize if dtype is not None else 8)
        value &= (1 << bits) - 1
        return np.array([value], dtype=np.uint64).astype(dtype).reshape(self.shape)

    def check_request(self, corrid: CorrelationId, batch_size: int) -> None:
        """Triton's request-time sequence checks (INVALID_ARG)."""
        if corrid == 0 or corrid == "":
            raise invalid_arg(
                f"inference request to model '{self.model}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        if isinstance(corrid, str) and len(corrid) > MAX_STRING_ID:
            raise invalid_arg("string correlation ID cannot be longer than 128 characters")
        if batch_size > 1:
            raise invalid_arg(
                f"inference request to model '{self.model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        if self.corrid_tensor is None:
            return
        if self.corrid_datatype == "BYTES" and not isinstance(corrid, str):
            # Triton 2.51 builds a malformed BYTES tensor here (400 from the backend); refuse
            # it up front with a message that says what is wrong
            raise invalid_arg(
                f"sequence batching control '{self.corrid_tensor}' data-type is 'UINT64', but "
                f"model '{self.model}' expects '{self.corrid_datatype}'"
            )


def _string_in_integer(corrid: str, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    raw = corrid.encode()
    data = (len(raw).to_bytes(4, "little") + raw).ljust(dtype.itemsize, b"\0")
    return np.frombuffer(data[: dtype.itemsize], dtype=dtype.newbyteorder("<")).astype(dtype)


def missing_start_error(corrid: CorrelationId, model: str) -> RepokitError:
    return invalid_arg(
        f"inference request for sequence {corrid} to model '{model}' must specify the START "
        "flag on the first request of the sequence"
    )


@dataclass(frozen=True)
class StateSpec:
    input_name: str
    output_name: str
    datatype: str
    initial: npt.NDArray[Any]  # read-only, shape with the batch dim when the model batches


class ImplicitStates:
    """The model's implicit states: initial values and the output -> input hand-over."""

    def __init__(self, config: mc.ModelConfig, model_dir: Path) -> None:
        batch = (1,) if config.max_batch_size > 0 else ()
        specs: list[StateSpec] = []
        for state in config.sequence_batching.state:
            dt = datatypes.from_config(state.data_type)
            if dt is None:
                raise ConfigError(f"state '{state.input_name}' has an invalid data type")
            shape = batch + tuple(1 if d == -1 else int(d) for d in state.dims)
            initial = _zeros(dt.protocol, shape)
            if state.initial_state and state.initial_state[0].data_file:
                initial = _from_file(
                    model_dir / "initial_state" / state.initial_state[0].data_file,
                    state.initial_state[0].data_file,
                    dt.protocol,
                    shape,
                )
            specs.append(StateSpec(state.input_name, state.output_name, dt.protocol, initial))
        self.specs = tuple(specs)
        self._by_output = {s.output_name: s for s in specs}

    def __bool__(self) -> bool:
        return bool(self.specs)

    def initial(self) -> dict[str, InferTensor]:
        return {
            s.input_name: InferTensor(s.input_name, s.datatype, s.initial.shape, s.initial)
            for s in self.specs
        }

    def null(self, current: dict[str, InferTensor]) -> dict[str, InferTensor]:
        """All-zero states shaped like ``current`` (for the filler of an empty slot)."""
        return {
            name: InferTensor(name, t.datatype, t.shape, _zeros(t.datatype, t.shape))
            for name, t in current.items()
        }

    def take_outputs(
        self,
        outputs: list[InferTensor],
        current: dict[str, InferTensor],
        shown: frozenset[str] = frozenset(),
    ) -> tuple[list[InferTensor], dict[str, InferTensor]]:
        """Split a result into (client outputs, next state); a state output named in
        ``shown`` (one the config lists as an output and the client asked for) is both."""
        if not self.specs:
            return outputs, current
        state = dict(current)
        kept: list[InferTensor] = []
        for tensor in outputs:
            spec = self._by_output.get(tensor.name)
            if spec is None or tensor.name in shown:
                kept.append(tensor)
            if spec is not None:
                state[spec.input_name] = InferTensor(
                    spec.input_name, tensor.datatype, tensor.shape, tensor.data
                )
        return kept, state


def _zeros(datatype: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
    if datatype == "BYTES":
        array = np.full(shape, b"", dtype=object)
    else:
        dt = datatypes.BY_PROTOCOL[datatype]
        array = np.zeros(shape, dtype=dt.numpy if dt.numpy is not None else np.uint16)
    return _readonly(array)


def _from_file(
    path: Path, file_name: str, datatype: str, shape: tuple[int, ...]
) -> npt.NDArray[Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"failed to read initial state file '{path}': {exc.strerror}") from exc
    count = int(np.prod(shape)) if shape else 1
    dt = datatypes.BY_PROTOCOL[datatype]
    if datatype == "BYTES":
        return _readonly(parse_length_prefixed(raw, count, file_name).reshape(shape))
    expected = count * dt.itemsize
    if len(raw) < expected:
        raise ConfigError(
            f"initial_state setting expects {expected} bytes, but the data provided from "
            f"{file_name}only has {len(raw)} bytes"
        )
    np_dtype = dt.numpy if dt.numpy is not None else np.dtype(np.uint16)
    return _readonly(np.frombuffer(raw, dtype=np_dtype, count=count).reshape(shape))
