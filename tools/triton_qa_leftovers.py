"""More of qa/L0_lifecycle as scenarios for ``triton_qa.py``: the cases whose models are the
suite's ``identity_zero_1_int32`` (Triton's test-only identity backend with a 10 s
``creation_delay_sec``) stood in for by a python model that sleeps as long in ``initialize``,
beside the suite's python models; and the three shutdown cases whose models are Triton's C++
``custom_zero_1_float32`` (the identity backend, its execute_delay_ms slept in each execution)
and ``custom_sequence_int32`` (the sequence backend), stood in for by the python models the
other suites use for them. Nothing here is Triton's text: the tests and configs are read from
a git dir at run time.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tools.triton_qa_reliability import SLOT_SEQUENCE_STAND_IN
from tools.triton_qa_suites import (
    IDENTITY_STAND_IN,
    HttpCall,
    Layout,
    LogCheck,
    PytestRun,
    Scenario,
    append,
    rename,
    sed,
)
from tools.triton_qa_suites import _delayed_identity as _executing_identity

LC = "L0_lifecycle"

NOT_APPLICABLE: dict[str, str] = {
    "L0_lifecycle identity reload cases": "test_model_availability_on_reload(_2, _3) and"
    " test_model_reload_fail make new version folders of identity_zero_1_int32 while the"
    " server runs (os.mkdir, no files): Triton's identity backend needs none, a python"
    " stand-in needs its model.py there (test_model_reload_fail also needs a GPU)",
    "L0_lifecycle stress and custom cases": "test_concurrent_same_model_load_unload_stress"
    " loads and unloads 32 x 1024 times (a python stand-in starts a process each time: hours"
    " on 2 cores); test_concurrent_model_load_unload's ensemble steps are Triton's C++"
    " custom_zero_1_float32",
    "L0_lifecycle identity overrides": "test_model_config_overwite and"
    " test_shutdown_while_background_unloading load a config override naming the identity"
    " backend, which neither server has",
    "L0_lifecycle other models": "the rest load TensorFlow, TensorRT, torch or onnx models"
    " from Triton's DATADIR (this Triton has none of those backends); onnx in"
    " test_concurrent_model_instance_load_sanity too (PARALLEL_BACKENDS is python here);"
    " test_load_gpu_limit needs a GPU (cuda_memory_consumer)",
}

# the identity backend's creation_delay_sec, as the stand-in's initialize
DELAYED_CREATION_STAND_IN = IDENTITY_STAND_IN.replace(
    '        config = json.loads(args["model_config"])\n',
    '        config = json.loads(args["model_config"])\n'
    '        delay = config.get("parameters", {}).get("creation_delay_sec", {})\n'
    '        import time\n\n        time.sleep(float(delay.get("string_value", "0")))\n',
)


def _delayed_identity(source: Path, folder: Path, name: str) -> None:
    """``cp -r identity_zero_1_int32 FOLDER && mkdir FOLDER/1`` (renamed ``name``), its
    backend a python stand-in that sleeps the config's creation_delay_sec while it loads."""
    shutil.copytree(source, folder)
    config = folder / "config.pbtxt"
    rename(config, name)
    sed(config, r'^backend: "identity"', 'backend: "python"')
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(DELAYED_CREATION_STAND_IN)


def _python_identity(qa: Path, folder: Path, name: str, *init: str) -> None:
    """``cp -r python_models/identity_fp32 FOLDER`` renamed, model.py moved into 1/ with
    ``init`` lines appended to its class."""
    shutil.copytree(qa / "python_models" / "identity_fp32", folder)
    rename(folder / "config.pbtxt", name)
    (folder / "1").mkdir()
    (folder / "model.py").rename(folder / "1" / "model.py")
    if init:
        append(folder / "1" / "model.py", *init)


def _load_speedup(qa: Path, repo: Path) -> None:
    """test.sh: two delayed identity models and two python identities sleeping 10 s."""
    source = qa / LC / "identity_zero_1_int32"
    for n in (1, 2):
        _delayed_identity(source, repo / f"identity_zero_1_int32_{n}", f"identity_zero_1_int32_{n}")
        name = f"python_identity_fp32_{n}"
        _python_identity(
            qa,
            repo / name,
            name,
            "    def initialize(self, args):",
            "        import time",
            "        time.sleep(10)",
        )


def _same_name_loads(qa: Path, repo: Path) -> None:
    """test.sh: models/identity_model (the delayed identity) and models_v2/identity_model (the
    python identity), which the test swaps in while the first load runs."""
    _delayed_identity(qa / LC / "identity_zero_1_int32", repo / "identity_model", "identity_model")
    _python_identity(qa, repo.parent / "models_v2" / "identity_model", "identity_model")


def _auto_completed_identity(*init: str) -> Layout:
    """test.sh: python_models/identity_fp32 with model.py in 1/ (``init`` appended) and its
    config removed (the model's auto_complete_config makes it)."""

    def lay(qa: Path, repo: Path) -> None:
        _python_identity(qa, repo / "identity_fp32", "identity_fp32", *init)
        (repo / "identity_fp32" / "config.pbtxt").unlink()

    return lay


def _sanity_models(qa: Path, repo: Path) -> None:
    """test.sh's python_float32_float32_float32 (identity_fp32 without its config)."""
    _python_identity(qa, repo / "python_float32_float32_float32", "python_float32_float32_float32")
    (repo / "python_float32_float32_float32" / "config.pbtxt").unlink()


def _retry_model(qa: Path, repo: Path) -> None:
    shutil.copytree(qa / LC / "retry_model", repo / "retry_model")


def _slow_zero(qa: Path, repo: Path) -> None:
    """test.sh: ``cp -r ../custom_models/custom_zero_1_float32 models/. && mkdir -p
    models/custom_zero_1_float32/1`` with ``dynamic_batching {}`` and a 5000 ms
    execute_delay_ms appended (the identity backend a python stand-in that sleeps it)."""
    folder = repo / "custom_zero_1_float32"
    shutil.copytree(qa / "custom_models" / "custom_zero_1_float32", folder)
    append(
        folder / "config.pbtxt",
        "dynamic_batching {}",
        "parameters [",
        '{ key: "execute_delay_ms"; value: { string_value: "5000" }}',
        "]",
    )
    _executing_identity(folder)


def _sequence_model(qa: Path, repo: Path) -> None:
    """test.sh: ``cp -r ../custom_models/custom_sequence_int32 models/. && mkdir -p
    models/custom_sequence_int32/1`` unchanged (5 s idle timeout, 3 ms execute_delay_ms), the
    sequence backend a python stand-in."""
    folder = repo / "custom_sequence_int32"
    shutil.copytree(qa / "custom_models" / "custom_sequence_int32", folder)
    config = folder / "config.pbtxt"
    sed(config, r'^backend: "sequence"', 'backend: "python"')
    sed(config, r"^default_model_filename:.*", "")
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(SLOT_SEQUENCE_STAND_IN)


def _slow_ensemble(qa: Path, repo: Path) -> None:
    """test.sh: ``cp -r ensemble_zero_1_float32 models/. && mkdir -p
    models/ensemble_zero_1_float32/1`` over the slow custom_zero_1_float32 above."""
    shutil.copytree(qa / LC / "ensemble_zero_1_float32", repo / "ensemble_zero_1_float32")
    (repo / "ensemble_zero_1_float32" / "1").mkdir(parents=True, exist_ok=True)
    _slow_zero(qa, repo)


def _in_flight(model: str, count: int) -> LogCheck:
    """test.sh's ``grep -c "Model '<model>' (version 1) has <count> in-flight inferences"``
    of the server log (not 0)."""
    return LogCheck(
        f"in_flight_{count}",
        re.escape(f"Model '{model}' (version 1) has {count} in-flight inferences"),
    )


def _shutdown(test: str, layout: Layout, *checks: LogCheck) -> Scenario:
    """One of test.sh's shutdown cases: the server on models/ with --log-verbose=1, the test
    (which SIGINTs $SERVER_PID while its requests run) under unittest, then the log greps."""
    return Scenario(
        f"{LC}/{test}",
        LC,
        layout,
        [PytestRun(f"lifecycle_test.py::LifeCycleTest::{test}", runner="unittest")],
        log_checks=list(checks),
    )


def scenarios() -> list[Scenario]:
    explicit = ["--model-control-mode=explicit"]
    sleep_10 = ("    def initialize(self, args):", "        import time", "        time.sleep(10)")
    return [
        Scenario(
            f"{LC}/test_concurrent_model_instance_load_speedup",
            LC,
            _auto_completed_identity(*sleep_10),
            [PytestRun("lifecycle_test.py::LifeCycleTest::"
                       "test_concurrent_model_instance_load_speedup", runner="unittest")],
            flags=explicit,
            verbose=False,
        ),
        Scenario(
            f"{LC}/test_concurrent_model_instance_load_sanity",
            LC,
            _sanity_models,
            [PytestRun("lifecycle_test.py::LifeCycleTest::"
                       "test_concurrent_model_instance_load_sanity", runner="unittest")],
            flags=[*explicit, "--log-verbose=2"],
            verbose=False,
            env={"PARALLEL_BACKENDS": "python"},
        ),
        Scenario(  # the first load fails (the model's own doing): the server does not start
            f"{LC}/test_load_retry/no_retry",
            LC,
            _retry_model,
            flags=["--model-control-mode=none"],
            expect_start=False,
            verbose=False,
        ),
        Scenario(
            f"{LC}/test_load_retry/retry",
            LC,
            _retry_model,
            [HttpCall("retry_model_ready", "GET", "/v2/models/retry_model/ready")],
            flags=["--model-control-mode=none", "--model-load-retry-count=1"],
            verbose=False,
            report_ready=True,  # the ready call adds a line only when it fails
        ),
        Scenario(
            f"{LC}/test_concurrent_model_load_speedup",
            LC,
            _load_speedup,
            [PytestRun("lifecycle_test.py::LifeCycleTest::test_concurrent_model_load_speedup",
                       runner="unittest")],
            flags=explicit,
            verbose=False,
        ),
        Scenario(
            f"{LC}/test_concurrent_model_load",
            LC,
            _same_name_loads,
            [PytestRun("lifecycle_test.py::LifeCycleTest::test_concurrent_model_load",
                       runner="unittest")],
            flags=explicit,
            verbose=False,
        ),
        _shutdown("test_shutdown_dynamic", _slow_zero, _in_flight("custom_zero_1_float32", 1)),
        _shutdown(
            "test_shutdown_sequence",
            _sequence_model,
            _in_flight("custom_sequence_int32", 2),
            _in_flight("custom_sequence_int32", 1),
        ),
        _shutdown(
            "test_shutdown_ensemble", _slow_ensemble, _in_flight("ensemble_zero_1_float32", 1)
        ),
    ]  # fmt: skip
