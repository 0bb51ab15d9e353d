"""Triton's request checks (core ``InferenceRequest::Normalize``), in Triton's order and words.

``ModelIO`` is built once per loaded version from its config; ``prepare`` turns a protocol
``InferRequest`` into the ``BackendRequest`` a scheduler runs:

1. raw binary request: deduce the single input's name, datatype and shape (§7.2);
2. requested outputs must exist (``unexpected inference output``, no request-id prefix);
3. input count against required/optional inputs (the exact "expected N inputs ..." text);
4. batch dimension: every input's first dim, equal across inputs, stripped from the shape;
5. batch size <= max_batch_size;
6. per input: known name, datatype, shape against dims (-1 matches anything), reshape, byte
   size (element count for BYTES).
Steps 3 to 6 walk the inputs as Triton does, in its input map's order
(:mod:`repokit.core.triton_input_order`: the "Got input(s)" list, and which input an error names
when several are wrong); they run in request order and are repeated in Triton's order only once
the request has failed, so a good request pays nothing for it.
Request-time messages carry ``[request id: <id>] `` (``<id_unknown>`` without an id) exactly
where Triton adds it. Sequence parameters on models without a sequence batcher are accepted
and ignored, as Triton 2.51 does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.base import BackendRequest
from repokit.config.rules.triton_words import BATCH_DIMENSION_NOTE, missing_inputs_text
from repokit.core.triton_input_order import triton_order
from repokit.errors import RepokitError, invalid_arg
from repokit.protocol import datatypes
from repokit.protocol.array_shape import representable
from repokit.protocol.bytes_tensor import deserialize_bytes_tensor
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.plain_request import InputPlan
from repokit.protocol.types import InferRequest, InferTensor, InputSpec, SharedMemoryRef

RAW_INPUT_NAME = "raw_input"
SEQUENCE_START, SEQUENCE_END = 1, 2

ShmReader = Callable[[SharedMemoryRef], npt.NDArray[np.uint8]]


@dataclass(frozen=True)
class InputInfo:
    name: str
    datatype: str  # protocol name
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None
    optional: bool
    is_shape_tensor: bool
    check_byte_size: bool
    dtype: np.dtype[Any]


@dataclass(frozen=True)
class OutputInfo:
    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None


def _dims_text(dims: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _wire_dtype(datatype: str) -> np.dtype[Any]:
    info = datatypes.from_protocol(datatype)
    if info is None or info.numpy is None:
        return np.dtype("<u2") if datatype == "BF16" else np.dtype(object)
    return info.numpy


class ModelIO:
    """A model version's inputs and outputs, prepared once at load."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self.model_name = config.name
        self.max_batch_size = config.max_batch_size
        skip_bytes = config.platform.startswith("tensorrt_")
        self.inputs: dict[str, InputInfo] = {}
        for item in config.input:
            datatype = datatypes.protocol_name(item.data_type)
            self.inputs[item.name] = InputInfo(
                name=item.name,
                datatype=datatype,
                dims=tuple(item.dims),
                reshape=tuple(item.reshape.shape) if item.HasField("reshape") else None,
                optional=item.optional,
                is_shape_tensor=item.is_shape_tensor,
                check_byte_size=not item.allow_ragged_batch and not skip_bytes,
                dtype=_wire_dtype(datatype),
            )
        self.outputs: dict[str, OutputInfo] = {
            o.name: OutputInfo(
                o.name,
                datatypes.protocol_name(o.data_type),
                tuple(o.dims),
                tuple(o.reshape.shape) if o.HasField("reshape") else None,
            )
            for o in config.output
        }
        self.reshaped_outputs = any(o.reshape is not None for o in self.outputs.values())
        self.input_order = [item.name for item in config.input]
        self.required = [name for name in self.input_order if not self.inputs[name].optional]
        self.all_outputs = tuple(self.outputs)
        # inputs the unchecked plain path (repokit.core.plain_path) may take as they come:
        # name -> (datatype, dims, dtype, elements per batch item or -1 with variable dims);
        # None when some input needs the full checks every time (BYTES, reshape, shape
        # tensor, ragged)
        self.fast_inputs: InputPlan | None = {}
        for info in self.inputs.values():
            if (
                info.datatype == "BYTES"
                or info.reshape is not None
                or info.is_shape_tensor
                or not info.check_byte_size
            ):
                self.fast_inputs = None
                break
            count = 1
            for dim in info.dims:
                count *= dim
            count = -1 if any(dim < 0 for dim in info.dims) else count
            self.fast_inputs[info.name] = (info.datatype, info.dims, info.dtype, count)


@dataclass(slots=True)
class PreparedRequest:
    backend_request: BackendRequest
    batch_size: int  # 0 when the model does not batch
    # the shared-memory regions the request reads or writes: held while it runs
    shm_regions: tuple[str, ...] = ()


def _raw_input(io: ModelIO, request: InferRequest, prefix: str) -> None:
    """Give the raw request's single input the model input's name, datatype and shape."""
    if len(request.inputs) != 1 or len(io.input_order) != 1:
        raise invalid_arg(
            f"{prefix}Raw request must only have 1 input (found {len(request.inputs)}) to be "
            f"deduced but got {len(io.input_order)} inputs in '{io.model_name}' model "
            "configuration"
        )
    spec = request.inputs[0]
    info = io.inputs[io.input_order[0]]
    shape: list[int] = [1] if io.max_batch_size != 0 else []
    dynamic_axis = -1
    fixed = 1
    for dim in info.dims:
        if dim == -1:
            if dynamic_axis != -1:
                raise invalid_arg(
                    f"{prefix}The shape of the raw input '{info.name}' can not be deduced "
                    "because there are more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            fixed *= dim
        shape.append(dim)
    raw = spec.data if spec.data is not None else np.empty(0, dtype=np.uint8)
    raw_bytes = raw.view(np.uint8).reshape(-1)
    if info.datatype == "BYTES":
        if dynamic_axis != -1 or fixed != 1:
            raise invalid_arg(
                f"{prefix}For BYTE datatype raw input '{info.name}', the model must have input "
                "shape [1]"
            )
        element = np.empty(1, dtype=object)
        element[0] = raw_bytes.tobytes()
        spec.data = element
    else:
        if dynamic_axis != -1:
            unit = fixed * info.dtype.itemsize
            shape[dynamic_axis] = raw_bytes.nbytes // unit if unit else 0
        spec.data = raw_bytes
    spec.name = spec.name or RAW_INPUT_NAME
    spec.datatype = info.datatype
    spec.shape = tuple(shape)


def _count_error(io: ModelIO, names: list[str], prefix: str) -> RepokitError:
    return invalid_arg(
        missing_inputs_text(
            io.model_name, names, list(io.required), len(io.input_order), prefix=prefix
        )
    )


def _input_array(
    info: InputInfo,
    input_id: str,
    data: npt.NDArray[Any],
    shape: tuple[int, ...],
    model: str,
    prefix: str,
) -> npt.NDArray[Any]:
    """Check the byte size (element count for BYTES) and view the data with ``shape``."""
    count = 1
    for dim in shape:
        count *= dim
    itemsize = info.dtype.itemsize
    if not count and not representable(shape, itemsize):
        raise invalid_arg(
            f"{prefix}input '{input_id}' for model '{model}' has shape {_dims_text(shape)}, "
            "which cannot be represented even without elements: the product of its non-zero "
            f"dimensions times the element size ({itemsize} bytes) must stay below 2^63"
        )
    if info.datatype == "BYTES":
        if data.dtype != object:
            data = deserialize_bytes_tensor(
                data.view(np.uint8).reshape(-1).data,
                count,
                input_name=input_id,
                model_name=model,
                request_prefix=prefix,
            )
        elif info.check_byte_size and data.size > count:
            # Triton serialises typed/JSON strings and stops at the first element too many
            raise invalid_arg(
                f"{prefix}unexpected number of string elements {count + 1} for inference input "
                f"'{input_id}' for model '{model}', expecting {count}"
            )
        elif info.check_byte_size and data.size != count:
            raise invalid_arg(
                f"{prefix}expected {count} string elements for inference input '{input_id}' "
                f"for model '{model}', got {data.size}"
            )
        return data.reshape(shape) if data.size == count else data
    expected = count * info.dtype.itemsize
    if info.check_byte_size and data.nbytes != expected:
        raise invalid_arg(
            f"{prefix}input byte size mismatch for input '{input_id}' for model '{model}'. "
            f"Expected {expected}, got {data.nbytes}"
        )
    if data.dtype != info.dtype:
        if data.dtype.itemsize == info.dtype.itemsize and data.dtype.kind == info.dtype.kind:
            data = data.astype(info.dtype, copy=False)
        else:
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8).view(info.dtype)
    return data.reshape(shape) if data.size == count else data


def _checked_inputs(
    io: ModelIO,
    names: list[str],
    specs: list[InputSpec],
    sources: list[npt.NDArray[Any]],
    prefix: str,
    *,
    known_first: bool = False,
) -> tuple[int, dict[str, InferTensor]]:
    """Triton's batch, datatype, shape and byte-size checks of the inputs, in the given order:
    the batch size and the model's tensors. ``known_first``: every name is looked up before
    any other check (Triton does so for models that do not batch)."""
    model = io.model_name
    if known_first:
        for name in names:
            if name not in io.inputs:
                raise invalid_arg(f"unexpected inference input '{name}' for model '{model}'")
    shapes: list[tuple[int, ...]] = [tuple(spec.shape) for spec in specs]
    batch_size = 0
    if io.max_batch_size > 0:
        for index, (name, spec) in enumerate(zip(names, specs, strict=True)):
            info = io.inputs.get(name)
            if info is None:
                raise invalid_arg(f"unexpected inference input '{name}' for model '{model}'")
            if info.is_shape_tensor:
                continue
            if not spec.shape:
                raise invalid_arg(
                    f"{prefix}input '{spec.name}' has no shape but model requires batch "
                    f"dimension for '{model}'"
                )
            if batch_size == 0:
                batch_size = spec.shape[0]
            elif spec.shape[0] != batch_size:
                raise invalid_arg(
                    f"{prefix}input '{spec.name}' batch size does not match other inputs for "
                    f"'{model}'"
                )
            shapes[index] = tuple(spec.shape[1:])
    if batch_size > io.max_batch_size:
        raise invalid_arg(
            f"{prefix}inference request batch-size must be <= {io.max_batch_size} for '{model}'"
        )
    tensors: dict[str, InferTensor] = {}
    for name, spec, shape, data in zip(names, specs, shapes, sources, strict=True):
        info = io.inputs.get(name)
        if info is None:
            raise invalid_arg(f"unexpected inference input '{name}' for model '{model}'")
        input_id = spec.name
        if spec.datatype != info.datatype:
            raise invalid_arg(
                f"{prefix}inference input '{input_id}' data-type is '{spec.datatype}', but "
                f"model '{model}' expects '{info.datatype}'"
            )
        if info.is_shape_tensor:
            shape = tuple(spec.shape)
        matches = len(shape) == len(info.dims)
        if matches:
            for got, want in zip(shape, info.dims, strict=True):
                if got == -1:
                    raise invalid_arg(
                        f"{prefix}All input dimensions should be specified for input "
                        f"'{input_id}' for model '{model}', got {_dims_text(list(spec.shape))}"
                    )
                if want != -1 and want != got:
                    matches = False
                    break
        if not matches:
            full = ((-1,) if io.max_batch_size > 0 else ()) + info.dims
            note = BATCH_DIMENSION_NOTE if io.max_batch_size > 0 else ""
            raise invalid_arg(
                f"{prefix}unexpected shape for input '{input_id}' for model '{model}'. "
                f"Expected {_dims_text(full)}, got {_dims_text(list(spec.shape))}. {note}"
            )
        if info.reshape is not None:
            variable = [got for got, want in zip(shape, info.dims, strict=True) if want == -1]
            reshaped = []
            for dim in info.reshape:
                reshaped.append(variable.pop(0) if dim == -1 and variable else dim)
            shape = tuple(reshaped)
        with_batch = shape if batch_size == 0 or info.is_shape_tensor else (batch_size, *shape)
        array = _input_array(info, input_id, data, with_batch, model, prefix)
        tensors[name] = InferTensor(name, info.datatype, with_batch, array, dict(spec.parameters))
    return batch_size, tensors


def prepare(io: ModelIO, request: InferRequest, read_shm: ShmReader) -> PreparedRequest:
    prefix = f"[request id: {request.id or '<id_unknown>'}] "
    model = io.model_name
    # shared-memory inputs are resolved first, as Triton's frontends do
    sources: list[npt.NDArray[Any]] = []
    seen: set[str] = set()
    for spec in request.inputs:
        if spec.name in seen:
            raise invalid_arg(f"{prefix}input '{spec.name}' already exists in request")
        seen.add(spec.name)
        if spec.shm is not None:
            sources.append(read_shm(spec.shm))
        elif spec.data is not None:
            sources.append(spec.data)
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{spec.name}' for model '{model}' in "
                "request."
            )
    if request.raw_input:
        _raw_input(io, request, prefix)
        data = request.inputs[0].data
        assert data is not None
        sources[0] = data
        names = [io.input_order[0]]
    else:
        names = [spec.name for spec in request.inputs]
    for output in request.outputs:
        if output.name not in io.outputs:
            raise invalid_arg(f"unexpected inference output '{output.name}' for model '{model}'")
    if len(names) > len(io.input_order) or len(names) < len(io.required):
        raise _count_error(io, names, prefix)
    try:
        batch_size, tensors = _checked_inputs(io, names, request.inputs, sources, prefix)
    except RepokitError:
        if len(names) < 2:
            raise
        # Triton names the first wrong input in the order it walks them (its input map's)
        order = {name: index for index, name in enumerate(triton_order(names))}
        walk = sorted(range(len(names)), key=lambda index: order[names[index]])
        _checked_inputs(
            io,
            [names[i] for i in walk],
            [request.inputs[i] for i in walk],
            [sources[i] for i in walk],
            prefix,
            known_first=True,
        )
        raise
    checked = prepared(io, request, tensors, batch_size)
    regions = [spec.shm.region for spec in request.inputs if spec.shm is not None]
    regions += [o.shm.region for o in request.outputs if o.shm is not None]
    if regions:
        checked.shm_regions = tuple(regions)
    return checked


def prepared(
    io: ModelIO, request: InferRequest, tensors: dict[str, InferTensor], batch_size: int
) -> PreparedRequest:
    """The checked request for the backend: its input tensors, the outputs to produce (every
    output when none is named), its sequence flags and the fields it carries along (built with
    positional arguments and no generator: this runs for every request)."""
    flags = SEQUENCE_START if request.sequence_start else 0
    if request.sequence_end:
        flags |= SEQUENCE_END
    outputs = request.outputs
    requested = tuple(dict.fromkeys([o.name for o in outputs])) if outputs else io.all_outputs
    parameters = request.parameters
    backend_request = BackendRequest(
        tensors,
        requested,
        dict(parameters) if parameters else {},
        request.id,
        request.sequence_id,
        flags,
        request.priority,
        request.timeout_us,
    )
    return PreparedRequest(backend_request, batch_size)
