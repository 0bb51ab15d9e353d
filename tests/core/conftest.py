"""Fixtures for driving InferenceService directly (no HTTP).

Repositories are built in tmp_path: the sample models are copied from sample_repos, the rest
are the models used to record Triton 2.51's answers (tests/core/testdata). Python-backend
models run on ``NumpyBackend``, a small real Backend computing the same functions as the
sample model.py files (add/sub, pass-through), so these tests exercise the core on its own;
ONNX models run on the real onnxruntime backend from the registry.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from repokit.backends.base import Backend, BackendRequest, BackendResult, ModelContext, Timing
from repokit.backends.registry import create_backend
from repokit.core.compose import build_service
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings
from repokit.errors import Code, RepokitError
from repokit.paths import default_sample_repository
from repokit.protocol.types import InferTensor


@dataclass
class Controls:
    """Hooks a test uses to steer NumpyBackend: a gate that holds executions, counters."""

    gate: asyncio.Event | None = None
    started: asyncio.Event | None = None
    loads: dict[str, int] = field(default_factory=dict)
    unloads: dict[str, int] = field(default_factory=dict)
    seen: list[BackendRequest] = field(default_factory=list)


class NumpyBackend(Backend):
    """add_sub: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; any other model: every
    output is its first input. A config parameter ``fail_load`` makes load() fail and
    ``fail_execute`` makes every request fail."""

    def __init__(self, context: ModelContext, controls: Controls) -> None:
        super().__init__(context)
        self._controls = controls
        self._params = {k: v.string_value for k, v in context.config.parameters.items()}

    @property
    def instance_count(self) -> int:
        return max(1, sum(g.count for g in self.context.config.instance_group))

    async def load(self) -> None:
        if "fail_load" in self._params:
            raise RepokitError(Code.INTERNAL, self._params["fail_load"])
        name = self.context.name
        self._controls.loads[name] = self._controls.loads.get(name, 0) + 1

    async def unload(self) -> None:
        name = self.context.name
        self._controls.unloads[name] = self._controls.unloads.get(name, 0) + 1

    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        self._controls.seen.extend(requests)
        if self._controls.started is not None:
            self._controls.started.set()
        if self._controls.gate is not None:
            await self._controls.gate.wait()
        began = time.perf_counter_ns()
        results = [self._one(r) for r in requests]
        return results, Timing(1000, time.perf_counter_ns() - began, 1000)

    def _one(self, request: BackendRequest) -> BackendResult:
        if "fail_execute" in self._params:
            return BackendResult(error=RepokitError(Code.INTERNAL, self._params["fail_execute"]))
        config = self.context.config
        datatypes = {o.name: o.data_type for o in config.output}
        if self.context.name == "add_sub":
            a = request.inputs["INPUT0"].data
            b = request.inputs["INPUT1"].data
            values = {"OUTPUT0": a + b, "OUTPUT1": a - b}
        else:
            first = request.inputs[config.input[0].name].data
            values = {o.name: first for o in config.output}
        outputs = [
            InferTensor(
                name, request.inputs[next(iter(request.inputs))].datatype, tuple(value.shape), value
            )
            for name, value in values.items()
            if name in datatypes
        ]
        return BackendResult(outputs=outputs)


def backend_factory(controls: Controls) -> Callable[[ModelContext], Backend]:
    def create(context: ModelContext) -> Backend:
        if context.config.backend == "python":
            return NumpyBackend(context, controls)
        return create_backend(context)

    return create


PASSTHRU_PY = "# served by NumpyBackend in tests/core\nclass TritonPythonModel:\n    pass\n"

MODELS: dict[str, str] = {
    "opt_in": """
backend: "python"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
""",
    "reshape_in": """
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
""",
    "classify": """
backend: "python"
max_batch_size: 2
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "PROB" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
""",
    "strin": """
backend: "python"
max_batch_size: 0
input [ { name: "S" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "S_OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
""",
    "dyn2": """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
""",
    "multiver": """
backend: "python"
max_batch_size: 0
version_policy { specific { versions: [ 1, 3 ] } }
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
""",
    "decoupled": """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
""",
}
BAD_MODELS: dict[str, str] = {
    "bad_mbs": """
backend: "python"
max_batch_size: -1
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
""",
    "parse_err": "this is { not pbtxt\n",
}


def write_model(repo: Path, name: str, config: str, versions: tuple[int, ...] = (1,)) -> Path:
    model = repo / name
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(config)
    for version in versions:
        (model / str(version)).mkdir(exist_ok=True)
        (model / str(version) / "model.py").write_text(PASSTHRU_PY)
    return model


def build_repository(root: Path, *, bad: bool = False) -> Path:
    """Sample models (add_sub, identity, accumulate, add_sub_onnx, ensemble) + test models."""
    repo = root / "models"
    sample = default_sample_repository()
    for name in ("add_sub", "identity", "accumulate", "add_sub_onnx", "add_sub_ensemble"):
        shutil.copytree(sample / name, repo / name)
    for name, config in MODELS.items():
        write_model(repo, name, config, (1, 2, 3) if name == "multiver" else (1,))
    (repo / "classify" / "labels.txt").write_text("cat\ndog\nbird\n")
    if bad:
        for name, config in BAD_MODELS.items():
            write_model(repo, name, config)
        (repo / "noversion").mkdir()
        (repo / "noversion" / "config.pbtxt").write_text(MODELS["multiver"])
    return repo


@pytest.fixture
def controls() -> Controls:
    return Controls()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return build_repository(tmp_path)


@pytest.fixture
async def service(repository: Path, controls: Controls) -> AsyncIterator[InferenceService]:
    settings = ServerSettings(repositories=[repository], allow_client_shm=True)
    svc = build_service(settings, backend_factory(controls))
    await svc.start()
    yield svc
    await svc.stop()


def f32(*shape: int, start: float = 0.0) -> np.ndarray:
    count = int(np.prod(shape)) if shape else 1
    return (np.arange(count, dtype=np.float32) + start).reshape(shape)
