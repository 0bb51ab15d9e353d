"""Plain-data results of validating a repository (rendered by cli/, serialised to JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.protocol.generated import model_config_pb2 as mc


@dataclass(frozen=True)
class ValidateOptions:
    strict: bool = False  # Triton's --disable-auto-complete-config / --strict-model-config
    target: Literal["cpu", "gpu"] = "cpu"  # the server the repository is validated for
    models: tuple[str, ...] = ()  # only these models (and what their ensembles need); () = all
    deep: bool = False  # also read the model files (config.deep); the CLI turns it on
    read_sources: bool = True  # parse python models' model.py (the CLI's --no-deep turns it off)
    model_config_name: str = ""  # Triton's --model-config-name
    gpus: int = -1  # --target gpu: the server's GPU count (ids 0..gpus-1); -1 = not known
    python_auto_complete: bool = False  # run python models' auto_complete_config (model code)
    backend_directory: str = ""  # tritonserver's --backend-directory; "" = not known


@dataclass
class ModelReport:
    name: str  # directory name
    directory: Path
    config_file: Path | None  # None when there is no config file
    config: mc.ModelConfig | None  # parsed and normalised; None if it could not be parsed
    versions: list[int] = field(default_factory=list)  # versions the policy will load
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when Triton would load the model (no error-severity findings)."""
        return not any(d.severity is Severity.ERROR for d in self.diagnostics)


@dataclass
class RepositoryReport:
    root: Path
    models: dict[str, ModelReport] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)  # repository-level findings

    def all_diagnostics(self) -> list[Diagnostic]:
        out = list(self.diagnostics)
        for report in self.models.values():
            out.extend(report.diagnostics)
        return out

    @property
    def error_count(self) -> int:
        return sum(1 for d in self.all_diagnostics() if d.severity is Severity.ERROR)

    def to_dict(self) -> dict[str, Any]:
        return {
            "repository": str(self.root),
            "models": {
                name: {
                    "ok": r.ok,
                    "versions": r.versions,
                    "diagnostics": [d.to_dict() for d in r.diagnostics],
                }
                for name, r in sorted(self.models.items())
            },
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "errors": self.error_count,
        }
