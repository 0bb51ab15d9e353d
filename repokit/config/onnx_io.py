"""ONNX model signatures, Triton's onnxruntime autocomplete, and config-vs-model checks.

Offline equivalents of what Triton's onnxruntime backend does at load time:

* ``autocomplete_onnx_config`` = ``ModelState::AutoCompleteConfig``: it runs only when the config
  lists no inputs or no outputs. A model "can batch" when every input and output has a dynamic
  first dimension; then an unset max_batch_size becomes the server's default-max-batch-size
  (4) and, above 1, ``dynamic_batching {}`` is added when no scheduler is configured. A model
  that cannot batch while max_batch_size > 0 is an autofill error. Missing inputs/outputs are
  filled from the model (batch dimension dropped; a scalar gets dims [1], plus an empty reshape
  when batching).
* ``check_onnx_config`` = the instance's ``ValidateInputs``/``ValidateOutputs``: every config
  tensor must exist in the model with the same datatype and a compatible shape (a dynamic
  model dimension matches anything, fixed dimensions must be equal, ranks must agree, the
  first model dimension must be dynamic when the config batches), and every model input must be
  fed by the config (an input, a sequence control, a state or a batch input).

``check_onnx_config`` is what ``repokit validate --deep`` calls; rule ids start with ``onnx-``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.onnx_shapes import shape_problem
from repokit.config.suggest import did_you_mean
from repokit.protocol.generated import model_config_pb2 as mc

DEFAULT_MAX_BATCH_SIZE = 4  # tritonserver --backend-config=default-max-batch-size default
DYNAMIC = -1
# operator -> indices of its inputs that TensorRT treats as shape tensors
_SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Resize": (3,),
    "Slice": (1, 2, 3, 4),
    "Range": (0, 1, 2),
}

# onnx TensorProto.DataType values -> model config TYPE_*
_ONNX_TO_CONFIG: dict[int, int] = {
    1: mc.TYPE_FP32,
    2: mc.TYPE_UINT8,
    3: mc.TYPE_INT8,
    4: mc.TYPE_UINT16,
    5: mc.TYPE_INT16,
    6: mc.TYPE_INT32,
    7: mc.TYPE_INT64,
    8: mc.TYPE_STRING,
    9: mc.TYPE_BOOL,
    10: mc.TYPE_FP16,
    11: mc.TYPE_FP64,
    12: mc.TYPE_UINT32,
    13: mc.TYPE_UINT64,
    16: mc.TYPE_BF16,
}


class OnnxModelError(Exception):
    """The ONNX file cannot be read or uses something Triton cannot express."""


@dataclass(frozen=True)
class OnnxTensor:
    name: str
    data_type: int  # mc.TYPE_*; mc.TYPE_INVALID when Triton has no equivalent
    dims: tuple[int, ...]  # -1 for dynamic (symbolic or unknown) dimensions
    shape_operand: bool = False  # an int input used as a shape (a TensorRT shape tensor)
    rank_known: bool = True  # False: the model file does not record the shape at all

    @property
    def type_name(self) -> str:
        return str(mc.DataType.Name(self.data_type))


@dataclass(frozen=True)
class OnnxSignature:
    inputs: tuple[OnnxTensor, ...]
    outputs: tuple[OnnxTensor, ...]

    def input(self, name: str) -> OnnxTensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> OnnxTensor | None:
        return next((t for t in self.outputs if t.name == name), None)

    @property
    def can_batch(self) -> bool:
        """Triton's rule: every input and output has a dynamic first dimension."""
        return all(t.dims and t.dims[0] == DYNAMIC for t in (*self.inputs, *self.outputs))


def _tensor(value: object, shape_operands: set[str]) -> OnnxTensor:
    name = str(value.name)  # type: ignore[attr-defined]
    type_proto = value.type  # type: ignore[attr-defined]
    if not type_proto.HasField("tensor_type"):
        raise OnnxModelError(f"'{name}' is not a tensor (sequences and maps are not supported)")
    tensor_type = type_proto.tensor_type
    dims: tuple[int, ...] = ()
    if tensor_type.HasField("shape"):
        dims = tuple(
            int(d.dim_value) if d.HasField("dim_value") else DYNAMIC for d in tensor_type.shape.dim
        )
    data_type = _ONNX_TO_CONFIG.get(int(tensor_type.elem_type), mc.TYPE_INVALID)
    is_int = data_type in (mc.TYPE_INT32, mc.TYPE_INT64)
    return OnnxTensor(name, data_type, dims, is_int and name in shape_operands)


def read_onnx_signature(path: Path) -> OnnxSignature:
    """Inputs (initializers excluded) and outputs of an ONNX file, without its weights. The
    outputs' shapes are ONNX's shape inference over the graph, as onnxruntime reports them
    (an Identity of a [-1,2] input declared [-1,-1] is [-1,2]: Triton compares that)."""
    import onnx

    model_file = path / "model.onnx" if path.is_dir() else path
    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except FileNotFoundError:
        raise OnnxModelError(f"'{model_file}' does not exist") from None
    except Exception as exc:
        raise OnnxModelError(f"'{model_file}' is not a readable ONNX model: {exc}") from None
    # outputs as onnxruntime (and so Triton) sees them: their inferred shapes; a model ONNX
    # cannot infer keeps its declared ones
    with contextlib.suppress(Exception):
        model = onnx.shape_inference.infer_shapes(model)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    shape_operands: set[str] = set()
    for node in graph.node:
        for index in _SHAPE_OPERANDS.get(node.op_type, ()):
            if index < len(node.input):
                shape_operands.add(node.input[index])
    try:
        inputs = tuple(
            _tensor(v, shape_operands) for v in graph.input if v.name not in initializers
        )
        outputs = tuple(_tensor(v, set()) for v in graph.output)
    except OnnxModelError as exc:
        raise OnnxModelError(f"'{model_file}': {exc}") from None
    return OnnxSignature(inputs, outputs)


def _fill_io(target: object, tensors: tuple[OnnxTensor, ...], max_batch_size: int) -> None:
    for tensor in tensors:
        io = target.add()  # type: ignore[attr-defined]
        io.name = tensor.name
        io.data_type = tensor.data_type
        dims = list(tensor.dims[1:] if max_batch_size > 0 else tensor.dims)
        if not dims:
            dims = [1]
            if max_batch_size > 0:
                io.reshape.SetInParent()
        io.dims.extend(dims)


def autocomplete_onnx_config(
    config: mc.ModelConfig,
    signature: OnnxSignature,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> tuple[list[str], str]:
    """Complete ``config`` in place as Triton's onnxruntime backend does.

    Returns (what was filled, as field names; an autofill error message or "")."""
    filled: list[str] = []
    has_inputs = bool(config.input) or bool(config.batch_input)
    if has_inputs and config.output:
        return filled, ""
    if signature.can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
            filled.append("max_batch_size")
        scheduler = config.WhichOneof("scheduling_choice")
        if config.max_batch_size > 1 and scheduler is None:
            config.dynamic_batching.SetInParent()
            filled.append("dynamic_batching")
    elif config.max_batch_size != 0:
        return filled, (
            f"autofill failed for model '{config.name}': model does not support batching while "
            "non-zero max_batch_size is specified"
        )
    if not has_inputs:
        _fill_io(config.input, signature.inputs, config.max_batch_size)
        filled.append("input")
    if not config.output:
        _fill_io(config.output, signature.outputs, config.max_batch_size)
        filled.append("output")
    return filled, ""


_COUNTED_CONTROLS = (
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START,
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END,
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY,
    mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID,
)


def expected_input_count(config: mc.ModelConfig) -> int:
    """The number of model inputs Triton's onnxruntime backend expects (ModelInstanceState's
    ``expected_input_cnt``): the config inputs that are not optional, one per batch input, one
    per sequence control kind among start, end, ready and correlation id, one per state."""
    count = sum(1 for io in config.input if not io.optional) + len(config.batch_input)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        kinds = {c.kind for control in sequence.control_input for c in control.control}
        count += sum(1 for kind in _COUNTED_CONTROLS if kind in kinds) + len(sequence.state)
    return count


def _fed_inputs(config: mc.ModelConfig) -> set[str]:
    """Model inputs the server feeds besides config.input: controls, states, batch inputs."""
    names: set[str] = set()
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        names.update(c.name for c in sequence.control_input)
        names.update(s.input_name for s in sequence.state)
    for batch_input in config.batch_input:
        names.update(batch_input.target_name)
    return names


def _shape_text(dims: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


class TensorChecker:
    """Config tensors against a model's; rule ids start with ``prefix`` ("onnx", ...)."""

    def __init__(
        self,
        config: mc.ModelConfig,
        model: str,
        file: str,
        prefix: str = "onnx",
        triton_words: bool | None = None,
    ) -> None:
        self.config = config
        self.model = model or config.name
        self.file = file
        self.prefix = prefix
        # Triton's words and rules of its onnxruntime (and tensorflow SavedModel) loading:
        # counts first, "unexpected inference input", the shape rules of onnx_shapes
        self.triton_words = prefix == "onnx" if triton_words is None else triton_words
        # tensorflow SavedModels: a model input the config leaves out is allowed (only more
        # config inputs than the model has are refused); onnxruntime refuses both
        self.unfed_inputs_allowed = False
        self.found: list[Diagnostic] = []
        self.input_count_differs = False  # onnx: Triton's count error stands for the names

    def error(self, rule: str, message: str, path: str = "") -> None:
        rule = f"{self.prefix}-{rule.removeprefix('onnx-')}"
        self.found.append(Diagnostic(rule, Severity.ERROR, self.model, message, self.file, path))

    def check_side(
        self,
        side: str,
        declared: Sequence[Any],
        actual: tuple[OnnxTensor, ...],
    ) -> None:
        by_name = {t.name: t for t in actual}
        if self.triton_words and side == "input":
            self.check_input_count(declared, actual)
        self.check_tensors(side, declared, by_name.get, sorted(by_name), list_names=True)

    def check_input_count(self, declared: Sequence[Any], actual: tuple[OnnxTensor, ...]) -> None:
        """Triton's onnxruntime backend compares the counts first: every model input must be
        fed (config inputs, sequence controls and states, batch inputs) and nothing else."""
        names = {io.name for io in declared}
        expected = expected_input_count(self.config)
        if expected == len(actual) or (self.unfed_inputs_allowed and expected < len(actual)):
            return
        self.input_count_differs = True
        model_names = {t.name for t in actual}
        unfed = sorted(model_names - names - _fed_inputs(self.config))
        strangers = [io.name for io in declared if io.name not in model_names]
        detail = [
            *(["the config does not feed " + ", ".join(f"'{n}'" for n in unfed)] if unfed else []),
            *(["the model has no " + ", ".join(f"'{n}'" for n in strangers)] if strangers else []),
        ]
        self.error(
            "onnx-input-missing" if expected < len(actual) else "onnx-input-unknown",
            f"unable to load model '{self.config.name}', configuration expects {expected} "
            f"inputs, model provides {len(actual)}" + (f" ({'; '.join(detail)})" if detail else ""),
            "input",
        )

    def check_tensors(
        self,
        side: str,
        declared: Sequence[Any],
        lookup: Callable[[str], OnnxTensor | None],
        names: Sequence[str],
        list_names: bool,
    ) -> None:
        """Each config tensor of ``side``: present in the model (``lookup``), same datatype,
        compatible shape; ``names`` are the model's names, for suggestions."""
        batching = self.config.max_batch_size > 0
        for index, io in enumerate(declared):
            path = f"{side}[{index}]"
            tensor = lookup(io.name)
            if tensor is None:
                if side == "input" and self.input_count_differs:
                    continue  # said by the count
                hint = did_you_mean(io.name, names)
                allowed = ", ".join(names) or "(none)"
                if self.triton_words:  # Triton's backend's words
                    message = f"unexpected inference {side} '{io.name}', allowed {side}s are: "
                    message += allowed + hint
                else:
                    tail = f"; the model's {side}s are: {allowed}" if list_names else ""
                    message = f"{side} '{io.name}' does not exist in the model{hint}{tail}"
                self.error(f"onnx-{side}-unknown", message, f"{path}.name")
                continue
            if io.data_type != tensor.data_type and tensor.data_type != mc.TYPE_INVALID:
                self.error(
                    f"onnx-{side}-data-type-mismatch",
                    (f"unable to load model '{self.config.name}', " if self.triton_words else "")
                    + f"configuration expects datatype {mc.DataType.Name(io.data_type)} for "
                    f"{side} '{io.name}', model provides {tensor.type_name}",
                    f"{path}.data_type",
                )
            if not tensor.rank_known:
                continue
            dims = tuple(io.reshape.shape) if io.HasField("reshape") else tuple(io.dims)
            if self.triton_words:
                self.check_onnx_shape(side, io, path, dims, tensor.dims, batching)
            else:
                self.check_dims(side, io.name, path, dims, tensor.dims, batching)

    def check_onnx_shape(
        self,
        side: str,
        io: Any,
        path: str,
        dims: tuple[int, ...],
        model_dims: tuple[int, ...],
        batching: bool,
    ) -> None:
        """What Triton's onnxruntime backend refuses, in its words (:mod:`.onnx_shapes`)."""
        problem = shape_problem(self.config, side, io, model_dims)
        if not problem:
            return
        field = f"{path}.reshape.shape" if io.HasField("reshape") else f"{path}.dims"
        if batching and model_dims and model_dims[0] != DYNAMIC:
            rule, field = f"onnx-{side}-batch-unsupported", "max_batch_size"
        elif len(dims) + int(batching) != len(model_dims):
            rule = f"onnx-{side}-rank-mismatch"
        else:
            rule = f"onnx-{side}-dims-mismatch"
            model_rest = model_dims[1:] if batching else model_dims
            for axis, (want, have) in enumerate(zip(dims, model_rest, strict=True)):
                if want != have and (side == "output" or have != DYNAMIC):
                    field = f"{field}[{axis}]"  # the first dimension that differs
                    break
        self.error(rule, problem, field)

    def check_dims(
        self,
        side: str,
        name: str,
        path: str,
        dims: tuple[int, ...],
        model_dims: tuple[int, ...],
        batching: bool,
    ) -> None:
        field = (
            f"{path}.reshape.shape" if path and self._has_reshape(side, name) else f"{path}.dims"
        )
        if not model_dims:  # a scalar: Triton only checks that every config dim is 1
            if not batching and any(d != 1 for d in dims):
                self.error(
                    f"onnx-{side}-dims-mismatch",
                    f"{side} '{name}' is a scalar in the model; the config must give dims [1], "
                    f"not {_shape_text(dims)}",
                    field,
                )
            return
        if batching and model_dims[0] != DYNAMIC:
            self.error(
                f"onnx-{side}-batch-unsupported",
                f"max_batch_size is {self.config.max_batch_size} but the model's {side} '{name}' "
                f"has shape {_shape_text(model_dims)}: its first dimension must be dynamic (-1) "
                "for the model to batch; set max_batch_size: 0 or export the model with a "
                "dynamic batch dimension",
                "max_batch_size",
            )
            return
        debatched = model_dims[1:] if batching else model_dims
        if len(debatched) != len(dims):
            extra = " (plus the batch dimension)" if batching else ""
            self.error(
                f"onnx-{side}-rank-mismatch",
                f"{side} '{name}' has {len(dims)} dims {_shape_text(dims)} in the config{extra} "
                f"but the model's shape is {_shape_text(model_dims)}",
                field,
            )
            return
        for axis, (want, have) in enumerate(zip(dims, debatched, strict=True)):
            if want != DYNAMIC and have != DYNAMIC and want != have:
                self.error(
                    f"onnx-{side}-dims-mismatch",
                    f"{side} '{name}' dims {_shape_text(dims)} differ from the model's shape "
                    f"{_shape_text(model_dims)} at dimension {axis}: config {want}, model {have}",
                    f"{field}[{axis}]",
                )

    def _has_reshape(self, side: str, name: str) -> bool:
        tensors = self.config.input if side == "input" else self.config.output
        return any(t.name == name and t.HasField("reshape") for t in tensors)

    def check_unfed_inputs(self, signature: OnnxSignature) -> None:
        """Every model input must be fed: Triton refuses a model whose config leaves one out
        ("unable to load model '...', configuration expects N inputs, model provides M")."""
        if self.input_count_differs:
            return  # said by the count
        fed = {i.name for i in self.config.input} | _fed_inputs(self.config)
        model_names = {t.name for t in signature.inputs}
        strangers = [i.name for i in self.config.input if i.name not in model_names]
        for tensor in signature.inputs:
            if tensor.name in fed:
                continue
            meant = [s for s in strangers if did_you_mean(s, [tensor.name])]
            if meant:
                instead = f"; the config lists '{meant[0]}' instead, which the model does not have"
            elif strangers:
                listed = ", ".join(f"'{s}'" for s in strangers)
                instead = f"; the config lists {listed}, which the model does not have"
            else:
                instead = (
                    f"; the config lists {len(self.config.input)} input(s) and the model has "
                    f"{len(signature.inputs)}"
                )
            self.error(
                "onnx-input-missing",
                f"the model has input '{tensor.name}' ({tensor.type_name} "
                f"{_shape_text(tensor.dims)}) that the config does not feed (not an input, a "
                f"sequence control, a state or a batch input){instead}",
                "input",
            )


def check_config_against_signature(
    config: mc.ModelConfig, signature: OnnxSignature, model: str = "", file: str = ""
) -> list[Diagnostic]:
    """Contradictions between a complete config and the model's signature (errors)."""
    checker = TensorChecker(config, model, file)
    checker.check_side("input", config.input, signature.inputs)
    checker.check_side("output", config.output, signature.outputs)
    checker.check_unfed_inputs(signature)
    return checker.found


def check_onnx_config(
    config: mc.ModelConfig,
    model_path: Path,
    model: str = "",
    file: str = "",
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    autocomplete: bool = True,
) -> list[Diagnostic]:
    """``repokit validate`` (unless --no-deep) for onnxruntime models: autocomplete a copy of
    ``config`` as Triton would (unless ``autocomplete`` is False: --strict), then report what
    contradicts the model at ``model_path`` (a model.onnx file or a directory holding one).
    ``config`` itself is not modified."""
    name = model or config.name
    try:
        signature = read_onnx_signature(model_path)
    except OnnxModelError as exc:
        return [Diagnostic("onnx-model-unreadable", Severity.ERROR, name, str(exc), file)]
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    failure = ""
    if autocomplete:
        _filled, failure = autocomplete_onnx_config(completed, signature, default_max_batch_size)
    if failure:
        return [
            Diagnostic(
                "onnx-autofill-failed", Severity.ERROR, name, failure, file, "max_batch_size"
            )
        ]
    return check_config_against_signature(completed, signature, name, file)
