"""Build small repositories in tmp_path and validate them."""

from __future__ import annotations

from pathlib import Path

from repokit.config.report import ModelReport, ValidateOptions
from repokit.config.validate import validate_repository

MODEL_PY = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
IO = (
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)


def make_model(
    root: Path,
    name: str = "m",
    config: str | None = 'backend: "python"\n' + IO,
    versions: tuple[str, ...] = ("1",),
    files: dict[str, bytes | str] | None = None,
) -> Path:
    model = root / name
    model.mkdir(parents=True)
    if config is not None:
        (model / "config.pbtxt").write_text(config)
    for version in versions:
        (model / version).mkdir()
        (model / version / "model.py").write_text(MODEL_PY)
    for rel, data in (files or {}).items():
        path = model / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    return model


def validate_one(root: Path, name: str = "m", **options: object) -> ModelReport:
    report = validate_repository(root, ValidateOptions(**options))  # type: ignore[arg-type]
    return report.models[name]


def rules(report: ModelReport, errors_only: bool = False) -> list[str]:
    return [d.rule for d in report.diagnostics if d.is_error or not errors_only]


def python_config(body: str, io: str = IO) -> str:
    return f'backend: "python"\n{io}{body}\n'
