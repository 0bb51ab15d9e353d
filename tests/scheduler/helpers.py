"""Fake backends and request builders for the scheduler tests (no sleeps, no real models)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

from repokit.backends.base import Backend, BackendRequest, BackendResult, ModelContext, Timing
from repokit.config.parse import parse_text
from repokit.errors import invalid_arg
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor


def config(text: str) -> mc.ModelConfig:
    return parse_text(text)


def tensor(name: str, values: Any, datatype: str = "FP32") -> InferTensor:
    data = np.asarray(values)
    return InferTensor(name, datatype, tuple(data.shape), data)


def request(**inputs: Any) -> BackendRequest:
    return BackendRequest(
        inputs={name: tensor(name, np.asarray(v, dtype=np.float32)) for name, v in inputs.items()},
        requested_outputs=(),
    )


class RecordingBackend(Backend):
    """Echoes INPUT0 as OUTPUT0 (times 2); records every batch; can be held to control timing."""

    def __init__(self, instances: int = 1, cfg: mc.ModelConfig | None = None) -> None:
        super().__init__(
            ModelContext(
                name="m",
                version=1,
                model_dir=Path("."),
                version_dir=Path("."),
                repository=Path("."),
                config=cfg or mc.ModelConfig(name="m"),
                config_json="{}",
            )
        )
        self._count = instances
        self.batches: list[tuple[int, list[BackendRequest]]] = []
        self.gate: asyncio.Event | None = None
        self.instance_gates: dict[int, asyncio.Event] = {}
        self.raise_exc: Exception | None = None
        self.started = asyncio.Event()
        self.fail_with: str | None = None

    @property
    def instance_count(self) -> int:
        return self._count

    async def load(self) -> None:
        return None

    async def unload(self) -> None:
        return None

    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        self.batches.append((instance, requests))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if instance in self.instance_gates:
            await self.instance_gates[instance].wait()
        if self.raise_exc is not None:
            raise self.raise_exc
        results = []
        for req in requests:
            if self.fail_with is not None:
                results.append(BackendResult(error=invalid_arg(self.fail_with)))
                continue
            outputs = [
                InferTensor(
                    "OUTPUT" + name[len("INPUT") :],
                    t.datatype,
                    t.shape,
                    np.asarray(t.data) * 2 if t.datatype != "BYTES" else t.data,
                )
                for name, t in req.inputs.items()
                if name.startswith("INPUT")
            ]
            results.append(BackendResult(outputs=outputs))
        return results, Timing(1, 2, 3)
