"""Ensemble checks against the composing models' configs.

Mirrors Triton's ``ValidateEnsembleConfig`` (core ``ensemble_scheduler/ensemble_utils.cc``), which
runs once every step model has loaded: batch sizes, input/output maps against the step models'
real tensors, data type and shape agreement along every edge, and decoupled branches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from repokit.config.ensemble_graph import Finding, step_path
from repokit.config.suggest import did_you_mean
from repokit.protocol.generated import model_config_pb2 as mc


@dataclass(eq=False)
class _Sibling:
    """Shared by all outputs of one step, so they get the same decoupled label."""

    label: int = 0
    visited: bool = False


@dataclass(eq=False)
class _Tensor:
    source: str  # the model the type and shape are inferred from
    data_type: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]  # dims with the batch dimension (-1) prepended when batching
    decoupled: bool = False
    label: int = 0
    visited: bool = False
    prev: list[_Tensor] = field(default_factory=list)
    next: list[_Tensor] = field(default_factory=list)
    sibling: _Sibling | None = None
    producer: str = ""  # the step model whose output this tensor is


def _tensor(source: str, batching: bool, data_type: int, dims: Iterable[int]) -> _Tensor:
    shape = tuple(dims)
    return _Tensor(source, data_type, shape, ((-1,) if batching else ()) + shape)


def _dims_match(lhs: Sequence[int], rhs: Sequence[int]) -> bool:
    return len(lhs) == len(rhs) and all(
        a == b or a == -1 or b == -1 for a, b in zip(lhs, rhs, strict=True)
    )


def _dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _consistency(
    ensemble: str, tensor_name: str, known: _Tensor, new: _Tensor, path: str
) -> Finding | None:
    prefix = f"in ensemble {ensemble}, ensemble tensor {tensor_name}: "
    if known.data_type != new.data_type:
        return Finding(
            "ensemble-tensor-datatype-mismatch",
            prefix
            + f"inconsistent data type: {mc.DataType.Name(known.data_type)} is inferred from "
            f"model {known.source} while {mc.DataType.Name(new.data_type)} is inferred from "
            f"model {new.source}",
            path,
        )
    if not _dims_match(known.dims, new.dims) and not _dims_match(known.full_dims, new.full_dims):
        return Finding(
            "ensemble-tensor-shape-mismatch",
            prefix + f"inconsistent shape: {_dims_text(known.full_dims)} is inferred from model "
            f"{known.source} while {_dims_text(new.full_dims)} is inferred from model "
            f"{new.source}",
            path,
            hint=" (-1 matches any size; shapes include the batch dimension when the model "
            "batches)",
        )
    return None


class ComposingCheck:
    """One run of ValidateEnsembleConfig for one ensemble."""

    def __init__(self, ensemble: mc.ModelConfig, name: str) -> None:
        self.config = ensemble
        self.name = name
        self.findings: list[Finding] = []
        self.tensors: dict[str, _Tensor] = {}
        self.complete = True  # False once a step could not be linked (skip the decoupled walk)
        batching = ensemble.max_batch_size > 0
        for model_input in ensemble.input:
            shape = (
                model_input.reshape.shape if model_input.HasField("reshape") else model_input.dims
            )
            self.tensors.setdefault(
                model_input.name, _tensor(name, batching, model_input.data_type, shape)
            )
        self.sink = _Tensor(name, 0, (), ())
        for io in ensemble.output:
            dims = io.reshape.shape if io.HasField("reshape") else io.dims
            node = self.tensors.setdefault(io.name, _tensor(name, batching, io.data_type, dims))
            self.sink.prev.append(node)
            node.next.append(self.sink)

    def skip_step(self) -> None:
        """A step whose composing config is unknown: nothing to compare, no decoupled walk."""
        self.complete = False

    def add_step(self, index: int, step: mc.ModelEnsembling.Step, model: mc.ModelConfig) -> None:
        ensemble_mbs = self.config.max_batch_size
        if model.max_batch_size != 0 and model.max_batch_size < ensemble_mbs:
            self.findings.append(
                Finding(
                    "ensemble-max-batch-size",
                    f"ensemble {self.name} allows maximum batch size {ensemble_mbs}, but it "
                    f"contains model {step.model_name} which only allows maximum batch size to "
                    f"be {model.max_batch_size}",
                    step_path(index, "model_name"),
                )
            )
        before = len(self.findings)
        self._map_inputs(index, step, model)
        self._map_outputs(index, step, model)
        if len(self.findings) != before:
            self.complete = False
            return
        self._link(step, model)

    def _map_inputs(self, index: int, step: mc.ModelEnsembling.Step, model: mc.ModelConfig) -> None:
        batching = model.max_batch_size > 0
        inputs = {io.name: io for io in model.input}
        for key, tensor_name in step.input_map.items():
            if key not in inputs:
                self.findings.append(
                    Finding(
                        "ensemble-step-unknown-input",
                        f"in ensemble {self.name}, ensemble tensor {tensor_name} is mapping to "
                        f"non-existing input {key} in model {step.model_name}",
                        step_path(index, "input_map", key),
                        hint=f"{did_you_mean(key, inputs)} (its inputs: "
                        f"{', '.join(sorted(inputs)) or 'none'})",
                    )
                )
        for io in model.input:
            if io.name not in step.input_map:
                if not io.optional:
                    self.findings.append(
                        Finding(
                            "ensemble-step-input-not-mapped",
                            f"in ensemble {self.name}, input {io.name} in model "
                            f"{step.model_name} is not mapped to any ensemble tensors",
                            step_path(index, "input_map"),
                            hint="; add it to the step's input_map (only 'optional: true' "
                            "inputs may be left out)",
                        )
                    )
                continue
            self._merge(
                step.input_map[io.name],
                _tensor(step.model_name, batching, io.data_type, io.dims),
                step_path(index, "input_map", io.name),
            )

    def _map_outputs(
        self, index: int, step: mc.ModelEnsembling.Step, model: mc.ModelConfig
    ) -> None:
        batching = model.max_batch_size > 0
        outputs = {io.name: io for io in model.output}
        for key, tensor_name in step.output_map.items():  # Triton checks these first
            if key not in outputs:
                self.findings.append(
                    Finding(
                        "ensemble-step-unknown-output",
                        f"in ensemble {self.name}, ensemble tensor {tensor_name} is mapped from "
                        f"non-existing output {key} in model {step.model_name}",
                        step_path(index, "output_map", key),
                        hint=f"{did_you_mean(key, outputs)} (its outputs: "
                        f"{', '.join(sorted(outputs)) or 'none'})",
                    )
                )
        sibling = _Sibling()
        for key, tensor_name in step.output_map.items():
            io = outputs.get(key)
            if io is None:
                continue
            node = self._merge(
                tensor_name,
                _tensor(step.model_name, batching, io.data_type, io.dims),
                step_path(index, "output_map", key),
            )
            node.sibling = sibling
            node.producer = step.model_name

    def _merge(self, tensor_name: str, new: _Tensor, path: str) -> _Tensor:
        known = self.tensors.get(tensor_name)
        if known is None:
            self.tensors[tensor_name] = new
            return new
        finding = _consistency(self.name, tensor_name, known, new, path)
        if finding is not None:
            self.findings.append(finding)
        return known

    def _link(self, step: mc.ModelEnsembling.Step, model: mc.ModelConfig) -> None:
        decoupled = model.model_transaction_policy.decoupled
        for tensor_name in step.output_map.values():
            node = self.tensors[tensor_name]
            node.decoupled = decoupled
            for input_name in step.input_map.values():
                prev = self.tensors.get(input_name)
                if prev is None:  # an optional input's tensor that nothing typed
                    continue
                node.prev.append(prev)
                prev.next.append(node)

    def check_decoupled(self) -> None:
        """Walk the data flow; a step must not mix outputs of different decoupled branches."""
        if not self.complete or self.findings:
            return
        label = 0
        queue: deque[_Tensor] = deque()
        for io in self.config.input:
            node = self.tensors[io.name]
            node.visited = True
            queue.append(node)
        reported: set[str] = set()
        while queue:
            node = queue.popleft()
            for nxt in node.next:
                if nxt.visited or not all(p.visited for p in nxt.prev):
                    continue
                first = nxt.prev[0].label
                step_model = nxt.producer or nxt.source
                if any(p.label != first for p in nxt.prev) and step_model not in reported:
                    reported.add(step_model)
                    # Triton names the model the tensor's type was first inferred from (the
                    # ensemble itself for an ensemble output), not always the step
                    hint = (
                        f" (the step of model '{step_model}' is the one that does)"
                        if step_model != nxt.source
                        else ""
                    )
                    self.findings.append(
                        Finding(
                            "ensemble-decoupled-mixed-inputs",
                            f"in ensemble {self.name}, step of model '{nxt.source}' receives "
                            "inputs originated from different decoupled models",
                            "ensemble_scheduling",
                            hint=hint,
                        )
                    )
                if nxt.sibling is not None and nxt.sibling.visited:
                    nxt.label = nxt.sibling.label
                else:
                    if nxt.decoupled:
                        label += 1
                        nxt.label = label
                    else:
                        nxt.label = first
                    if nxt.sibling is not None:
                        nxt.sibling.label = nxt.label
                        nxt.sibling.visited = True
                nxt.visited = True
                queue.append(nxt)
