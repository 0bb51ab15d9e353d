"""Sequence batcher control inputs (§4.4, core ``GetBooleanSequenceControlProperties`` and
``GetTypedSequenceControlProperties``), checked by ValidateModelConfig."""

from __future__ import annotations

from repokit.config.rules.context import RuleContext
from repokit.protocol.generated import model_config_pb2 as mc

Control = mc.ModelSequenceBatching.Control
BOOLEAN_KINDS = (
    Control.CONTROL_SEQUENCE_START,
    Control.CONTROL_SEQUENCE_END,
    Control.CONTROL_SEQUENCE_READY,
)
CORRID_TYPES = frozenset(
    {mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING}
)
_VALUE_FIELDS = ("int32_false_true", "fp32_false_true", "bool_false_true")


def _kind_name(kind: int) -> str:
    return Control.Kind.Name(kind)


def check_sequence_controls(ctx: RuleContext) -> None:
    name = ctx.name
    batcher = ctx.config.sequence_batching
    seen: set[str] = set()
    for i, control_input in enumerate(batcher.control_input):
        path = f"sequence_batching.control_input[{i}]"
        if not control_input.name:
            ctx.report(
                "sequence-control-name-missing",
                f"sequence batching control tensor must have a name for {name}",
                path=f"{path}.name",
            )
        elif control_input.name in seen:
            ctx.report(
                "sequence-control-tensor-reused",
                f"sequence batching control tensor '{control_input.name}' is specified for "
                f"multiple control kinds for {name}; use one control_input per tensor",
                path=f"{path}.name",
            )
        seen.add(control_input.name)

    by_kind: dict[int, list[tuple[str, mc.ModelSequenceBatching.Control]]] = {}
    for i, control_input in enumerate(batcher.control_input):
        for j, control in enumerate(control_input.control):
            path = f"sequence_batching.control_input[{i}].control[{j}]"
            by_kind.setdefault(control.kind, []).append((path, control))
    for kind, controls in sorted(by_kind.items()):
        kind_name = _kind_name(kind)
        for path, _ in controls[1:]:
            ctx.report(
                "sequence-control-kind-duplicated",
                f"sequence batching specifies multiple {kind_name} tensors for {name}",
                path=path,
            )
        path, control = controls[0]
        if kind in BOOLEAN_KINDS:
            _check_boolean_control(ctx, kind_name, path, control)
        elif kind == Control.CONTROL_SEQUENCE_CORRID:
            _check_corrid_control(ctx, path, control)


def _check_boolean_control(
    ctx: RuleContext, kind_name: str, path: str, control: mc.ModelSequenceBatching.Control
) -> None:
    name = ctx.name
    given = [f for f in _VALUE_FIELDS if len(getattr(control, f))]
    if not given:
        ctx.report(
            "sequence-control-values-missing",
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind_name} for {name}",
            path=path,
        )
    elif len(given) > 1:
        ctx.report(
            "sequence-control-values-ambiguous",
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {name}",
            path=path,
        )
    else:
        field = given[0]
        count = len(getattr(control, field))
        if count != 2:
            ctx.report(
                "sequence-control-values-count",
                f"sequence batching control '{field}' must have exactly 2 entries for "
                f"{kind_name} for {name} (got {count}; expected [false, true])",
                path=f"{path}.{field}",
            )


def _check_corrid_control(
    ctx: RuleContext, path: str, control: mc.ModelSequenceBatching.Control
) -> None:
    name = ctx.name
    if any(len(getattr(control, f)) for f in _VALUE_FIELDS):
        ctx.report(
            "sequence-corrid-values-set",
            "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' "
            f"or 'bool_false_true' for CONTROL_SEQUENCE_CORRID for {name}; set data_type",
            path=path,
        )
    elif control.data_type not in CORRID_TYPES:
        ctx.report(
            "sequence-corrid-data-type",
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for "
            f"{name}. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 "
            f"and TYPE_STRING (got {mc.DataType.Name(control.data_type)})",
            path=f"{path}.data_type",
        )
