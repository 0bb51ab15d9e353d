"""Scenarios of Triton's qa suites about requests and responses (decoupled streams, BYTES and
zero-sized tensors, timeouts, ensembles) for ``triton_qa.py``.

Their test.sh files serve models of Triton's test-only C++ backends (repeat, square, identity)
and TensorFlow/torch models of its DATADIR; here they are python models with the same configs
(``backend: "python"``) that compute what the tests check, written below, or onnx models made by
Triton's own generators at run time (repokit only: this Triton has no onnxruntime backend).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tools.triton_examples import STAND_INS
from tools.triton_qa_suites import (
    DELAYED_IDENTITY_STAND_IN,
    IDENTITY_STAND_IN,
    Layout,
    PytestRun,
    Scenario,
    ScriptRun,
    Step,
    _identity_models,
    append,
    layouts,
    rename,
    sed,
)

# --- python stand-ins for Triton's C++ test backends ---------------------------------------
REPEAT_STAND_IN = '''
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Triton's repeat test backend: for each element i of IN, after DELAY[i] ms, a response
    with OUT = IN[i] and IDX = i, then the final flag (a flag-only response); execute returns
    after WAIT ms. Each request is answered by its own thread."""

    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            if values.shape != delays.shape:
                raise pb_utils.TritonModelException(
                    f"expected IN and DELAY shape to match, got {list(values.shape)} and"
                    f" {list(delays.shape)}."
                )
            thread = threading.Thread(
                target=self.answer,
                args=(request.get_response_sender(), values, delays),
                daemon=True,
            )
            thread.start()
            self.threads.append(thread)
            time.sleep(float(wait.reshape(-1)[0]) / 1000.0)
        return None

    def answer(self, sender, values, delays):
        for index in range(values.size):
            time.sleep(float(delays[index]) / 1000.0)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                pb_utils.Tensor("OUT", np.array([values[index]], dtype=np.int32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
'''

SQUARE_STAND_IN = '''
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Triton's square test backend: IN[0] responses, each with OUT = IN[0], then the final
    flag."""

    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            thread = threading.Thread(
                target=self.answer, args=(request.get_response_sender(), value), daemon=True
            )
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, sender, value):
        for _ in range(value):
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))]
            ))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
'''

# gen_qa_models.py's libtorch_nobatch_int32_int32_int32 (torch is not installed here), with
# L0_decoupled/test.sh's dims [ 1 ]: OUTPUT__0 = INPUT0 - INPUT1, OUTPUT__1 = INPUT0 + INPUT1
ADD_SUB_TORCH_CONFIG = """name: "libtorch_nobatch_int32_int32_int32"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [
  { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

ADD_SUB_TORCH_STAND_IN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT__0", (a - b).astype(np.int32)),
                pb_utils.Tensor("OUTPUT__1", (a + b).astype(np.int32)),
            ]))
        return responses
"""


def _python_model(folder: Path, source: str) -> None:
    """The folder's config on the python backend, ``source`` as its model.py."""
    config = folder / "config.pbtxt"
    sed(config, r"^(backend|platform):.*", 'backend: "python"')
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(source.lstrip())


def _decoupled_python_models(*, decoupled: bool) -> Layout:
    """The Dockerfile's qa/L0_decoupled/python_models: the suite's models (ensembles and
    identity_int32), repeat_int32 and square_int32 (python models, the configs of
    src/test/models), libtorch_nobatch_int32_int32_int32 with dims [ 1 ]; not decoupled:
    repeat_int32 alone with ``decoupled: False`` (test.sh's non_decoupled_models)."""

    def lay(qa: Path, repo: Path) -> None:
        sources = qa.parent / "src" / "test" / "models"
        shutil.copytree(sources / "repeat_int32", repo / "repeat_int32")
        _python_model(repo / "repeat_int32", REPEAT_STAND_IN)
        if not decoupled:
            sed(repo / "repeat_int32" / "config.pbtxt", "decoupled: True", "decoupled: False")
            return
        shutil.copytree(qa / "L0_decoupled" / "models", repo, dirs_exist_ok=True)
        for name in ("simple_repeat", "fan_repeat", "sequence_repeat", "repeat_square",
                     "nested_square"):  # fmt: skip
            (repo / name / "1").mkdir(parents=True, exist_ok=True)
        shutil.copytree(sources / "square_int32", repo / "square_int32")
        _python_model(repo / "square_int32", SQUARE_STAND_IN)
        _python_model(repo / "identity_int32", IDENTITY_STAND_IN)
        torch = repo / "libtorch_nobatch_int32_int32_int32"
        (torch / "1").mkdir(parents=True)
        (torch / "config.pbtxt").write_text(ADD_SUB_TORCH_CONFIG)
        (torch / "1" / "model.py").write_text(ADD_SUB_TORCH_STAND_IN.lstrip())

    return lay


DECOUPLED_TESTS = (
    "test_one_to_none",
    "test_one_to_one",
    "test_one_to_many",
    "test_no_streaming",
    "test_response_order",
    "test_wrong_shape",
    "test_one_to_multi_many",
)


def decoupled() -> list[Scenario]:
    # test.sh exports TRITONSERVER_DELAY_GRPC_RESPONSE=2000 (after the server started) for the
    # client of test_one_to_multi_many, which asserts that it is set
    runs: list[Step] = [
        PytestRun(
            f"decoupled_test.py::DecoupledTest::{name}",
            runner="unittest",
            timeout=1200,
            env=(
                {"TRITONSERVER_DELAY_GRPC_RESPONSE": "2000"}
                if name == "test_one_to_multi_many"
                else {}
            ),
        )
        for name in DECOUPLED_TESTS
    ]
    return [
        Scenario(
            "L0_decoupled/python",
            "L0_decoupled",
            _decoupled_python_models(decoupled=True),
            runs,
            repo_dir="python_models",
            verbose=False,
        ),
        Scenario(
            "L0_decoupled/non_decoupled",
            "L0_decoupled",
            _decoupled_python_models(decoupled=False),
            [PytestRun("decoupled_test.py::NonDecoupledTest", runner="unittest")],
            repo_dir="non_decoupled_models",
            verbose=False,
        ),
    ]


# --- BYTES tensors ---------------------------------------------------------------------------
def _generated_identities(repo: Path, qa: Path) -> Path:
    generated = repo.parent / "qa_identity_model_repository"
    if not generated.exists():
        _identity_models(qa, generated)
    return generated


def _identity_as(source: str, *names: str) -> Layout:
    """The generated onnx identity model ``source``'s config as python models called ``names``
    (the TensorFlow models of the same inputs and outputs in Triton's DATADIR)."""

    def lay(qa: Path, repo: Path) -> None:
        generated = _generated_identities(repo, qa)
        for name in names:
            folder = repo / name
            folder.mkdir(parents=True)
            shutil.copy(generated / source / "config.pbtxt", folder / "config.pbtxt")
            rename(folder / "config.pbtxt", name)
            _python_model(folder, IDENTITY_STAND_IN)

    return lay


def _string_identity(qa: Path, repo: Path) -> None:
    folder = repo / "string_identity"
    (folder / "1").mkdir(parents=True)
    source = qa / "python_models" / "string_identity"
    shutil.copy(source / "model.py", folder / "1" / "model.py")
    shutil.copy(source / "config.pbtxt", folder / "config.pbtxt")
    sed(folder / "config.pbtxt", r"\[ 1 \]", "[ 8 ]")


def bytes_tensors() -> list[Scenario]:
    nullchar_models = ("graphdef_nobatch_zero_1_object", "savedmodel_nobatch_zero_1_object")
    nullchar_runs: list[Step] = []
    for name in nullchar_models:
        nullchar_runs.append(
            ScriptRun(f"{name}[http]", ("nullchar_string_client.py", "-m", name, "-v"))
        )
        nullchar_runs.append(ScriptRun(
            f"{name}[grpc]",
            ("nullchar_string_client.py", "-m", name, "-i", "grpc", "-u", "localhost:8001", "-v"),
        ))  # fmt: skip
    return [
        Scenario(
            "L0_string_io",
            "L0_string_io",
            layouts(
                _identity_as("onnx_nobatch_zero_1_object", "graphdef_nobatch_zero_1_object"),
                _string_identity,
            ),
            [PytestRun("string_client_test.py", runner="unittest")],
            verbose=False,
        ),
        Scenario(
            "L0_nullchar_string",
            "L0_nullchar_string",
            _identity_as("onnx_nobatch_zero_1_object", *nullchar_models),
            nullchar_runs,
            verbose=False,
        ),
    ]


# --- zero-sized tensors -----------------------------------------------------------------------
def _ensemble_identities(qa: Path, into: Path) -> None:
    """gen_qa_identity_models.py --ensemble (qa_ensemble_model_repository's identity part)."""
    subprocess.run(
        [sys.executable, "gen_qa_identity_models.py", "--ensemble", "--models_dir", str(into)],
        cwd=qa / "common",
        check=True,
        capture_output=True,
    )


def _infer_zero_models(*, stand_in: bool) -> Layout:
    """test.sh's repository: the identity models and the identity ensembles (their nop_ models
    are Triton's identity backend: python stand-ins); ``stand_in``: the onnx models as python
    models with their configs too (the same names, so the test's BACKENDS=onnx finds them)."""

    def lay(qa: Path, repo: Path) -> None:
        generated = _generated_identities(repo, qa)
        for folder in generated.iterdir():
            shutil.copytree(folder, repo / folder.name)
            if stand_in:
                for version in (repo / folder.name).iterdir():
                    if version.is_dir():
                        shutil.rmtree(version)
                _python_model(repo / folder.name, IDENTITY_STAND_IN)
        ensembles = repo.parent / "qa_ensemble_identity_repository"
        if not ensembles.exists():
            _ensemble_identities(qa, ensembles)
        for folder in ensembles.iterdir():
            shutil.copytree(folder, repo / folder.name)
            if folder.name.startswith("nop_"):
                _python_model(repo / folder.name, IDENTITY_STAND_IN)

    return lay


def infer_zero() -> list[Scenario]:
    return [
        Scenario(
            f"L0_infer_zero[{kind}]",
            "L0_infer_zero",
            _infer_zero_models(stand_in=kind == "python"),
            [PytestRun("infer_zero_test.py", runner="unittest", env={"BACKENDS": "onnx"})],
            verbose=False,
        )
        for kind in ("python", "onnx")
    ]


# --- timeouts and ensembles --------------------------------------------------------------------
def _delayed_identity(qa: Path, repo: Path) -> None:
    """The suite's models/custom_identity_int32 (kept: keep_existing) as a python model."""
    _python_model(repo / "custom_identity_int32", DELAYED_IDENTITY_STAND_IN)


def client_timeout() -> list[Scenario]:
    tests = ("test_grpc_infer", "test_grpc_async_infer", "test_grpc_stream_infer",
             "test_http_infer", "test_http_async_infer")  # fmt: skip
    return [
        Scenario(
            "L0_client_timeout/python",
            "L0_client_timeout",
            _delayed_identity,
            [
                PytestRun(
                    f"client_infer_timeout_test.py::ClientInferTimeoutTest::{t}", runner="unittest"
                )
                for t in tests
            ],
            flags=["--log-verbose=2"],
            verbose=False,
            keep_existing=True,
        )
    ]


def _simple_ensemble(qa: Path, repo: Path) -> None:
    """The suite's models (kept: keep_existing); ``simple`` (its own config, all versions) a
    python model in versions 1 and 2, as the Dockerfile copies model.graphdef into both."""
    (repo / "ensemble_add_sub_int32_int32_int32" / "1").mkdir(parents=True, exist_ok=True)
    source = STAND_INS["simple"].source
    assert source is not None
    _python_model(repo / "simple", source)
    shutil.copytree(repo / "simple" / "1", repo / "simple" / "2", dirs_exist_ok=True)


def simple_ensemble() -> list[Scenario]:
    """One server per test, as test.sh (the tests count the inferences of each version)."""
    return [
        Scenario(
            f"L0_simple_ensemble/{name}",
            "L0_simple_ensemble",
            _simple_ensemble,
            [PytestRun(f"ensemble_test.py::EnsembleTest::{name}", runner="unittest")],
            verbose=False,
            keep_existing=True,
        )
        for name in ("test_ensemble_add_sub", "test_ensemble_sequence_flags",
                     "test_ensemble_add_sub_one_output")
    ]  # fmt: skip


# --- scalars, reshapes, batch inputs (onnx models from Triton's generators) --------------------
def _generate(qa: Path, script: str, into: Path, *flags: str) -> None:
    """``python qa/common/SCRIPT FLAGS --models_dir INTO`` (once per run)."""
    if into.exists():
        return
    subprocess.run(
        [sys.executable, script, *flags, "--models_dir", str(into)],
        cwd=qa / "common",
        check=True,
        capture_output=True,
    )


def _scalar_models(*, stand_in: bool, dims_2: bool = False) -> Layout:
    """test.sh's qa_scalar_models (gen_qa_ort_scalar_models.py); ``stand_in``: their configs
    on python identity models; ``dims_2``: onnx_scalar_1dim's dims set to [2] (test.sh's
    second server, which must refuse the model)."""

    def lay(qa: Path, repo: Path) -> None:
        generated = repo.parent / "qa_scalar_models"
        _generate(qa, "gen_qa_ort_scalar_models.py", generated)
        shutil.copytree(generated, repo, dirs_exist_ok=True)
        if dims_2:
            sed(repo / "onnx_scalar_1dim" / "config.pbtxt", r"dims.*", "dims:[2]")
        if stand_in:
            for folder in repo.iterdir():
                shutil.rmtree(folder / "1")
                append(folder / "config.pbtxt", 'backend: "python"')
                _python_model(folder, IDENTITY_STAND_IN)

    return lay


def scalar_io() -> list[Scenario]:
    run = PytestRun("scalar_test.py", runner="unittest")
    return [
        Scenario("L0_scalar_io[onnx]", "L0_scalar_io", _scalar_models(stand_in=False), [run],
                 verbose=False),
        Scenario("L0_scalar_io[python]", "L0_scalar_io", _scalar_models(stand_in=True), [run],
                 verbose=False),
        Scenario("L0_scalar_io/dims_2", "L0_scalar_io",
                 _scalar_models(stand_in=False, dims_2=True), expect_start=False),
    ]  # fmt: skip


def _reshape_models(*, stand_in: bool) -> Layout:
    """test.sh's repository: gen_qa_reshape_models.py --onnx --variable and --ensemble (its
    nop_ models: python identities), custom_* copies of the identity models on Triton's
    identity backend and graphdef_/savedmodel_/libtorch_ copies (the TensorFlow and torch
    models of the same reshapes) as python identities; ``stand_in``: the onnx models as python
    models too. The plan_ models (TensorRT, other reshapes) are left out."""

    def lay(qa: Path, repo: Path) -> None:
        generated = repo.parent / "qa_reshape_model_repository"
        _generate(qa, "gen_qa_reshape_models.py", generated, "--onnx", "--variable")
        ensembles = repo.parent / "qa_ensemble_reshape_repository"
        _generate(qa, "gen_qa_reshape_models.py", ensembles, "--ensemble")
        for folder in generated.iterdir():
            shutil.copytree(folder, repo / folder.name)
        for folder in ensembles.iterdir():
            shutil.copytree(folder, repo / folder.name)
            if folder.name.startswith("nop_"):
                _python_model(repo / folder.name, IDENTITY_STAND_IN)
        onnx = sorted(f.name for f in generated.iterdir())
        copies = ["custom", "graphdef", "savedmodel", "libtorch"]
        for name in onnx:
            if stand_in:
                for version in (repo / name).iterdir():
                    if version.is_dir():
                        shutil.rmtree(version)
                _python_model(repo / name, IDENTITY_STAND_IN)
            for prefix in copies:
                target = repo / name.replace("onnx_", f"{prefix}_", 1)
                if target.exists():
                    continue
                (target).mkdir()
                shutil.copy(repo / name / "config.pbtxt", target / "config.pbtxt")
                rename(target / "config.pbtxt", target.name)
                _python_model(target, IDENTITY_STAND_IN)

    return lay


def infer_reshape() -> list[Scenario]:
    return [
        Scenario(
            f"L0_infer_reshape[{kind}]",
            "L0_infer_reshape",
            _reshape_models(stand_in=kind == "python"),
            [PytestRun("infer_reshape_test.py", runner="unittest")],
            verbose=False,
        )
        for kind in ("python", "onnx")
    ]


def _batch_input_models(qa: Path, repo: Path) -> None:
    """test.sh's repository for BACKEND=onnx: gen_qa_ragged_models.py --onnx's models under
    its names and edits, and the onnx nobatch identity model as ragged_io."""
    ragged = repo.parent / "qa_ragged_model_repository"
    _generate(qa, "gen_qa_ragged_models.py", ragged, "--onnx")
    source = ragged / "onnx_batch_input"

    def copy(src: Path, name: str, *edits: tuple[str, str]) -> Path:
        target = repo / name
        shutil.copytree(src, target)
        config = target / "config.pbtxt"
        sed(config, src.name, name)
        for pattern, replacement in edits:
            sed(config, pattern, replacement)
        return config

    copy(source, "ragged_element_count_acc_zero")
    copy(
        source,
        "ragged_acc_shape",
        ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT"),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"),
    )
    config = copy(
        source,
        "batch_item_flatten",
        ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT"),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_ITEM_SHAPE_FLATTEN"),
    )
    text = config.read_text()
    config.write_text(text.replace("-1", "-1, -1", 1))  # sed "0,/-1/{s/-1/-1, -1/}"
    copy(ragged / "onnx_batch_item", "batch_item")
    identities = _generated_identities(repo, qa)
    config = copy(
        identities / "onnx_nobatch_zero_1_float32",
        "ragged_io",
        ("__0", "0"),
        (r"^max_batch_size:.*", "max_batch_size: 4"),
        ('name: "INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true'),
    )
    append(
        config,
        'batch_output [{target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE'
        ' source_input: "INPUT0" }] dynamic_batching { max_queue_delay_microseconds: 1000000 }',
    )


def batch_input() -> list[Scenario]:
    return [
        Scenario(
            "L0_batch_input[onnx]",
            "L0_batch_input",
            _batch_input_models,
            [PytestRun("batch_input_test.py", runner="unittest")],
            flags=["--exit-timeout-secs=120"],
            verbose=False,
        )
    ]


def scenarios() -> list[Scenario]:
    return [
        *decoupled(),
        *bytes_tensors(),
        *infer_zero(),
        *client_timeout(),
        *simple_ensemble(),
        *scalar_io(),
        *infer_reshape(),
        *batch_input(),
    ]
