"""A python model instance process that dies (killed, segfault, hung past the limit) is reaped
and restarted; a model that keeps dying gives up with a reason.

Triton 2.51 answers the requests that were at a dead stub with ``Stub process '<instance>' is
not healthy.`` (checked against real Triton with a model that sends itself SIGSEGV).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import numpy as np

from repokit.backends.python.backend import PythonBackend
from repokit.backends.python.restarts import RestartBudget, exit_description
from repokit.errors import Code
from tests.backends.conftest import make_context, request

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""

# INPUT0 = 1: segfault; 2: hang; anything else: identity. initialize appends its pid to
# "inits" beside model.py, and fails when a file "refuse" is there.
MODEL = """
import os, signal, time
from pathlib import Path
import triton_python_backend_utils as pb_utils

HERE = Path(__file__).parent


class TritonPythonModel:
    def initialize(self, args):
        if (HERE / "refuse").exists():
            raise RuntimeError("refusing to start again")
        with open(HERE / "inits", "a") as f:
            f.write(f"{os.getpid()}\\n")

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x[0] == 1:
                os.kill(os.getpid(), signal.SIGSEGV)
            if x[0] == 2:
                time.sleep(600)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
"""


async def load(tmp_path: Path, name: str, **kwargs: object) -> PythonBackend:
    context = make_context(tmp_path, name, CONFIG.format(name=name), {"model.py": MODEL})
    backend = PythonBackend(context, **kwargs)  # type: ignore[arg-type]
    await backend.load()
    return backend


async def infer(backend: PythonBackend, value: float) -> tuple[float | None, str]:
    (result,), _ = await backend.execute(0, [request({"INPUT0": np.array([value], np.float32)})])
    if result.error is not None:
        return None, result.error.message
    return float(result.outputs[0].data[0]), ""


def inits(tmp_path: Path, name: str) -> list[int]:
    return [int(line) for line in (tmp_path / name / "1" / "inits").read_text().split()]


async def until(condition: object, what: str) -> None:
    """Wait for a state change the test caused (no timing is asserted)."""
    for _ in range(3000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def reaped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_killed_idle_instance_is_reaped_and_restarted(tmp_path: Path) -> None:
    backend = await load(tmp_path, "killed")
    (pid,) = backend.describe()["pids"]
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not backend.health(), "the death is noticed")
    assert backend.problem().startswith("instance 'killed_0_0' is restarting")
    assert await infer(backend, 5.0) == (5.0, "")  # waits for the new process
    assert backend.health() and backend.problem() == ""
    first, second = inits(tmp_path, "killed")
    assert first == pid and second != pid and backend.describe()["pids"] == [second]
    assert reaped(pid)  # no zombie left
    await backend.unload()
    assert reaped(second)


async def test_a_segfault_fails_its_request_with_tritons_text_and_the_next_is_served(
    tmp_path: Path,
) -> None:
    backend = await load(tmp_path, "segv")
    (pid,) = backend.describe()["pids"]
    assert await infer(backend, 1.0) == (None, "Stub process 'segv_0_0' is not healthy.")
    assert await infer(backend, 3.0) == (3.0, "")
    assert len(inits(tmp_path, "segv")) == 2 and reaped(pid)
    await backend.unload()


async def test_an_execute_past_the_limit_is_killed_and_restarted(tmp_path: Path) -> None:
    backend = await load(tmp_path, "hangs", execute_timeout_s=0.3)
    value, error = await infer(backend, 2.0)
    assert value is None
    assert error == (
        "Stub process 'hangs_0_0' is not healthy. Execute did not finish within 0.3 s "
        "(--python-execute-timeout-secs), the process was killed."
    )
    assert await infer(backend, 4.0) == (4.0, "")
    assert len(inits(tmp_path, "hangs")) == 2
    await backend.unload()


async def test_no_limit_by_default(tmp_path: Path) -> None:
    backend = await load(tmp_path, "patient")
    assert backend._processes.execute_timeout_s == 0
    await backend.unload()


async def test_a_model_that_keeps_dying_gives_up_with_the_reason(tmp_path: Path) -> None:
    backend = await load(tmp_path, "dies", restart_budget=RestartBudget(limit=1))
    failed: list[str] = []
    backend.on_failed = failed.append
    assert (await infer(backend, 1.0))[1] == "Stub process 'dies_0_0' is not healthy."
    assert await infer(backend, 0.0) == (0.0, "")  # one restart allowed
    assert (await infer(backend, 1.0))[1] == "Stub process 'dies_0_0' is not healthy."
    await until(lambda: failed, "the backend gives up")
    assert failed == [
        "model instance 'dies_0_0' died 2 times within 60 s and is not restarted again "
        "(last: killed by signal SIGSEGV)"
    ]
    value, error = await infer(backend, 0.0)
    assert value is None and error == f"model 'dies' is unavailable: {failed[0]}"
    assert backend.problem() == failed[0] and not backend.health()
    await backend.unload()


async def test_a_restart_whose_initialize_fails_gives_up(tmp_path: Path) -> None:
    backend = await load(tmp_path, "refuses")
    failed: list[str] = []
    backend.on_failed = failed.append
    (tmp_path / "refuses" / "1" / "refuse").touch()
    assert (await infer(backend, 1.0))[1] == "Stub process 'refuses_0_0' is not healthy."
    await until(lambda: failed, "the restart fails")
    assert failed[0].startswith(
        "restarting model instance 'refuses_0_0' failed: RuntimeError: refusing to start again"
    )
    (result,), _ = await backend.execute(0, [request({"INPUT0": np.zeros(1, np.float32)})])
    assert result.error is not None and result.error.code is Code.UNAVAILABLE
    await backend.unload()


async def test_unload_while_restarting_leaves_no_process(tmp_path: Path) -> None:
    backend = await load(tmp_path, "unloaded")
    (pid,) = backend.describe()["pids"]
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not backend.health(), "the death is noticed")
    await backend.unload()
    assert reaped(pid)
    for started in inits(tmp_path, "unloaded"):
        assert reaped(started)


def test_budget_and_exit_descriptions() -> None:
    now = [0.0]
    budget = RestartBudget(limit=2, window_s=10, clock=lambda: now[0])
    assert budget.allow() and budget.allow() and not budget.allow()
    now[0] = 100.0  # the old deaths left the window
    assert budget.allow()
    assert exit_description(-11) == "killed by signal SIGSEGV"
    assert exit_description(3) == "exited with code 3"
