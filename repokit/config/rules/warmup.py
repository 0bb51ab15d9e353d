"""Model warmup (§4.9, core ``TritonModelInstance::GenerateWarmupData``). Warmup samples become
real inference requests, so they are also checked like requests (required inputs, data types,
shapes, batch size) before the load can succeed."""

from __future__ import annotations

import os
from pathlib import Path

from repokit.config.rules.context import RuleContext
from repokit.config.rules.io import element_count
from repokit.config.rules.state import byte_size
from repokit.config.rules.triton_words import (
    BATCH_DIMENSION_NOTE,
    NO_REQUEST_ID,
    dims_text,
    join_path,
    missing_inputs_text,
    unreadable_file,
)
from repokit.errors import RepokitError
from repokit.protocol import datatypes
from repokit.protocol.bytes_tensor import deserialize_bytes_tensor
from repokit.protocol.generated import model_config_pb2 as mc

WARMUP_FOLDER = "warmup"


def _type_name(data_type: int) -> str:
    return mc.DataType.Name(data_type)


def check_warmup(ctx: RuleContext) -> None:
    config = ctx.config
    if config.HasField("ensemble_scheduling"):
        return  # the ensemble rules own this case
    inputs = {io.name: io for io in config.input}
    required = [io.name for io in config.input if not io.optional]
    for s, sample in enumerate(config.model_warmup):
        if sample.batch_size == 0:
            continue  # Triton skips these samples
        path = f"model_warmup[{s}]"
        label = sample.name or str(s)
        variable = False
        for key in sorted(sample.inputs):
            if element_count(list(sample.inputs[key].dims)) == -1:
                variable = True
                ctx.report(
                    "warmup-dims-variable",
                    "warmup setting expects all variable-size dimensions are specified "
                    f"for input '{key}' (sample '{label}')",
                    path=f"{path}.inputs[{key}].dims",
                    triton="warmup setting expects all variable-size dimensions are "
                    f"specified for input '{key}'",
                )
        if variable:
            continue
        for key in sorted(sample.inputs):
            _check_input_data(ctx, f"{path}.inputs[{key}]", key, sample.inputs[key])
        _check_against_model(ctx, path, label, sample, inputs, required)


def _check_input_data(ctx: RuleContext, path: str, key: str, data: mc.ModelWarmup.Input) -> None:
    choice = data.WhichOneof("input_data_type")
    if choice is None:
        ctx.report(
            "warmup-data-missing",
            f"warmup setting expects input '{key}' to have input_data_type set (one of "
            "zero_data, random_data, input_data_file)",
            path=path,
            triton=f"{NO_REQUEST_ID}warmup setting expects input '{key}' to have "
            "input_data_type set",
        )
        return
    if choice != "input_data_file":
        return
    file_path = ctx.model.path / WARMUP_FOLDER / data.input_data_file
    rel = ctx.relative(file_path)
    try:
        size = os.stat(file_path).st_size if file_path.is_file() else -1
    except OSError:
        size = -1
    if size < 0:
        ctx.report(
            "warmup-file-missing",
            f"failed to open text file for read {rel}: warmup input_data_file "
            f"'{data.input_data_file}' must exist under <model>/warmup/",
            path=f"{path}.input_data_file",
            triton=unreadable_file(
                join_path(str(ctx.model.path), WARMUP_FOLDER, data.input_data_file)
            ),
        )
        return
    if data.data_type == mc.TYPE_STRING:
        problem = bytes_tensor_problem(file_path, element_count(list(data.dims)))
        if problem:
            ctx.report(
                "warmup-string-data-invalid",
                f"warmup input '{key}' file {data.input_data_file}: {problem} (TYPE_STRING "
                "data is a sequence of 4-byte little-endian lengths, each followed by "
                "that many bytes)",
                path=f"{path}.input_data_file",
                file=rel,
                triton=_bytes_request_problem(
                    file_path, element_count(list(data.dims)), key, ctx.name
                ),
            )
        return
    expected = byte_size(data.data_type, list(data.dims))
    if size < expected:
        ctx.report(
            "warmup-file-too-small",
            f"warmup setting expects {expected} bytes, but the data provided from "
            f"{data.input_data_file}only has {size} bytes",
            path=f"{path}.input_data_file",
            file=rel,
            triton=f"{NO_REQUEST_ID}warmup setting expects {expected} bytes, but the data "
            f"provided from {data.input_data_file}only has {size} bytes",
        )


def bytes_tensor_problem(path: Path, elements: int) -> str:
    """What Triton's ValidateBytesInputs says about a serialised BYTES tensor, or ""."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot read it ({exc.strerror})"
    offset, checked, remaining_element = 0, 0, 0
    while offset < len(data):
        if not remaining_element:
            if len(data) - offset < 4:
                return (
                    f"incomplete string length indicator, expecting 4 bytes but only "
                    f"{len(data) - offset} bytes available"
                )
            remaining_element = int.from_bytes(data[offset : offset + 4], "little")
            offset += 4
            checked += 1
            if checked > elements:
                return f"unexpected number of string elements {checked}, expecting {elements}"
        take = min(remaining_element, len(data) - offset)
        offset += take
        remaining_element -= take
    if checked != elements:
        return f"expected {elements} string elements, got {checked}"
    return ""


def _bytes_request_problem(path: Path, elements: int, key: str, model: str) -> str:
    """Triton's request check of the file's BYTES elements (the warmup request's input)."""
    try:
        deserialize_bytes_tensor(
            path.read_bytes(),
            elements,
            input_name=key,
            model_name=model,
            request_prefix=NO_REQUEST_ID,
        )
    except RepokitError as exc:
        return exc.message
    except OSError:
        return unreadable_file(str(path))
    return ""


def _check_against_model(
    ctx: RuleContext,
    path: str,
    label: str,
    sample: mc.ModelWarmup,
    inputs: dict[str, mc.ModelInput],
    required: list[str],
) -> None:
    model = ctx.name
    given = set(sample.inputs)
    missing = [name for name in required if name not in given]
    if missing:
        ctx.report(
            "warmup-input-missing",
            f"warmup sample '{label}' misses required input(s) {missing}; Triton fails "
            f'the load with "expected {len(required)} inputs but got '
            f"{len(given & set(inputs))} inputs for model '{model}'\"",
            path=f"{path}.inputs",
            triton=missing_inputs_text(
                model, sorted(given & set(inputs)), required, len(inputs), NO_REQUEST_ID
            ),
        )
    for key in sorted(given):
        data = sample.inputs[key]
        io = inputs.get(key)
        if io is None:
            ctx.report(
                "warmup-input-not-model-input",
                f"warmup input '{key}' is not an input of model '{model}'; Triton sends "
                "it as an override (control/state) input",
                path=f"{path}.inputs[{key}]",
            )
            continue
        if data.data_type != io.data_type:
            ctx.report(
                "warmup-data-type-mismatch",
                f"inference input '{key}' data-type is "
                f"'{_type_name(data.data_type)}', but model '{model}' expects "
                f"'{_type_name(io.data_type)}' (warmup sample '{label}')",
                path=f"{path}.inputs[{key}].data_type",
                triton=f"{NO_REQUEST_ID}inference input '{key}' data-type is "
                f"'{datatypes.protocol_name(data.data_type)}', but model '{model}' expects "
                f"'{datatypes.protocol_name(io.data_type)}'",
            )
        config_dims = list(io.dims)
        dims = list(data.dims)
        if len(dims) != len(config_dims) or any(
            c != -1 and c != d for c, d in zip(config_dims, dims, strict=False)
        ):
            ctx.report(
                "warmup-shape-mismatch",
                f"unexpected shape for input '{key}' for model '{model}'. Expected "
                f"{config_dims}, got {dims} (warmup sample '{label}'; dims exclude the "
                "batch dimension)",
                path=f"{path}.inputs[{key}].dims",
                triton=_shape_text(ctx.config.max_batch_size, key, model, config_dims, dims),
            )
    limit = max(1, ctx.config.max_batch_size)
    if sample.batch_size > limit:
        ctx.report(
            "warmup-batch-size-too-large",
            f"warmup sample '{label}' has batch_size {sample.batch_size} but model "
            f"'{model}' allows at most {limit} (max_batch_size "
            f'{ctx.config.max_batch_size}); Triton: "batch size {sample.batch_size} '
            f"for '...', max allowed is {ctx.config.max_batch_size}\"",
            path=f"{path}.batch_size",
            # the first instance runs the sample: the backend refuses each of its
            # batch_size requests
            triton=f"failed to run warmup sample '{sample.name}': "
            + f"batch size {sample.batch_size} for '{_first_instance(ctx)}', max allowed is "
            f"{ctx.config.max_batch_size}; " * sample.batch_size,
        )


def _shape_text(
    max_batch_size: int, key: str, model: str, config_dims: list[int], dims: list[int]
) -> str:
    """Triton's request check of the shape (a warmup request of a batching model has a
    batch dimension of 1)."""
    batching = max_batch_size > 0
    expected = dims_text([-1, *config_dims] if batching else config_dims)
    got = dims_text([1, *dims] if batching else dims)
    note = BATCH_DIMENSION_NOTE if batching else ""
    return (
        f"{NO_REQUEST_ID}unexpected shape for input '{key}' for model '{model}'. "
        f"Expected {expected}, got {got}. {note}"
    )


def _first_instance(ctx: RuleContext) -> str:
    """The name Triton gives the model's first instance: its group's name (by default
    ``<model>_<group index>``), with ``_<index>`` when the group has more than one."""
    groups = ctx.config.instance_group
    if not groups:
        return f"{ctx.name}_0"
    name = groups[0].name or f"{ctx.name}_0"
    return f"{name}_0" if groups[0].count > 1 else name
