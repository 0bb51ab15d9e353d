"""What a rule function sees: the model, its resolved config and a way to report findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.report import ValidateOptions
from repokit.config.rules.catalog import RULES
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.repository.layout import ModelDir


@dataclass
class RuleContext:
    model: ModelDir
    config: mc.ModelConfig  # backend-resolved and normalised (not the instance groups)
    options: ValidateOptions
    root: Path  # repository root, for relative file names
    config_file: str = ""  # relative to root; "" when there is no config file
    versions: list[int] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.config.name or self.model.name

    def relative(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def report(
        self,
        rule_id: str,
        message: str,
        path: str = "",
        file: str | None = None,
        severity: Severity | None = None,
        line: int = 0,
        column: int = 0,
        triton: str = "",
    ) -> None:
        """Record a finding; ``triton``: Triton's own words for it when they differ from
        ``message`` (what serving answers and logs)."""
        info = RULES[rule_id]
        self.diagnostics.append(
            Diagnostic(
                rule=rule_id,
                severity=severity or info.severity,
                model=self.model.name,
                message=message,
                file=self.config_file if file is None else file,
                path=path,
                line=line,
                column=column,
                triton=triton,
            )
        )
