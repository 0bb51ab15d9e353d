"""Diagnostic: one finding of ``repokit validate`` / ``repokit lint``, as plain data."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class Severity(str, enum.Enum):
    ERROR = "error"  # Triton would refuse to load the model
    WARNING = "warning"  # Triton loads it, but something is likely wrong
    INFO = "info"  # advice


@dataclass(frozen=True)
class Diagnostic:
    rule: str  # stable rule id, e.g. "input-dims-invalid"
    severity: Severity
    model: str  # model directory name ("" for repository-level findings)
    message: str  # what is wrong and what is expected
    file: str = ""  # path relative to the repository root
    path: str = ""  # field path, e.g. "input[0].dims[1]"
    line: int = 0  # 1-based; 0 when unknown
    column: int = 0  # 1-based; 0 when unknown
    # the load error as Triton 2.51 states it when it differs from ``message`` (which says
    # what to fix): ``repokit serve`` answers and logs this text
    triton: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        del data["triton"]
        return data

    @property
    def load_error(self) -> str:
        """What a server refusing the model says (Triton's words)."""
        return self.triton or self.message

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR
