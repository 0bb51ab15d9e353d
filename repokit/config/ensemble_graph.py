"""Static ensemble checks that need only the ensemble's own config.

Mirrors Triton's ``ValidateEnsembleSchedulingConfig`` (core ``model_config_utils.cc``), which runs
inside ``ValidateModelConfig`` before any composing model is looked at. Triton stops at the first
problem; these functions report every independent problem, and skip checks whose result would
only repeat an earlier finding.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.suggest import closest, did_you_mean
from repokit.protocol.generated import model_config_pb2 as mc

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True)
class Finding:
    """A diagnostic before it is bound to a model and file. ``message`` is Triton's text
    where Triton has one (``repokit serve`` answers with it); ``hint`` is repokit's advice after
    it (``repokit validate`` shows both)."""

    rule: str
    message: str
    path: str = ""
    severity: Severity = Severity.ERROR
    hint: str = ""

    def bind(self, model: str, file: str) -> Diagnostic:
        return Diagnostic(
            rule=self.rule,
            severity=self.severity,
            model=model,
            message=self.message + self.hint,
            file=file,
            path=self.path,
            triton=self.message if self.hint else "",
        )


@dataclass(eq=False)
class _FlowTensor:
    name: str
    is_output: bool
    ready: bool = False
    prev: list[_FlowTensor] = field(default_factory=list)
    next: list[_FlowTensor] = field(default_factory=list)


def step_path(index: int, member: str = "", key: str | None = None) -> str:
    path = f"ensemble_scheduling.step[{index}]"
    if member:
        path += f".{member}"
    if key is not None:
        path += f'["{key}"]'
    return path


def _check_forbidden_fields(config: mc.ModelConfig) -> list[Finding]:
    name = config.name
    out: list[Finding] = []
    if len(config.instance_group) != 0:
        out.append(
            Finding(
                "ensemble-instance-group",
                f"instance group should not be specified for ensemble '{name}'",
                "instance_group",
                hint=": an ensemble has no instances of its own; set instance_group on the "
                "composing models",
            )
        )
    if config.HasField("optimization"):
        out.append(
            Finding(
                "ensemble-optimization",
                f"optimization should not be specified for ensemble '{name}'",
                "optimization",
                hint="; set it on the composing models",
            )
        )
    if len(config.model_warmup) != 0:
        out.append(
            Finding(
                "ensemble-model-warmup",
                f"model_warmup can not be specified for ensemble '{name}'",
                "model_warmup",
                hint="; warm up the composing models instead",
            )
        )
    return out


def _check_steps(config: mc.ModelConfig) -> list[Finding]:
    name = config.name
    steps = config.ensemble_scheduling.step
    if len(steps) == 0:
        return [
            Finding(
                "ensemble-no-steps",
                f"must specify 'step' for ensemble '{name}'",
                "ensemble_scheduling.step",
            )
        ]
    out: list[Finding] = []
    for index, step in enumerate(steps):
        if not step.model_name:
            out.append(
                Finding(
                    "ensemble-step-model-name-missing",
                    f"must specify 'model_name' in step {index} of ensemble '{name}'",
                    step_path(index, "model_name"),
                )
            )
        if len(step.input_map) == 0:
            out.append(
                Finding(
                    "ensemble-step-input-map-missing",
                    f"must specify 'input_map' in step {index} of ensemble '{name}'",
                    step_path(index, "input_map"),
                )
            )
        if len(step.output_map) == 0:
            out.append(
                Finding(
                    "ensemble-step-output-map-missing",
                    f"must specify 'output_map' in step {index} of ensemble '{name}'",
                    step_path(index, "output_map"),
                )
            )
    return out


def _build_flow_graph(config: mc.ModelConfig, findings: list[Finding]) -> dict[str, _FlowTensor]:
    tensors: dict[str, _FlowTensor] = {}
    name = config.name
    for index, step in enumerate(config.ensemble_scheduling.step):
        produced: list[_FlowTensor] = []
        for key, tensor_name in step.output_map.items():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _FlowTensor(tensor_name, is_output=True)
            elif node.is_output:
                findings.append(
                    Finding(
                        "ensemble-tensor-produced-twice",
                        f"ensemble tensor '{tensor_name}' can appear in an output map only once "
                        f"for ensemble '{name}' step {index}",
                        step_path(index, "output_map", key),
                        hint=": another step already produces it",
                    )
                )
            else:
                node.is_output = True
            produced.append(node)
        for tensor_name in step.input_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _FlowTensor(tensor_name, is_output=False)
            for out_node in produced:
                out_node.prev.append(node)
                node.next.append(out_node)
    return tensors


def _propagate_ready(tensors: dict[str, _FlowTensor], inputs: list[str]) -> None:
    queue: deque[_FlowTensor] = deque()
    for input_name in inputs:
        node = tensors.get(input_name)
        if node is not None:
            node.ready = True
            queue.append(node)
    while queue:
        node = queue.popleft()
        for next_node in node.next:
            if next_node.ready:
                continue
            if all(prev.ready for prev in next_node.prev):
                next_node.ready = True
                queue.append(next_node)


def _first_unconnected_source(node: _FlowTensor) -> str:
    """Follow not-ready producers upstream, as Triton does for its 'not written' detail."""
    last = node
    seen: set[str] = set()
    prev_nodes: list[_FlowTensor] | None = node.prev
    while prev_nodes:
        candidates, prev_nodes = prev_nodes, None
        for candidate in candidates:
            if not candidate.ready and candidate.name not in seen:
                seen.add(candidate.name)
                last = candidate
                prev_nodes = candidate.prev
                break
    return last.name


def _check_data_flow(config: mc.ModelConfig) -> list[Finding]:
    name = config.name
    findings: list[Finding] = []
    tensors = _build_flow_graph(config, findings)
    input_names = [t.name for t in config.input]
    # tensors steps read that no step writes and that are not ensemble inputs: likely misspelt
    orphans = [t for t, node in tensors.items() if not node.prev and t not in input_names]
    for index, model_input in enumerate(config.input):
        if model_input.name not in tensors:
            meant = closest(model_input.name, orphans)
            hint = f" (a step reads '{meant}': did you mean '{model_input.name}' there?)"
            findings.append(
                Finding(
                    "ensemble-input-unused",
                    f"ensemble input '{model_input.name}' for ensemble {name}' is not used: no "
                    "step has it as a value in its input_map" + (hint if meant else ""),
                    f"input[{index}]",
                )
            )
    _propagate_ready(tensors, [t.name for t in config.input])
    outputs: set[str] = set()
    not_written = False
    for index, tensor in enumerate(config.output):
        node = tensors.get(tensor.name)
        if node is None:
            findings.append(
                Finding(
                    "ensemble-output-not-produced",
                    f"ensemble output '{tensor.name}' for ensemble {name}' is not used: no step "
                    "has it as a value in its output_map",
                    f"output[{index}]",
                )
            )
        elif not node.ready:
            not_written = True
            message = f"output '{tensor.name}' for ensemble '{name}' is not written"
            source = _first_unconnected_source(node)
            if source != tensor.name:
                message += f": at least one of its depending tensors, '{source}', is not connected"
                message += did_you_mean(source, input_names)
            findings.append(
                Finding(
                    "ensemble-output-not-written",
                    message + " (it cannot be computed from the ensemble inputs)",
                    f"output[{index}]",
                )
            )
        else:
            outputs.add(tensor.name)
    sources = [t.name for t in config.input] + [t for t, n in tensors.items() if n.prev]
    for tensor_name, node in tensors.items():
        if tensor_name in outputs:
            continue
        dangling = node.ready and not node.next
        if dangling or (not node.ready and not not_written):
            findings.append(
                Finding(
                    "ensemble-tensor-unused",
                    f"ensemble tensor '{tensor_name}' is unused in ensemble '{name}': it is "
                    + (
                        "produced but no step consumes it and it is not an ensemble output"
                        if dangling
                        else "consumed but never produced from the ensemble inputs"
                        + did_you_mean(tensor_name, sources)
                    ),
                    "ensemble_scheduling",
                )
            )
    return findings


def check_scheduling(config: mc.ModelConfig) -> list[Finding]:
    """All of ValidateEnsembleSchedulingConfig for a config with platform 'ensemble'."""
    if not config.HasField("ensemble_scheduling"):
        return []  # 'ensemble scheduling must be set' belongs to ValidateModelConfig's rules
    findings = _check_forbidden_fields(config)
    step_findings = _check_steps(config)
    findings.extend(step_findings)
    if not step_findings:
        findings.extend(_check_data_flow(config))
    return findings
