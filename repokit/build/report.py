"""Plain data for ``repokit build``: options in, a BuildReport out (rendered by cli/build.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from repokit.build.profiles import ShapeSpec
from repokit.config.diagnostics import Diagnostic, Severity

ModelStatus = Literal["built", "up-to-date", "copied", "failed", "out-of-date"]


@dataclass(frozen=True)
class BuildOptions:
    profile: bool = False  # derive optimization profiles and warmup samples
    profiles: int = 1  # number of contiguous batch ranges
    split_at_preferred: bool = False  # batch ranges end at the preferred batch sizes
    shapes: tuple[ShapeSpec, ...] = ()  # --shape NAME:MIN,OPT,MAX
    sample_data: Path | None = None  # perf_analyzer input-data JSON
    to: Literal["", "tensorrt"] = ""  # convert ONNX models to TensorRT plans
    engine: Literal["auto", "require"] = "auto"
    verify: bool = False  # compare TensorRT with ONNX Runtime after the build
    in_place: bool = False
    check: bool = False  # only say whether the output is up to date
    workspace_mb: int = 1024
    models: tuple[str, ...] = ()  # only these models; () = all
    fp16: bool = False
    warmup_data: Literal["zero", "random"] = "zero"
    seed: int = 0
    default_max_batch_size: int = 4  # Triton's --backend-config=default-max-batch-size

    def fingerprint(self) -> dict[str, Any]:
        """The options that change what a model compiles to (for incremental builds)."""
        return {
            "profile": self.profile or self.to == "tensorrt",
            "profiles": self.profiles,
            "split_at_preferred": self.split_at_preferred,
            "shapes": [[s.name, list(s.min), list(s.opt), list(s.max)] for s in self.shapes],
            "to": self.to,
            "engine": self.engine,
            "verify": self.verify,
            "workspace_mb": self.workspace_mb,
            "fp16": self.fp16,
            "warmup_data": self.warmup_data,
            "seed": self.seed,
            "default_max_batch_size": self.default_max_batch_size,
        }


@dataclass
class EngineReport:
    requested: bool = False
    built: bool = False
    skipped_reason: str = ""
    tensorrt_version: str = ""
    plan_files: list[str] = field(default_factory=list)  # relative to the model directory
    plan_sha256: list[str] = field(default_factory=list)
    plan_bytes: int = 0
    workspace_mb: int = 0
    timing_cache: str = ""
    precision: str = "fp32"
    verified: bool | None = None  # None = not verified
    verify_detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ModelBuildReport:
    name: str
    status: ModelStatus
    backend: str = ""
    target: str = ""  # what serves the compiled model: onnxruntime, tensorrt, python, ...
    reason: str = ""  # why it failed, or why it was only copied
    completed: list[str] = field(default_factory=list)  # config fields filled from the model
    diagnostics: list[Diagnostic] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    warmup: list[dict[str, Any]] = field(default_factory=list)
    engine: EngineReport = field(default_factory=EngineReport)
    notes: list[str] = field(default_factory=list)
    source_hash: str = ""
    output_hash: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "backend": self.backend,
            "target": self.target,
            "reason": self.reason,
            "completed": self.completed,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "profiles": self.profiles,
            "warmup": self.warmup,
            "engine": self.engine.to_dict(),
            "notes": self.notes,
            "source_hash": self.source_hash,
            "output_hash": self.output_hash,
        }


@dataclass
class BuildReport:
    source: Path
    output: Path
    check: bool = False
    models: list[ModelBuildReport] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)  # repository-level findings
    lock_file: Path | None = None
    removed: list[str] = field(default_factory=list)  # stale compiled models removed
    out_of_date: list[str] = field(default_factory=list)  # --check: what a build would redo

    @property
    def failed(self) -> list[str]:
        return [m.name for m in self.models if m.status == "failed"]

    @property
    def exit_code(self) -> int:
        if self.check:
            return 1 if self.out_of_date else 0
        errors = any(d.severity is Severity.ERROR for d in self.diagnostics)
        return 1 if self.failed or errors else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "output": str(self.output),
            "check": self.check,
            "lock_file": str(self.lock_file) if self.lock_file else None,
            "models": [m.to_dict() for m in self.models],
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "removed": self.removed,
            "out_of_date": self.out_of_date,
            "failed": self.failed,
            "exit_code": self.exit_code,
        }
