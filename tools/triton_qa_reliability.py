"""Triton's qa suites about a server under stress and errors (gRPC state cleanup on
cancellation, timeouts and shutdown; random concurrent sequences; shape, output-name and
passive-instance checks; the exact-result inference suite) as ``triton_qa.py`` scenarios.

Their test.sh files serve models of Triton's DATADIR (TensorFlow, TensorRT, torch and onnx
models made by its qa generators) and of its C++ test backends (identity, repeat, sequence,
distributed_addsub). Here the onnx models are made by Triton's own generators at run time
(``qa/common/gen_qa_*.py --onnx``; repokit only: this Triton has no onnxruntime backend) and
every other model is a python model with the same config that computes what the test checks.
Nothing here is Triton's text: test files and configs are read from a git dir at run time.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tools.triton_qa_requests import REPEAT_STAND_IN, _generate, _python_model
from tools.triton_qa_suites import (
    DELAYED_IDENTITY_STAND_IN,
    IDENTITY_STAND_IN,
    Layout,
    LogCheck,
    PytestRun,
    Scenario,
    ScriptRun,
    append,
    sed,
)

# (its qa paths are listed in triton_qa_suites.QA_PATHS)

NOT_APPLICABLE: dict[str, str] = {
    "L0_grpc_state_cleanup StateNew/StateRelease counts": "test.sh counts the log lines of"
    " Triton's gRPC handler state objects (created vs released, at --log-verbose=2); repokit"
    " has no such objects: the tests themselves run on both",
    "L0_grpc_state_cleanup TRITONSERVER_DELAY_GRPC_COMPLETE": "a hook of Triton's test builds"
    " (a delay in its gRPC completion thread); test_decoupled_infer_complete runs without it",
    "L0_sequence_stress iterations": "sequence_stress.py runs 200 passes of 8 threads per"
    " repository (about 25,000 requests each); here 25 passes with the fixed seed 7 (-r 7"
    " -i 25), on the python stand-in of Triton's sequence test backend",
    "L0_infer_variable": "every test runs the TensorFlow, TensorRT and torch models of"
    " qa_variable_model_repository and their simple_/sequence_/fan_ ensembles besides the"
    " onnx ones (several hundred models): python stand-ins for all of them are more python"
    " processes than this machine runs; qa_variable_model_repository's onnx models run in"
    " L0_batcher's VARIABLE scenarios",
    "L0_infer graphdef, savedmodel, libtorch, plan, python_dlpack, openvino": (
        "TensorFlow, torch, TensorRT and OpenVINO models, dlpack models need torch."
        " BACKENDS=python runs with ENSEMBLES=0 (the test makes no python ensembles),"
        " BACKENDS=onnx with ENSEMBLES=0 and 1 (repokit only), on the CPU only (TARGET=cpu)"
    ),
    "L0_infer shared memory, valgrind": "L0_infer_shm/L0_infer_cudashm/L0_infer_valgrind"
    " copies of the suite (CUDA shared memory, valgrind)",
    "L0_passive_instance perf_analyzer": "perf_analyzer is not installed: a client of four"
    " threads sends the load instead; the passive instance is KIND_CPU (no GPU here)",
    "L0_long_running_stress": "runs for 25,000 s by default (TRITON_PERF_LONG: 480,000 s) with"
    " perf_analyzer, a TensorFlow resnet50 and TensorFlow/torch sequence models; stress.py has"
    " no bounded mode shorter than its scenarios' own minutes-long runs",
}


def _generated(qa: Path, repo: Path, script: str, kind: str, *flags: str) -> Path:
    """``python qa/common/SCRIPT FLAGS`` into ``generated/KIND`` beside the repository (made
    once; the repository may have KIND's name, as test.sh copies DATADIR's folder)."""
    into = repo.parent / "generated" / kind
    _generate(qa, script, into, *flags)
    return into


# --- L0_grpc_state_cleanup -------------------------------------------------------------------
GSC = "L0_grpc_state_cleanup"
GSC_TESTS = (
    "test_simple_infer",
    "test_simple_infer_cancellation",
    "test_simple_infer_timeout",
    "test_streaming_infer",
    "test_streaming_timeout",
    "test_streaming_cancellation",
    "test_decoupled_infer",
    "test_decoupled_cancellation",
    "test_decoupled_timeout",
    "test_non_decoupled_streaming_multi_response",
)
GSC_ERROR_TESTS = (
    "test_simple_infer_error_status",
    "test_streaming_error_status",
    "test_decoupled_error_status",
)
GSC_SHUTDOWN_TESTS = (
    "test_simple_infer_shutdownserver",
    "test_streaming_infer_shutdownserver",
    "test_decoupled_infer_shutdownserver",
    "test_decoupled_infer_with_params_shutdownserver",
)


# Triton's repeat backend in a model that is not decoupled sends its responses all the same;
# the frontend answers the first. A python model may send only one: the first, final, then
# the others, which the python backend refuses (the refusals are logged).
NON_DECOUPLED_REPEAT_STAND_IN = REPEAT_STAND_IN.replace(
    """        for index in range(values.size):
            time.sleep(float(delays[index]) / 1000.0)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                pb_utils.Tensor("OUT", np.array([values[index]], dtype=np.int32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
""",
    """        for index in range(values.size):
            time.sleep(float(delays[index]) / 1000.0)
            try:
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                    pb_utils.Tensor("OUT", np.array([values[index]], dtype=np.int32)),
                ]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except pb_utils.TritonModelException as error:
                pb_utils.Logger.log_info(f"response {index} refused: {error}")
""",
)


def _state_cleanup_models(qa: Path, repo: Path) -> None:
    """test.sh's models: custom_zero_1_float32 with a 1 s execute_delay_ms (Triton's identity
    backend), repeat_int32 (the Dockerfile's copy of src/test/models/repeat_int32, Triton's
    repeat backend) and repeat_int32_non_decoupled (its model_transaction_policy block cut)."""
    identity = repo / "custom_zero_1_float32"
    shutil.copytree(qa / "custom_models" / "custom_zero_1_float32", identity)
    append(
        identity / "config.pbtxt",
        "parameters [",
        '{ key: "execute_delay_ms"; value: { string_value: "1000" }}',
        "]",
    )
    _python_model(identity, DELAYED_IDENTITY_STAND_IN)
    repeat = repo / "repeat_int32"
    shutil.copytree(qa.parent / "src" / "test" / "models" / "repeat_int32", repeat)
    _python_model(repeat, REPEAT_STAND_IN)
    other = repo / "repeat_int32_non_decoupled"
    shutil.copytree(repeat, other)
    (other / "1" / "model.py").write_text(NON_DECOUPLED_REPEAT_STAND_IN.lstrip())
    lines = (other / "config.pbtxt").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "model_transaction_policy" in line)
    del lines[cut : cut + 3]  # sed "/model_transaction_policy/,+2d"
    (other / "config.pbtxt").write_text("".join(lines))
    sed(other / "config.pbtxt", "repeat_int32", "repeat_int32_non_decoupled")


def grpc_state_cleanup() -> list[Scenario]:
    """One server per test, as test.sh (``--log-verbose=2``; the error-status tests with a
    restricted inference protocol; the shutdown tests send the server SIGINT themselves)."""
    runs: list[tuple[str, list[str]]] = [(t, []) for t in GSC_TESTS]
    runs += [
        (t, ["--grpc-restricted-protocol=inference:infer-key=infer-value"]) for t in GSC_ERROR_TESTS
    ]
    runs += [(t, []) for t in GSC_SHUTDOWN_TESTS]
    runs.append(("test_decoupled_infer_complete", []))
    return [
        Scenario(
            f"{GSC}/{test}",
            GSC,
            _state_cleanup_models,
            [_cleanup_run(test)],
            flags=["--log-verbose=2", *flags],
            verbose=False,
        )
        for test, flags in runs
    ]


def _cleanup_run(test: str) -> PytestRun | ScriptRun:
    """The shutdown tests run as test.sh runs them (``python cleanup_test.py CleanUpTest.X``):
    only its ``__main__`` block reads $SERVER_PID, the server they stop."""
    if test in GSC_SHUTDOWN_TESTS:
        return ScriptRun(test, ("cleanup_test.py", f"CleanUpTest.{test}"))
    return PytestRun(f"cleanup_test.py::CleanUpTest::{test}", runner="unittest", timeout=300)


# --- L0_sequence_stress ----------------------------------------------------------------------
# Triton's test-only ``sequence`` backend as a python model: one accumulator per batch slot
# (a request's position in the batch: the sequence batcher fills empty slots with READY=0
# requests); START resets the slot's accumulator, READY=0 leaves it and answers 0; OUTPUT is
# the accumulator, after execute_delay_ms.
SLOT_SEQUENCE_STAND_IN = """import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        delay = config.get("parameters", {}).get("execute_delay_ms", {})
        self.delay_s = int(delay.get("string_value", "0")) / 1000
        self.totals = {}

    def execute(self, requests):
        time.sleep(self.delay_s)
        responses = []
        for slot, request in enumerate(requests):
            given = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            if ready.flatten()[0] == 0:
                output = np.zeros_like(given)
            else:
                if start.flatten()[0] != 0 or slot not in self.totals:
                    self.totals[slot] = np.zeros_like(given)
                self.totals[slot] = self.totals[slot] + given
                output = self.totals[slot]
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output.astype(given.dtype))])
            )
        return responses
"""

STRESS_TRIALS = {"models1": (4, 1), "models2": (2, 2), "models4": (1, 4)}


def _stress_models(batch: int, count: int) -> Layout:
    """test.sh's models{1,2,4}: custom_sequence_int32 idle after 1 s, ``batch`` and ``count``
    instances (on the CPU, as its config has it)."""

    def lay(qa: Path, repo: Path) -> None:
        folder = repo / "custom_sequence_int32"
        shutil.copytree(qa / "custom_models" / "custom_sequence_int32", folder)
        config = folder / "config.pbtxt"
        sed(config, r"max_sequence_idle_microseconds:.*", "max_sequence_idle_microseconds: 1000000")
        sed(config, r"^max_batch_size:.*", f"max_batch_size: {batch}")
        sed(config, r"kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}")
        sed(config, r'^backend: "sequence"', 'backend: "python"')
        sed(config, r"^default_model_filename:.*", "")
        (folder / "1").mkdir(exist_ok=True)
        (folder / "1" / "model.py").write_text(SLOT_SEQUENCE_STAND_IN)

    return lay


def sequence_stress() -> list[Scenario]:
    return [
        Scenario(
            f"L0_sequence_stress/{repo_dir}",
            "L0_sequence_stress",
            _stress_models(batch, count),
            [ScriptRun("sequence_stress", ("sequence_stress.py", "-r", "7", "-i", "25"))],
            repo_dir=repo_dir,
            verbose=False,
        )
        for repo_dir, (batch, count) in STRESS_TRIALS.items()
    ]


# --- L0_client_nobatch, L0_output_name ---------------------------------------------------------
def _as_python(folder: Path, source: str) -> None:
    """A generated onnx model folder turned into a python model of the same config."""
    for version in folder.iterdir():
        if version.is_dir():
            shutil.rmtree(version)
    _python_model(folder, source)


def _copy_as(source: Path, target: Path, old: str, new: str) -> None:
    shutil.copytree(source, target)
    sed(target / "config.pbtxt", old, new)


def _nobatch_models(*, stand_in: bool) -> Layout:
    """test.sh's qa_model_repository, of which the test uses graphdef_int32_int8_int8 and
    graphdef_nobatch_int32_int8_int8: gen_qa_models.py --onnx's onnx_ models under those
    names (repokit only), or ``stand_in``: python add_sub models with their configs."""

    def lay(qa: Path, repo: Path) -> None:
        generated = _generated(qa, repo, "gen_qa_models.py", "qa_model_repository", "--onnx")
        for name in ("onnx_int32_int8_int8", "onnx_nobatch_int32_int8_int8"):
            target = repo / name.replace("onnx", "graphdef")
            _copy_as(generated / name, target, name, target.name)
            if stand_in:
                _as_python(target, (qa / "python_models" / "add_sub" / "model.py").read_text())

    return lay


def client_nobatch() -> list[Scenario]:
    return [
        Scenario(
            f"L0_client_nobatch[{kind}]",
            "L0_client_nobatch",
            _nobatch_models(stand_in=kind == "python"),
            [PytestRun("client_test.py", runner="unittest")],
            repo_dir="qa_model_repository",
            verbose=False,
        )
        for kind in ("python", "onnx")
    ]


OUTPUT_NAME_TRIALS = ("graphdef", "libtorch", "onnx", "plan", "savedmodel")


def _output_name_models(*, stand_in: bool) -> Layout:
    """qa_identity_model_repository's *_nobatch_zero_1_float32: the onnx one (real on repokit,
    or ``stand_in``) and python identity models with its config for the other frameworks."""

    def lay(qa: Path, repo: Path) -> None:
        generated = _generated(
            qa, repo, "gen_qa_identity_models.py", "qa_identity_model_repository", "--onnx"
        )
        source = generated / "onnx_nobatch_zero_1_float32"
        for trial in OUTPUT_NAME_TRIALS:
            target = repo / f"{trial}_nobatch_zero_1_float32"
            _copy_as(source, target, "onnx_", f"{trial}_")
            if stand_in or trial != "onnx":
                _as_python(target, IDENTITY_STAND_IN)

    return lay


def output_name() -> list[Scenario]:
    return [
        Scenario(
            f"L0_output_name[{kind}]",
            "L0_output_name",
            _output_name_models(stand_in=kind == "python"),
            [PytestRun("output_name_test.py::OutputNameValidationTest", runner="unittest")],
            verbose=False,
        )
        for kind in ("python", "onnx")
    ]


# --- L0_passive_instance -------------------------------------------------------------------
PASSIVE = "distributed_int32_int32_int32"

# Triton's distributed_addsub test backend as a python model: OUTPUT0 = INPUT0 + INPUT1,
# OUTPUT1 = INPUT0 - INPUT1; each execution logs the instance that ran it.
ADD_SUB_LOGGING_STAND_IN = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]

    def execute(self, requests):
        pb_utils.Logger.log_info(f"stand-in {self.instance} executing")
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.int32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.int32)),
            ]))
        return responses
"""

# perf_analyzer -m MODEL --concurrency-range 4, as a client of four threads
PASSIVE_LOAD = f"""
import threading

import numpy as np
import tritonclient.http as httpclient


def load():
    client = httpclient.InferenceServerClient("localhost:8000")
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(50):
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        for given in inputs:
            given.set_data_from_numpy(data)
        result = client.infer("{PASSIVE}", inputs)
        assert (result.as_numpy("OUTPUT0") == data * 2).all()


threads = [threading.Thread(target=load) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def _passive_models(qa: Path, repo: Path) -> None:
    """The suite's models/distributed_int32_int32_int32 (kept) as a python model; its passive
    KIND_GPU instance group on the CPU."""
    folder = repo / PASSIVE
    sed(folder / "config.pbtxt", r"kind: KIND_GPU", "kind: KIND_CPU")
    _python_model(folder, ADD_SUB_LOGGING_STAND_IN)


def passive_instance() -> list[Scenario]:
    return [
        Scenario(
            "L0_passive_instance",
            "L0_passive_instance",
            _passive_models,
            [
                PytestRun("passive_instance_test.py", runner="unittest"),
                ScriptRun("concurrency_4", ("-c", PASSIVE_LOAD)),
            ],
            flags=["--exit-timeout-secs=120"],
            keep_existing=True,
            verbose=False,
            log_checks=[
                LogCheck("active_instance_executes", rf"stand-in {PASSIVE}_0\S* executing"),
                LogCheck(
                    "no_request_to_passive_instance",
                    rf"stand-in {PASSIVE}_1\S* executing",
                    exactly=0,
                ),
            ],
        )
    ]


# --- L0_infer -------------------------------------------------------------------------------
SWAP_TYPES = ("float32", "int32", "int16", "int8")


def _infer_python_models(qa: Path, repo: Path) -> None:
    """test.sh's generate_model_repository for BACKENDS=python: every onnx model of
    qa_model_repository as python_*, its config without platform and version_policy
    (``backend: "python"`` instead), the sub_add model for the float32/int32/int16/int8
    triples and add_sub for the others, one CPU instance group."""
    generated = _generated(qa, repo, "gen_qa_models.py", "qa_model_repository", "--onnx")
    for source in sorted(generated.iterdir()):
        if not source.name.startswith("onnx_"):
            continue
        name = source.name.replace("onnx", "python")
        target = repo / name
        (target / "1").mkdir(parents=True)
        text = re.sub(r"platform:.*", "", (source / "config.pbtxt").read_text())
        text = re.sub(r"version_policy.*", 'backend: "python"', text).replace("onnx", "python")
        (target / "config.pbtxt").write_text(text)
        shutil.copy(source / "output0_labels.txt", target)
        swapped = any(
            name in (f"python_{t}_{t}_{t}", f"python_nobatch_{t}_{t}_{t}") for t in SWAP_TYPES
        )
        model_py = qa / "python_models" / ("sub_add" if swapped else "add_sub") / "model.py"
        shutil.copy(model_py, target / "1" / "model.py")
        append(target / "config.pbtxt", "instance_group [ { kind: KIND_CPU }]")


def _infer_onnx_models(qa: Path, repo: Path) -> None:
    """test.sh's generate_model_repository for BACKENDS=onnx, TARGET=cpu: qa_model_repository's
    onnx models with a KIND_CPU instance group each."""
    generated = _generated(qa, repo, "gen_qa_models.py", "qa_model_repository", "--onnx")
    for source in sorted(generated.iterdir()):
        if source.name.startswith("onnx"):
            shutil.copytree(source, repo / source.name)
            append(repo / source.name / "config.pbtxt", "instance_group [ { kind: KIND_CPU }]")


def _infer_onnx_ensembles(qa: Path, repo: Path) -> None:
    """test.sh's repository for BACKENDS=onnx ENSEMBLES=1: the onnx models, the onnx ensembles
    of qa_ensemble_model_repository (gen_qa_models.py --ensemble: simple_, sequence_ and fan_
    onnx_*) and its nop_ models (Triton's identity backend: python identities)."""
    _infer_onnx_models(qa, repo)
    generated = _generated(
        qa, repo, "gen_qa_models.py", "qa_ensemble_model_repository", "--ensemble"
    )
    for source in sorted(generated.iterdir()):
        if "onnx" in source.name or source.name.startswith("nop_"):
            shutil.copytree(source, repo / source.name)
            (repo / source.name / "1").mkdir(exist_ok=True)  # create_nop_version_dir
        if source.name.startswith("nop_"):
            _python_model(repo / source.name, IDENTITY_STAND_IN)


def infer() -> list[Scenario]:
    flags = ["--exit-timeout-secs=600"]
    python_flags = [
        "--backend-config=python,stub-timeout-seconds=120",
        f"--backend-config=python,shm-default-byte-size={1024 * 1024}",
    ]
    return [
        Scenario(
            "L0_infer[python]",
            "L0_infer",
            _infer_python_models,
            [PytestRun("infer_test.py", runner="unittest", timeout=1800,
                       env={"BACKENDS": "python", "ENSEMBLES": "0"})],
            flags=[*flags, *python_flags],
            verbose=False,
            start_timeout=600,
        ),
        Scenario(
            "L0_infer[onnx]",
            "L0_infer",
            _infer_onnx_models,
            [PytestRun("infer_test.py", runner="unittest", timeout=1800,
                       env={"BACKENDS": "onnx", "ENSEMBLES": "0"})],
            flags=flags,
            verbose=False,
            start_timeout=600,
        ),
        Scenario(
            "L0_infer[onnx,ensembles]",
            "L0_infer",
            _infer_onnx_ensembles,
            [PytestRun("infer_test.py", runner="unittest", timeout=3600,
                       env={"BACKENDS": "onnx", "ENSEMBLES": "1"})],
            flags=flags,
            verbose=False,
            start_timeout=600,
        ),
    ]  # fmt: skip


def scenarios() -> list[Scenario]:
    return [
        *grpc_state_cleanup(),
        *sequence_stress(),
        *client_nobatch(),
        *output_name(),
        *passive_instance(),
        *infer(),
    ]
