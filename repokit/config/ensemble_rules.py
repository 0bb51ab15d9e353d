"""Ensemble rules across the repository: Triton's verdict on every ensemble.

Called by ``validate_repository`` after every model has its own ModelReport. Three layers, in the
order Triton applies them:

1. ``ValidateEnsembleSchedulingConfig`` on the ensemble's own config (ensemble_graph.py);
2. the dependency graph (core ``model_repository_manager.cc``): step models exist, are not part
   of a cycle, loaded successfully, and load the version a step asks for;
3. ``ValidateEnsembleConfig`` against the composing models' configs (ensemble_composing.py),
   only once 1 and 2 pass, as in Triton.

Ensembles of ensembles are handled in dependency order, so an ensemble whose step is an invalid
ensemble is itself invalid.
"""

from __future__ import annotations

from pathlib import Path

from repokit.config.diagnostics import Severity
from repokit.config.ensemble_composing import ComposingCheck
from repokit.config.ensemble_dependencies import (
    LATEST_VERSION,
    cycle,
    no_loaded_version,
    not_available,
    not_valid,
    version_not_loaded,
)
from repokit.config.ensemble_graph import (
    ENSEMBLE_PLATFORM,
    Finding,
    check_scheduling,
    step_path,
)
from repokit.config.report import ModelReport, RepositoryReport, ValidateOptions
from repokit.config.suggest import closest
from repokit.protocol.generated import model_config_pb2 as mc

CYCLE_RULE = "ensemble-circular-dependency"

# Every rule id this module and its two helpers report, with a one-line summary (for SARIF).
ENSEMBLE_RULES: dict[str, str] = {
    "ensemble-instance-group": "an ensemble must not have instance_group",
    "ensemble-optimization": "an ensemble must not have optimization",
    "ensemble-model-warmup": "an ensemble must not have model_warmup",
    "ensemble-no-steps": "ensemble_scheduling needs at least one step",
    "ensemble-step-model-name-missing": "every step needs model_name",
    "ensemble-step-input-map-missing": "every step needs an input_map",
    "ensemble-step-output-map-missing": "every step needs an output_map",
    "ensemble-tensor-produced-twice": "an ensemble tensor is written by one step only",
    "ensemble-input-unused": "every ensemble input must be consumed by a step",
    "ensemble-output-not-produced": "every ensemble output must be written by a step",
    "ensemble-output-not-written": "every ensemble output must be computable from the inputs",
    "ensemble-tensor-unused": "no dangling intermediate tensors",
    "ensemble-step-model-missing": "every step model must exist in the repository",
    "ensemble-step-model-invalid": "every step model must load",
    "ensemble-step-version-not-loaded": "a step's model_version must be loaded by its policy",
    "ensemble-circular-dependency": "ensembles must not contain themselves",
    "ensemble-max-batch-size": "step models must allow the ensemble's max_batch_size",
    "ensemble-step-unknown-input": "input_map keys must be inputs of the step model",
    "ensemble-step-input-not-mapped": "non-optional step model inputs must be mapped",
    "ensemble-step-unknown-output": "output_map keys must be outputs of the step model",
    "ensemble-tensor-datatype-mismatch": "data types must agree along every edge",
    "ensemble-tensor-shape-mismatch": "shapes must agree along every edge",
    "ensemble-decoupled-mixed-inputs": "a step must not mix different decoupled branches",
    "ensemble-step-io-unknown": "step IO is auto-completed; its checks were skipped (info)",
    "response-cache-decoupled-step": "an ensemble with a decoupled step cannot use the cache",
}


def _relative_file(report: RepositoryReport, model: ModelReport) -> str:
    path = model.config_file or model.directory
    try:
        return str(Path(path).relative_to(report.root))
    except ValueError:
        return str(path)


def _add(report: RepositoryReport, model: ModelReport, findings: list[Finding]) -> None:
    file = _relative_file(report, model)
    model.diagnostics.extend(f.bind(model.name, file) for f in findings)


def _ensembles(report: RepositoryReport) -> dict[str, mc.ModelConfig]:
    return {
        name: m.config
        for name, m in report.models.items()
        if m.config is not None
        and m.config.platform == ENSEMBLE_PLATFORM
        and m.config.HasField("ensemble_scheduling")
    }


def _upstreams(config: mc.ModelConfig) -> list[str]:
    """Step model names in step order, without repeats."""
    return list(
        dict.fromkeys(s.model_name for s in config.ensemble_scheduling.step if s.model_name)
    )


def _cycle_findings(ensembles: dict[str, mc.ModelConfig]) -> dict[str, Finding]:
    """Ensembles that reach themselves through their steps, with Triton's message."""
    graph = {
        name: [u for u in _upstreams(cfg) if u in ensembles] for name, cfg in ensembles.items()
    }
    out: dict[str, Finding] = {}
    for start in graph:
        # depth-first search for a path start -> ... -> last -> start
        stack: list[tuple[str, int]] = [(start, 0)]
        seen = {start}
        while stack:
            node, child = stack[-1]
            if child >= len(graph[node]):
                stack.pop()
                continue
            stack[-1] = (node, child + 1)
            upstream = graph[node][child]
            if upstream == start:
                chain = " -> ".join(n for n, _ in stack)
                out[start] = Finding(
                    CYCLE_RULE,
                    cycle(start, node),
                    "ensemble_scheduling.step",
                    hint=f" (cycle: {chain} -> {start}); an ensemble cannot contain itself",
                )
                break
            if upstream not in seen:
                seen.add(upstream)
                stack.append((upstream, 0))
    return out


def _first_error(model: ModelReport) -> str:
    for d in model.diagnostics:
        if d.severity is Severity.ERROR:
            return d.message
    return "unknown error"


def _io_known(config: mc.ModelConfig | None, options: ValidateOptions) -> bool:
    if config is None:
        return False
    # With auto-complete on, a backend fills in a config that lists no tensors at load time.
    return options.strict or len(config.input) != 0 or len(config.output) != 0


class _EnsembleChecker:
    def __init__(self, report: RepositoryReport, options: ValidateOptions) -> None:
        self.report = report
        self.options = options
        self.ensembles = _ensembles(report)
        self.done: set[str] = set()

    def run(self) -> None:
        for name, config in self.ensembles.items():
            _add(self.report, self.report.models[name], check_scheduling(config))
        for name, finding in _cycle_findings(self.ensembles).items():
            _add(self.report, self.report.models[name], [finding])
            self.done.add(name)
        for name in self.ensembles:
            self._check(name)

    def _check(self, name: str) -> None:
        if name in self.done:
            return
        self.done.add(name)
        config = self.ensembles[name]
        for upstream in _upstreams(config):
            if upstream in self.ensembles:
                self._check(upstream)
        model = self.report.models[name]
        _add(self.report, model, self._dependency_findings(name, config))
        if model.ok:
            _add(self.report, model, self._composing_findings(name, config))

    def _dependency_findings(self, name: str, config: mc.ModelConfig) -> list[Finding]:
        steps = list(config.ensemble_scheduling.step)
        missing = [u for u in _upstreams(config) if u not in self.report.models]
        findings: list[Finding] = []
        if missing:
            first = next(i for i, s in enumerate(steps) if s.model_name in missing)
            known = [m for m in self.report.models if m != name]
            guesses = {m: closest(m, known) for m in missing}
            hints = ", ".join(f"'{g}' for '{m}'" for m, g in guesses.items() if g)
            hints = f"; did you mean {hints}?" if hints else ""
            findings.append(
                Finding(
                    "ensemble-step-model-missing",
                    not_available(name, missing),
                    step_path(first, "model_name"),
                    hint=f" (no such model directory in the repository{hints})",
                )
            )
        reported: set[str] = set()
        for index, step in enumerate(steps):
            upstream = self.report.models.get(step.model_name)
            if upstream is None or step.model_name in reported:
                continue
            if not upstream.ok:
                reported.add(step.model_name)
                cycle = any(d.rule == CYCLE_RULE for d in upstream.diagnostics)
                note = (
                    " (Triton 2.51 crashes when it loads an ensemble over a cycle)" if cycle else ""
                )
                findings.append(
                    Finding(
                        "ensemble-step-model-invalid",
                        not_valid(name, step.model_name, _first_error(upstream)),
                        step_path(index, "model_name"),
                        hint=note,
                    )
                )
            elif not upstream.versions:
                reported.add(step.model_name)
                findings.append(
                    Finding(
                        "ensemble-step-model-invalid",
                        no_loaded_version(name, step.model_name),
                        step_path(index, "model_name"),
                    )
                )
            elif (
                step.model_version != LATEST_VERSION and step.model_version not in upstream.versions
            ):
                hint = (
                    "; model_version defaults to 0 when omitted, use -1 for the latest version"
                    if step.model_version == 0
                    else ""
                )
                loaded = ", ".join(str(v) for v in sorted(upstream.versions))
                findings.append(
                    Finding(
                        "ensemble-step-version-not-loaded",
                        version_not_loaded(name, step.model_name, step.model_version),
                        step_path(index, "model_version"),
                        hint=f" (its version policy loads: {loaded}{hint})",
                    )
                )
        return findings

    def _composing_findings(self, name: str, config: mc.ModelConfig) -> list[Finding]:
        check = ComposingCheck(config, name)
        infos: list[Finding] = []
        for index, step in enumerate(config.ensemble_scheduling.step):
            step_config = self.report.models[step.model_name].config
            if step_config is None or not _io_known(step_config, self.options):
                check.skip_step()
                infos.append(
                    Finding(
                        "ensemble-step-io-unknown",
                        f"model '{step.model_name}' has no inputs or outputs in its config (the "
                        "backend auto-completes them at load time); the input_map, output_map, "
                        "data type and shape checks of this step were skipped",
                        step_path(index, "model_name"),
                        Severity.INFO,
                    )
                )
                continue
            check.add_step(index, step, step_config)
        check.check_decoupled()
        cache = self._cache_finding(name, config)
        return check.findings + ([cache] if cache is not None else []) + infos

    def _cache_finding(self, name: str, config: mc.ModelConfig) -> Finding | None:
        """Triton makes an ensemble with a decoupled step decoupled when it loads it, and then
        refuses its response cache (the load error, with Triton's text)."""
        if not config.response_cache.enable:
            return None
        found = self._decoupled_step(config, (name,))
        if found is None:
            return None
        index, step_model = found
        return Finding(
            "response-cache-decoupled-step",
            f"Response Cache does not currently support model {name} with 'decoupled' "
            f"transaction policy. Please disable the response cache. (step {index}, "
            f"'{step_model}', is decoupled, which makes the ensemble decoupled)",
            "response_cache.enable",
        )

    def _decoupled_step(
        self, config: mc.ModelConfig, seen: tuple[str, ...]
    ) -> tuple[int, str] | None:
        for index, step in enumerate(config.ensemble_scheduling.step):
            upstream = self.report.models.get(step.model_name)
            step_config = upstream.config if upstream is not None else None
            if step_config is None or step.model_name in seen:
                continue
            if step_config.model_transaction_policy.decoupled:
                return index, step.model_name
            if step_config.platform == "ensemble" and (
                self._decoupled_step(step_config, (*seen, step.model_name)) is not None
            ):
                return index, step.model_name
        return None


def check_ensembles(report: RepositoryReport, options: ValidateOptions) -> None:
    """Append every ensemble finding to the ModelReport of the model it concerns."""
    _EnsembleChecker(report, options).run()
