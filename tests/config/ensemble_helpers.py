"""Small repositories for the ensemble and lint tests: python-backend steps and ensembles."""

from __future__ import annotations

from pathlib import Path

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.parse import parse_text
from repokit.config.report import ModelReport, RepositoryReport

MODEL_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
"""


def python_config(
    name: str,
    *,
    max_batch_size: int = 8,
    inputs: str = 'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    outputs: str = 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    extra: str = "",
) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        f"{inputs}\n{outputs}\n{extra}\n"
    )


def ensemble_config(
    name: str,
    steps: str,
    *,
    max_batch_size: int = 8,
    inputs: str = 'input [ { name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    outputs: str = 'output [ { name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    extra: str = "",
) -> str:
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f"{inputs}\n{outputs}\nensemble_scheduling {{ {steps} }}\n{extra}\n"
    )


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'step {{ model_name: "{model}" model_version: {version} {maps} }}'


def write_model(
    root: Path, name: str, config: str | None, versions: tuple[str, ...] = ("1",)
) -> Path:
    """A model directory: config.pbtxt (if given) and version dirs (model.py unless ensemble)."""
    directory = root / name
    directory.mkdir(parents=True)
    if config is not None:
        (directory / "config.pbtxt").write_text(config)
    ensemble = config is not None and 'platform: "ensemble"' in config
    for version in versions:
        (directory / version).mkdir()
        if not ensemble:
            (directory / version / "model.py").write_text(MODEL_PY)
    return directory


def manual_report(
    root: Path,
    models: dict[str, str | None],
    versions: dict[str, list[int]] | None = None,
    broken: dict[str, str] | None = None,
) -> RepositoryReport:
    """Write the models and build the report validate would produce for these simple cases
    (configs parsed as written, given versions, an error finding for each ``broken`` model)."""
    report = RepositoryReport(root=root)
    for name, text in models.items():
        directory = write_model(root, name, text)
        model = ModelReport(
            name=name,
            directory=directory,
            config_file=directory / "config.pbtxt" if text is not None else None,
            config=parse_text(text) if text is not None else None,
            versions=(versions or {}).get(name, [1]),
        )
        if broken and name in broken:
            model.diagnostics.append(
                Diagnostic("some-rule", Severity.ERROR, name, broken[name], f"{name}/config.pbtxt")
            )
        report.models[name] = model
    return report
