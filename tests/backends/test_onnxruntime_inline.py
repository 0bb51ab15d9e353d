"""onnxruntime: tiny models move from the thread pool to the event loop after a few quick runs;
results stay right with several instances running concurrently, before and after the move."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from repokit.backends.onnxruntime import INLINE_AFTER_RUNS
from tests.backends.conftest import request
from tests.backends.test_onnxruntime import ADD_SUB_CONFIG, add_sub_model, loaded


async def test_quick_model_results_stay_right_across_instances(tmp_path: Path) -> None:
    backend = await loaded(
        tmp_path,
        "quick",
        ADD_SUB_CONFIG.format(name="quick", t="TYPE_FP32", extra=""),
        add_sub_model(),
    )

    async def run(instance: int, value: float) -> None:
        a = np.full((2, 4), value, dtype=np.float32)
        b = np.ones((2, 4), dtype=np.float32)
        (result,), timing = await backend.execute(instance, [request({"INPUT0": a, "INPUT1": b})])
        assert result.error is None and timing.compute_infer_ns > 0
        np.testing.assert_array_equal(result.outputs[0].data, a + 1)
        np.testing.assert_array_equal(result.outputs[1].data, a - 1)

    for round_ in range(3 * INLINE_AFTER_RUNS):
        await asyncio.gather(*(run(i % 2, float(round_ * 10 + i)) for i in range(6)))
    await backend.unload()
