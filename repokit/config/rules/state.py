"""Implicit sequence state and its initial_state (§4.4), checked when Triton creates the sequence
batch scheduler (``SequenceBatchScheduler::Create`` / ``GenerateInitialStateData``)."""

from __future__ import annotations

import os

from repokit.config.rules.context import RuleContext
from repokit.config.rules.io import element_count
from repokit.protocol.datatypes import BY_CONFIG
from repokit.protocol.generated import model_config_pb2 as mc

INITIAL_STATE_FOLDER = "initial_state"


def byte_size(data_type: int, dims: list[int]) -> int:
    """Triton's byte size for fixed dims; STRING counts 4 bytes per element."""
    count = element_count(dims)
    info = BY_CONFIG.get(data_type)
    itemsize = info.itemsize if info is not None and info.itemsize else 4
    return count * itemsize


def check_sequence_state(ctx: RuleContext) -> None:
    if not ctx.config.HasField("sequence_batching"):
        return
    seen_inputs: set[str] = set()
    for i, state in enumerate(ctx.config.sequence_batching.state):
        path = f"sequence_batching.state[{i}]"
        if len(state.initial_state) > 1:
            ctx.report(
                "initial-state-count",
                f"initial_state field for state input '{state.input_name}' must contain "
                f"exactly one or zero element. Found '{len(state.initial_state)}' "
                "elements.",
                path=f"{path}.initial_state",
            )
            continue
        if len(state.initial_state) == 1:
            _check_initial_state(ctx, f"{path}.initial_state[0]", state, seen_inputs)


def _check_initial_state(
    ctx: RuleContext, path: str, state: mc.ModelSequenceBatching.State, seen: set[str]
) -> None:
    initial = state.initial_state[0]
    name = state.input_name
    if initial.data_type != state.data_type:
        ctx.report(
            "initial-state-data-type",
            f"The data type used for 'initial_state' field of state '{name}' does not "
            f"match the state data type ({mc.DataType.Name(initial.data_type)} vs "
            f"{mc.DataType.Name(state.data_type)}).",
            path=f"{path}.data_type",
        )
        return
    if not initial.name:
        ctx.report(
            "initial-state-name-missing",
            f"Field 'name' must be set when using initial_state for state input '{name}'.",
            path=f"{path}.name",
        )
        return
    if name in seen:
        ctx.report(
            "state-input-duplicated",
            f"State input name '{name}' specified more than once.",
            path=f"{path}",
        )
        return
    seen.add(name)
    if len(initial.dims) != len(state.dims):
        ctx.report(
            "initial-state-dims-rank",
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(initial.dims)} != "
            f"{len(state.dims)}",
            path=f"{path}.dims",
        )
        return
    for d, (init_dim, state_dim) in enumerate(zip(initial.dims, state.dims, strict=True)):
        if init_dim == -1:
            ctx.report(
                "initial-state-dims-variable",
                f"'initial_state' field for state input name '{name}' contains variable "
                "dimensions.",
                path=f"{path}.dims[{d}]",
            )
            return
        if state_dim != -1 and init_dim != state_dim:
            ctx.report(
                "initial-state-dims-mismatch",
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim "
                f"description. {init_dim} != {state_dim}",
                path=f"{path}.dims[{d}]",
            )
            return
    choice = initial.WhichOneof("state_data")
    if choice is None:
        ctx.report(
            "initial-state-data-missing",
            f"initial_state setting expects state'{name}' to have state_data set; set "
            "zero_data: true or data_file",
            path=path,
        )
    elif choice == "data_file":
        file_path = ctx.model.path / INITIAL_STATE_FOLDER / initial.data_file
        rel = ctx.relative(file_path)
        try:
            size = os.stat(file_path).st_size if file_path.is_file() else -1
        except OSError:
            size = -1
        if size < 0:
            ctx.report(
                "initial-state-file-missing",
                f"failed to open text file for read {rel}: initial_state data_file "
                f"'{initial.data_file}' must exist under <model>/initial_state/",
                path=f"{path}.data_file",
            )
            return
        expected = byte_size(initial.data_type, list(initial.dims))
        if initial.data_type != mc.TYPE_STRING and size < expected:
            ctx.report(
                "initial-state-file-too-small",
                f"initial_state setting expects {expected} bytes, but the data provided "
                f"from {initial.data_file}only has {size} bytes.",
                path=f"{path}.data_file",
                file=rel,
            )
