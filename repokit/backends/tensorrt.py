"""TensorRT plans through polygraphy, when ``tensorrt`` is importable.

Without TensorRT (no NVIDIA GPU, or the extra not installed) ``load()`` fails with UNAVAILABLE
and a message saying how to get it, so the model shows UNAVAILABLE with that reason and every
other model still loads. Nothing here is imported until a tensorrt_plan model is loaded.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from repokit.backends.base import (
    Backend,
    BackendRequest,
    BackendResult,
    ModelContext,
    Timing,
    instance_count,
)
from repokit.errors import Code, RepokitError
from repokit.protocol import datatypes
from repokit.protocol.types import InferTensor

NOT_INSTALLED = (
    "TensorRT is not installed: tensorrt_plan models need an NVIDIA GPU with TensorRT; "
    "install it with `pip install repokit[tensorrt]`"
)


class TensorRTBackend(Backend):
    def __init__(self, context: ModelContext) -> None:
        super().__init__(context)
        self._count = instance_count(context.config)
        self._runners: list[Any] = []

    @property
    def instance_count(self) -> int:
        return self._count

    async def load(self) -> None:
        try:
            import tensorrt  # noqa: F401
            from polygraphy.backend.trt import EngineFromBytes, TrtRunner
        except ImportError:
            raise RepokitError(Code.UNAVAILABLE, NOT_INSTALLED) from None
        path = self.context.version_dir / (
            self.context.config.default_model_filename or "model.plan"
        )
        if not path.is_file():
            raise RepokitError(
                Code.UNAVAILABLE, f"unable to find '{path}' for model '{self.context.name}'"
            )
        data = path.read_bytes()
        for _ in range(self._count):
            runner = TrtRunner(EngineFromBytes(data))
            await asyncio.to_thread(runner.activate)
            self._runners.append(runner)

    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        runner = self._runners[instance % len(self._runners)]
        results: list[BackendResult] = []
        start = time.perf_counter_ns()
        for request in requests:
            feed = {name: tensor.data for name, tensor in request.inputs.items()}
            try:
                produced = await asyncio.to_thread(runner.infer, feed)
            except Exception as exc:
                results.append(
                    BackendResult(error=RepokitError(Code.INTERNAL, f"TensorRT error: {exc}"))
                )
                continue
            outputs = []
            for name, array in produced.items():
                if request.requested_outputs and name not in request.requested_outputs:
                    continue
                found = datatypes.from_numpy(array.dtype)
                datatype = found.protocol if found is not None else "BYTES"
                outputs.append(InferTensor(name, datatype, tuple(array.shape), array))
            results.append(BackendResult(outputs=outputs))
        return results, Timing(compute_infer_ns=time.perf_counter_ns() - start)

    async def unload(self) -> None:
        runners, self._runners = self._runners, []
        for runner in runners:
            await asyncio.to_thread(runner.deactivate)
