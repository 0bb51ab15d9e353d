"""Small repositories for the ensemble and lint tests: python-backend steps and ensembles."""

from __future__ import annotations

from pathlib import Path

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
