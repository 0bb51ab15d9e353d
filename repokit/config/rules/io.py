"""Core ``ValidateModelIOConfig`` (§4.3): inputs, outputs, reshape, formats, shape tensors,
non-linear IO and batch inputs/outputs. Triton appends " for <model>" to each message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from repokit.config.diagnostics import Severity
from repokit.config.rules.context import RuleContext
from repokit.protocol.generated import model_config_pb2 as mc

TENSORRT_PLATFORM = "tensorrt_plan"
BatchInput = mc.BatchInput


class _Reshape(Protocol):
    @property
    def shape(self) -> Sequence[int]: ...


class _Tensor(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def data_type(self) -> int: ...
    @property
    def dims(self) -> Sequence[int]: ...
    @property
    def reshape(self) -> _Reshape: ...
    @property
    def is_shape_tensor(self) -> bool: ...
    @property
    def is_non_linear_format_io(self) -> bool: ...
    def HasField(self, field_name: str) -> bool: ...


def element_count(dims: Sequence[int]) -> int:
    """Triton's GetElementCount: -1 when any dim is variable."""
    count = 1
    for dim in dims:
        if dim == -1:
            return -1
        count *= dim
    return count


def _segments(dims: Sequence[int]) -> list[int]:
    out, current = [], 1
    for dim in dims:
        if dim == -1:
            out.append(current)
            current = 1
        else:
            current *= dim
    out.append(current)
    return out


def _completing_backend(ctx: RuleContext) -> str:
    """The backend that may still complete a config's tensors from its model file when Triton
    loads it (auto-complete on), where repokit cannot read that file: TensorFlow SavedModels,
    TensorRT plans, OpenVINO models; "" otherwise (ONNX files are read by the deep check, and
    python models complete their config in model code: --python-auto-complete)."""
    if ctx.options.strict:
        return ""
    config = ctx.config
    if config.platform == "tensorflow_savedmodel":
        return "tensorflow"
    if config.platform == TENSORRT_PLATFORM or config.backend == "tensorrt":
        return "tensorrt"
    if config.backend == "openvino":
        return "openvino"
    return ""


def _check_shape(ctx: RuleContext, side: str, index: int, io: _Tensor) -> None:
    model, path = ctx.name, f"{side}[{index}]"
    if not io.name:
        ctx.report(
            f"{side}-name-missing",
            f"model {side} must specify 'name' for {model}",
            path=f"{path}.name",
        )
        return
    prefix = f"model {side} '{io.name}'"
    completer = _completing_backend(ctx)
    # a backend that completes tensors from a model file repokit does not read: it may fill
    # them in at load, so a missing field is a warning, not a refusal
    severity = Severity.WARNING if completer else None
    unless = (
        f", unless the {completer} backend completes it from the model file at load "
        "(auto-complete is on; repokit does not read that file)"
        if completer
        else ""
    )
    if io.data_type == mc.TYPE_INVALID:
        ctx.report(
            f"{side}-data-type-missing",
            f"{prefix} must specify 'data_type' for {model} (e.g. TYPE_FP32){unless}",
            path=f"{path}.data_type",
            severity=severity,
        )
    if not io.dims:
        ctx.report(
            f"{side}-dims-missing",
            f"{prefix} must specify 'dims' for {model}; scalars are not supported, use dims: "
            f"[ 1 ]{unless}",
            path=f"{path}.dims",
            severity=severity,
        )
        return
    has_reshape = io.HasField("reshape")
    if has_reshape and not io.reshape.shape and ctx.config.max_batch_size == 0:
        ctx.report(
            f"{side}-reshape-empty",
            f"{prefix} cannot have empty reshape for non-batching model as scalar "
            f"tensors are not supported for {model}",
            path=f"{path}.reshape",
        )
        has_reshape = False
    for d, dim in enumerate(io.dims):
        if dim < 1 and dim != -1:
            ctx.report(
                f"{side}-dims-invalid",
                f"{prefix} dimension must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension for {model} (got {dim})",
                path=f"{path}.dims[{d}]",
            )
    if not has_reshape:
        return
    bad_reshape = False
    for d, dim in enumerate(io.reshape.shape):
        if dim < 1 and dim != -1:
            bad_reshape = True
            ctx.report(
                f"{side}-reshape-dims-invalid",
                f"{prefix} reshape dimensions must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension for {model} (got {dim})",
                path=f"{path}.reshape.shape[{d}]",
            )
    if bad_reshape or any(d < 1 and d != -1 for d in io.dims):
        return
    dims_size, reshape_size = element_count(io.dims), element_count(io.reshape.shape)
    mismatch = dims_size != reshape_size and (reshape_size != 0 or dims_size != 1)
    if not mismatch and dims_size == -1:
        dims_seg, reshape_seg = _segments(io.dims), _segments(io.reshape.shape)
        if len(dims_seg) != len(reshape_seg):
            ctx.report(
                f"{side}-reshape-size-mismatch",
                f"{prefix} has different number of variable-size dimensions for dims "
                f"and reshape for {model}",
                path=f"{path}.reshape",
            )
            return
        mismatch = dims_seg != reshape_seg
    if mismatch:
        ctx.report(
            f"{side}-reshape-size-mismatch",
            f"{prefix} has different size for dims and reshape for {model} (dims "
            f"{list(io.dims)}, reshape {list(io.reshape.shape)})",
            path=f"{path}.reshape",
        )


def _check_platform_flags(ctx: RuleContext, side: str, index: int, io: _Tensor) -> None:
    platform, path = ctx.config.platform, f"{side}[{index}]"
    if io.is_shape_tensor and platform != TENSORRT_PLATFORM:
        ctx.report(
            f"{side}-shape-tensor-platform",
            f"shape tensors are only supported for TensorRT platform for {ctx.name} "
            f"({side} '{io.name}', platform '{platform}')",
            path=f"{path}.is_shape_tensor",
        )
    if io.is_non_linear_format_io:
        if platform != TENSORRT_PLATFORM:
            ctx.report(
                f"{side}-non-linear-io-platform",
                f"Non-linear IO format is only supported for the TensorRT platform for {ctx.name}",
                path=f"{path}.is_non_linear_format_io",
            )
        elif len(io.dims) != 3:
            ctx.report(
                f"{side}-non-linear-io-dims",
                f"Non-linear IO format {side} requires 3 dims for {ctx.name}",
                path=f"{path}.dims",
            )


def _check_duplicates(ctx: RuleContext, side: str, tensors: Sequence[_Tensor]) -> None:
    seen: set[str] = set()
    for i, io in enumerate(tensors):
        if io.name and io.name in seen:
            ctx.report(
                f"{side}-name-duplicated",
                f"{side} name '{io.name}' is used more than once; Triton keeps only one "
                "of them and backends may fail",
                path=f"{side}[{i}].name",
            )
        seen.add(io.name)


def check_io(ctx: RuleContext) -> None:
    config = ctx.config
    for i, inp in enumerate(config.input):
        _check_shape(ctx, "input", i, inp)
        if (
            inp.format in (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW)
            and inp.dims
            and len(inp.dims) != 3
        ):
            ctx.report(
                "input-format-dims",
                f"model input NHWC/NCHW require 3 dims for {ctx.name} (input "
                f"'{inp.name}' has {len(inp.dims)})",
                path=f"input[{i}].format",
            )
        _check_platform_flags(ctx, "input", i, inp)
    for i, out in enumerate(config.output):
        _check_shape(ctx, "output", i, out)
        _check_platform_flags(ctx, "output", i, out)
    _check_duplicates(ctx, "input", config.input)
    _check_duplicates(ctx, "output", config.output)
    check_batch_io(ctx)


def check_batch_io(ctx: RuleContext) -> None:
    config, model = ctx.config, ctx.name
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    for i, batch_input in enumerate(config.batch_input):
        path = f"batch_input[{i}]"
        kind = BatchInput.Kind.Name(batch_input.kind)
        if len(batch_input.source_input) != 1:
            ctx.report(
                "batch-input-source-count",
                f"batch input kind '{kind}' expects 1 source input, got "
                f"{len(batch_input.source_input)} for {model}",
                path=f"{path}.source_input",
            )
        if batch_input.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            ctx.report(
                "batch-input-data-type",
                f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {model}",
                path=f"{path}.data_type",
            )
        _check_sources(ctx, path, batch_input.source_input, inputs)
    for i, batch_output in enumerate(config.batch_output):
        path = f"batch_output[{i}]"
        if len(batch_output.source_input) != 1:
            ctx.report(
                "batch-output-source-count",
                "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source "
                f"input, got {len(batch_output.source_input)} for {model}",
                path=f"{path}.source_input",
            )
        _check_sources(ctx, path, batch_output.source_input, inputs)
        targets: set[str] = set()
        for t, target in enumerate(batch_output.target_name):
            if target not in outputs:
                ctx.report(
                    "batch-output-unknown-target",
                    f"unknown target output name '{target}' for {model}; expected one "
                    f"of the model outputs {sorted(outputs)}",
                    path=f"{path}.target_name[{t}]",
                )
            elif target in targets:
                ctx.report(
                    "batch-output-target-duplicated",
                    f"target output name '{target}' can only be specified once for {model}",
                    path=f"{path}.target_name[{t}]",
                )
            targets.add(target)


def _check_sources(ctx: RuleContext, path: str, sources: Sequence[str], inputs: set[str]) -> None:
    for s, source in enumerate(sources):
        if source not in inputs:
            ctx.report(
                "batch-io-unknown-source",
                f"unknown source input name '{source}' for {ctx.name}; expected one of "
                f"the model inputs {sorted(inputs)}",
                path=f"{path}.source_input[{s}]",
            )
