"""What Triton decides about an ensemble once its step models have loaded (or not).

Triton 2.51 checks an ensemble in its dependency graph (core ``model_repository_manager.cc``
``ConnectDependencyGraph``, ``CircularDependencyCheck``, ``CheckNode``), then runs
``ValidateEnsembleConfig`` on the step models' completed configs (``ensemble_composing.py``).
An ensemble that fails here never reaches the model lifecycle: its load answers 400
``load failed for model 'E': <message>`` and no version of it loads.

The message builders are shared by ``repokit validate`` (which adds its hints) and
``repokit serve``; :func:`first_problem` is the order in which Triton stops at the first one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from repokit.config.ensemble_composing import ComposingCheck
from repokit.protocol.generated import model_config_pb2 as mc

LATEST_VERSION = -1
CYCLE_PREFIX = "circular dependency between ensembles: "


def not_available(ensemble: str, missing: list[str]) -> str:
    """Step models that are in no repository or whose config failed the poll."""
    return f"ensemble {ensemble} contains models that are not available or ambiguous: " + ", ".join(
        sorted(missing)
    )


def not_valid(ensemble: str, step_model: str, error: str) -> str:
    """A step model that is itself an ensemble refused by these checks."""
    return (
        f"ensemble '{ensemble}' depends on '{step_model}' which is not valid. Model "
        f"'{step_model}' failed with error: {error}"
    )


def no_loaded_version(ensemble: str, step_model: str, load_error: str = "") -> str:
    """A step model whose load left no version READY (``load_error``: its load's status)."""
    text = f"ensemble '{ensemble}' depends on '{step_model}' which has no loaded version."
    if load_error:
        text += f" Model '{step_model}' loading failed with error: {load_error}"
    return text


def version_not_loaded(ensemble: str, step_model: str, version: int) -> str:
    return (
        f"ensemble '{ensemble}' depends on '{step_model}' whose required version {version} "
        "is not loaded."
    )


def cycle(start: str, last: str) -> str:
    """Triton's text for ``start -> ... -> last -> start``."""
    return f"{CYCLE_PREFIX}{start} -> ... -> {last} -> {start}"


@dataclass(frozen=True)
class StepModelState:
    """A step model as the server holds it after trying to load it for the ensemble."""

    available: bool  # its config passed the poll (Triton's dependency graph has it)
    graph_error: str = ""  # an ensemble refused by these checks itself
    load_error: str = ""  # its last load's failure, as Triton's load status reads
    versions: tuple[int, ...] = ()  # READY versions
    config: mc.ModelConfig | None = None  # the latest READY version's completed config


def _required_versions(config: mc.ModelConfig) -> dict[str, list[int]]:
    required: dict[str, set[int]] = {}
    for step in config.ensemble_scheduling.step:
        required.setdefault(step.model_name, set()).add(step.model_version)
    return {name: sorted(versions) for name, versions in required.items()}


def _dependency_problem(
    name: str, step_model: str, state: StepModelState, wanted: list[int]
) -> str:
    if state.graph_error:
        return not_valid(name, step_model, state.graph_error)
    if not state.versions or state.config is None:
        return no_loaded_version(name, step_model, state.load_error)
    problem = ""
    for version in wanted:  # Triton keeps the last version it misses
        if version != LATEST_VERSION and version not in state.versions:
            problem = version_not_loaded(name, step_model, version)
    return problem


def first_problem(name: str, config: mc.ModelConfig, steps: Mapping[str, StepModelState]) -> str:
    """Triton's message for the first reason it refuses ensemble ``name`` ("" when it loads).
    ``steps`` holds every step model by the name the steps use. (A cycle, which Triton finds
    between the two, is found by the server as it loads the steps.)"""
    missing = [m for m, state in steps.items() if not state.available]
    if missing:
        return not_available(name, missing)
    required = _required_versions(config)
    for step_model, state in steps.items():
        problem = _dependency_problem(name, step_model, state, required.get(step_model, []))
        if problem:
            return problem
    check = ComposingCheck(config, name)
    for index, step in enumerate(config.ensemble_scheduling.step):
        step_config = steps[step.model_name].config
        if step_config is None:  # not reached: a step model without a READY version is refused
            check.skip_step()
            continue
        check.add_step(index, step, step_config)
    check.check_decoupled()
    return check.findings[0].message if check.findings else ""
