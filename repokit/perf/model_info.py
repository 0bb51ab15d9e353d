"""What the load generator needs to know about a model, from its metadata and config.

Both come from the server (HTTP JSON or gRPC messages converted to the same JSON shape, where
64-bit integers may be strings). Inputs and outputs come from the metadata (any KServe v2
server has it); batching, sequence batching, ensemble steps and decoupled mode from the config
(Triton's model-configuration extension). A server without the config extension still works:
the model is then treated as non-batching with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from repokit.perf.errors import PerfError, option_error


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # protocol name: "FP32", "BYTES", ...
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable


@dataclass
class ModelInfo:
    name: str
    version: str
    max_batch_size: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    is_sequence: bool = False
    is_ensemble: bool = False
    ensemble_steps: list[tuple[str, str]] = field(default_factory=list)
    decoupled: bool = False
    response_cache: bool = False
    has_config: bool = True
    optional_inputs: frozenset[str] = frozenset()  # config inputs with optional: true

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)


def _dims(values: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in values or ())


def _tensors(entries: Any, strip_batch: bool, where: str) -> list[TensorSpec]:
    out: list[TensorSpec] = []
    for entry in entries or []:
        try:
            shape = _dims(entry.get("shape"))
            if strip_batch and shape:
                shape = shape[1:]
            out.append(TensorSpec(str(entry["name"]), str(entry["datatype"]), shape))
        except (KeyError, TypeError, ValueError) as exc:
            raise PerfError(f"the server's {where} is malformed: {exc!r}") from None
    return out


def build_model_info(
    model: str, version: str, metadata: dict[str, Any], config: dict[str, Any] | None
) -> ModelInfo:
    has_config = config is not None
    cfg = config or {}
    max_batch = int(cfg.get("max_batch_size", 0) or 0)
    strip = max_batch > 0
    inputs = _tensors(metadata.get("inputs"), strip, "model metadata")
    outputs = _tensors(metadata.get("outputs"), strip, "model metadata")
    if not inputs:
        raise PerfError(f"model '{model}' has no inputs in its metadata")
    steps = [
        (str(s.get("model_name", "")), str(s.get("model_version", "-1")))
        for s in (cfg.get("ensemble_scheduling") or {}).get("step", []) or []
    ]
    policy = cfg.get("model_transaction_policy") or {}
    cache = cfg.get("response_cache") or {}
    versions = metadata.get("versions") or []
    resolved_version = version or (str(versions[-1]) if versions else "")
    return ModelInfo(
        name=model,
        version=resolved_version,
        max_batch_size=max_batch,
        inputs=inputs,
        outputs=outputs,
        is_sequence="sequence_batching" in cfg,
        is_ensemble=cfg.get("platform") == "ensemble" or bool(steps),
        ensemble_steps=steps,
        decoupled=bool(policy.get("decoupled", False)),
        response_cache=bool(cache.get("enable", False)),
        has_config=has_config,
        optional_inputs=frozenset(
            str(entry.get("name", ""))
            for entry in cfg.get("input") or []
            if isinstance(entry, dict) and entry.get("optional")
        ),
    )


def check_batch_size(info: ModelInfo, batch_size: int) -> None:
    if batch_size > 1 and info.max_batch_size == 0:
        raise option_error(
            f"model '{info.name}' does not support batching (max_batch_size 0); "
            f"-b {batch_size} is not allowed"
        )
    if info.max_batch_size and batch_size > info.max_batch_size:
        raise option_error(
            f"-b {batch_size} exceeds max_batch_size {info.max_batch_size} of model '{info.name}'"
        )
