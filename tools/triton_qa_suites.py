"""What each of Triton's qa ``test.sh`` files does, as data for ``triton_qa.py``.

Every scenario is one server run of a ``test.sh``: the model repository it lays out (which
``qa/python_models`` go where, and its ``sed``/``echo`` edits of the configs), the server flags
it passes, and what it then checks (pytest runs of its unittest files, with the environment
they read; log greps; a server that must refuse to start). The test files themselves are run
unmodified. Flags a server does not have (``--backend-directory``, the python backend's
``--backend-config``) are left out for repokit. Nothing here is Triton's text: it is read from
a git dir at run time.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.triton_examples import (
    GRPC_REPOSITORY,
    HTTP_REPOSITORY,
    STAND_INS,
    StandIn,
    build_repository,
    stand_in_config,
)

QA_PATHS = (
    "qa/L0_backend_python",
    "qa/python_models",
    "qa/L0_model_config",
    "qa/common",
    "qa/L0_http",
    "qa/L0_grpc",
    "docs/examples/model_repository",  # the configs of L0_http's and L0_grpc's models
    "qa/L0_input_validation",
    "qa/L0_parameters",
    "qa/L0_optional_input",
    "qa/L0_warmup",
    "qa/L0_large_payload",
    "qa/L0_shared_memory",
    "qa/L0_batcher",
    "qa/custom_models/custom_zero_1_float32",
    "qa/L0_sequence_batcher",
    "qa/L0_lifecycle",
    # tools/triton_qa_operability.py
    "qa/L0_response_cache/test.sh",  # that folder also names a binary the git dir lacks
    "qa/L0_response_cache/ensemble_cache_test.py",
    "qa/L0_response_cache/models",
    "qa/L0_metrics",
    "qa/L0_logging",
    "qa/L0_model_update",
    "qa/L0_model_namespacing",
    # tools/triton_qa_requests.py
    "qa/L0_decoupled",
    "src/test/models/repeat_int32",
    "src/test/models/square_int32",
    "qa/L0_string_io",
    "qa/L0_nullchar_string",
    "qa/L0_infer_zero",
    "qa/L0_client_timeout",
    "qa/L0_simple_ensemble",
    "qa/L0_scalar_io",
    "qa/L0_infer_reshape",
    "qa/L0_batch_input",
    # tools/triton_qa_scheduling.py
    "qa/L0_model_queue",
    "qa/L0_request_cancellation",
    "qa/L0_rate_limiter",
    "qa/custom_models/custom_sequence_int32",
    "qa/custom_models/custom_dyna_sequence_int32",
    "qa/L0_dyna_sequence_batcher",
    "qa/L0_sequence_corrid_batcher",
    "qa/L0_implicit_state/implicit_state.py",
    # tools/triton_qa_options.py
    "qa/L0_data_compression",
    "qa/L0_backend_config",
    "qa/L0_custom_model_config",
    "qa/L0_config_json",
    "qa/L0_secure_grpc",
    "qa/L0_trace",
    # tools/triton_qa_reliability.py
    "qa/L0_grpc_state_cleanup",
    "qa/L0_sequence_stress",
    "qa/L0_client_nobatch",
    "qa/L0_output_name",
    "qa/L0_passive_instance",
    "qa/L0_infer/infer_test.py",
)

Layout = Callable[[Path, Path], None]  # (qa root, model repository) -> None

# Subfolders (or parts) of qa/L0_backend_python this tool does not run, and why.
NOT_APPLICABLE: dict[str, str] = {
    "env": "conda-packed execution environments (EXECUTION_ENV_PATH, conda-pack of Python 3.7+)",
    "variants": "builds the python backend from source with cmake (a Triton build-time test)",
    "examples": "needs a clone of the python_backend repository and torch/jax",
    "python_based_backends": "installs a python-based backend into Triton's --backend-directory"
    " and needs torch",
    "test.sh add_sub_gpu": "GPU tensors (KIND_GPU instance)",
    "test.sh shm-default-byte-size": "checks Triton's shared-memory region sizes in /dev/shm",
    "test.sh orphan stubs": "kills the server with SIGKILL and checks the stubs exit (timing)",
    "bls CUDA pool loop": "--cuda-memory-pool-byte-size and 'Failed to allocate memory from CUDA"
    " memory pool' (GPU); run once per BLS_KIND without it",
    "bls_model_loading": "needs qa_model_repository/onnx_int32_int32_int32 from Triton's DATADIR",
    "io empty/variable gpu output": "GPU tensors (dlpack on CUDA)",
    "L0_model_config (non-python)": "tensorrt/onnx/pytorch/tensorflow autofill needs those"
    " backends",
    "restart": "reads the free space of Triton's stub shared-memory pool"
    " (c_python_backend_utils.shared_memory), an internal of Triton's stub IPC",
    "L0_http/http_test[onnx] on Triton": "this Triton (from its python package) has no"
    " onnxruntime backend: the onnx models are run by repokit only; L0_http/http_test runs the"
    " same configs on python stand-ins on both",
    "L0_input_validation InputShapeTest": "its models are torch, TensorFlow and TensorRT models"
    " (pt_identity, graphdef_object_int32_int32, plan_*), and input_byte_size_test is a C++"
    " program built with Triton",
    "L0_nan_inf": "its test uses numpy's np.NINF, which numpy 2 (tritonclient's here) removed",
    "L0_optional_input test_ensemble_optional_pipeline": "expects Triton's test-only identity"
    " backend to answer zeros for an optional input left out; the python stand-in answers"
    " nothing for it (fails on both)",
    "L0_batcher preserve_ordering": "Triton's test-only identity backend with its"
    " instance-wise delays (instance_wise_delay_multiplier), checked through trace files",
    "L0_batcher plan, libtorch, graphdef, savedmodel": "TensorRT, torch and TensorFlow models;"
    " the onnx scenarios run on repokit only (this Triton has no onnxruntime backend)",
    "L0_sequence_batcher custom, ensembles, implicit state": "the custom_sequence_int32 models"
    " (ragged, request timeout) are Triton's test-only sequence backend and the ensembles'"
    " nop models its identity backend; the python scenarios run with ENSEMBLES=0 and"
    " IMPLICIT_STATE=0 (test.sh's defaults are 1 and 0)",
    "L0_priority": "TensorRT plan models; it greps the CUDA stream priority each gets",
    "L0_iterative_sequence": "its test loads models whose config names Triton's C++ test"
    " backend 'iterative_sequence' (through the load API), which neither server has; the"
    " python iterative_sequence model runs in L0_backend_python/request_rescheduling",
    "L0_request_cancellation request_cancellation_test, implicit_state_test": "a C API program"
    " built with Triton, and a torch model",
    "L0_request_cancellation test_grpc_async_infer_cancellation_at_step_start": "counts the"
    " log lines of Triton's gRPC handler state machine ('New request handler for"
    " ModelInferHandler', '... step START') under its TRITONSERVER_DELAY_GRPC_PROCESS test hook",
    "L0_implicit_state custom-backend tests": "libtriton_implicit_state is a C++ test backend;"
    " its onnx tests run on repokit only, and its L0_sequence_batcher run with IMPLICIT_STATE=1"
    " needs onnx/TensorRT/torch sequence models",
    "L0_dyna_sequence_batcher graphdef, savedmodel, libtorch, plan": "TensorFlow, torch and"
    " TensorRT models; onnx and custom_string (a TYPE_STRING CORRID, which this Triton's python"
    " backend refuses) run on repokit only, custom (the dyna_sequence backend's python"
    " stand-in) on both",
    "L0_sequence_corrid_batcher graphdef, savedmodel, plan": "python stand-ins with what the"
    " generated models compute (INPUT + START + END * CORRID); onnx is real on repokit",
    "scheduling suites on the CPU": "L0_model_queue, L0_rate_limiter and the sequence suites ask"
    " for KIND_GPU instances in places; they run on KIND_CPU here",
    "models that import torch": "torch is not installed here (the dlpack_*, pytorch_fp32_fp32,"
    " identity_bf16, bls, bls_async and decoupled_bls models); they are left out of the"
    " repositories when torch cannot be imported, and the tests that use them fail on both",
    # tools/triton_qa_requests.py
    "L0_decoupled custom trial": "the repeat/square/identity models of Triton's C++ test"
    " backends (libtriton_repeat.so ...); the python trial runs the same tests",
    "L0_decoupled test_one_to_multi_many's TRITONSERVER_DELAY_GRPC_RESPONSE": "test.sh exports"
    " it after the server started, so neither server reads it; only the test's client gets it",
    "L0_json": "a C++ unit test of Triton's JSON parser (triton_json_test)",
    "L0_backend_output_detail": "a C++ program on Triton's in-process C API",
    "L0_output_validation": "libtorch models (libtorch_model_store2)",
    "L0_client_timeout C++ client and non-infer APIs": "../clients/client_timeout_test is a C++"
    " program, and the non-infer part needs TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC, a hook"
    " of Triton's test builds",
    "L0_http_fuzz": "boofuzz (not installed) fuzzes 20 URLs with thousands of requests each"
    " (hours), and passes when the server never stops answering",
    "L0_socket": "starts servers on fixed ports with conflicting or disabled endpoints (the"
    " tool runs one server on 8000-8002 and waits for HTTP): its start/refuse matrix and the"
    " --reuse-*-port cases were checked by hand in a network namespace (all as test.sh"
    " expects; --http-address -47 --allow-http 0 starts both: Triton's metrics listen on"
    " 255.255.255.255, what inet_addr makes of it, repokit's on 0.0.0.0)",
    "L0_infer_reshape plan models": "test_ff2 and test_ff4 also run TensorRT plan models with"
    " their own reshapes (_trt_reshape): they fail on both",
    "L0_batch_input savedmodel, plan, libtorch": "TensorFlow, TensorRT and torch models; onnx"
    " runs on repokit only (Triton's python backend is not given batch inputs)",
    "L0_infer_zero, L0_infer_reshape, L0_scalar_io onnx": "this Triton has no onnxruntime"
    " backend: [onnx] runs on repokit only, [python] (the same configs on python models) on"
    " both",
    "L0_nullchar_string/L0_string_io TensorFlow models": "graphdef/savedmodel identity models"
    " (BYTES in, BYTES out): python stand-ins with the same configs",
}


# --- layout helpers ----------------------------------------------------------------------
def sed(path: Path, pattern: str, replacement: str) -> None:
    """``sed -i s/pattern/replacement/`` per line (first match in each line, ``g`` via re)."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(re.sub(pattern, replacement, line) for line in lines))


def append(path: Path, *lines: str) -> None:
    with path.open("a") as handle:
        for line in lines:
            handle.write(line + "\n")


def rename(path: Path, name: str) -> None:
    sed(path, r"^name:.*", f'name: "{name}"')


def renamed(path: Path, *, name: str) -> None:
    rename(path, name)


def appended(path: Path, *, lines: tuple[str, ...]) -> None:
    append(path, *lines)


TORCH_MODELS = frozenset(
    {
        "bls",
        "bls_async",
        "bls_onnx_warmup",
        "dlpack_add_sub",
        "dlpack_empty_output",
        "dlpack_identity",
        "dlpack_io_identity",
        "dlpack_io_identity_decoupled",
        "dlpack_square",
        "dlpack_sub_add",
        "dlpack_test",
        "identity_bf16",
        "pytorch_fp32_fp32",
        "variable_gpu_output",
        "decoupled_bls",
    }
)


@functools.cache
def torch_available() -> bool:
    """Whether the python models can import torch (repokit's instances run this interpreter;
    the reference Triton's stub runs a venv without it too)."""
    return importlib.util.find_spec("torch") is not None


def model(
    source: str,
    name: str | None = None,
    *,
    files: tuple[str, ...] = ("model.py",),
    main: str = "model.py",
    config_from: str | None = None,
    edits: Callable[[Path], None] | None = None,
) -> Layout:
    """``mkdir -p models/NAME/1 && cp python_models/SOURCE/{files} ... && cp config.pbtxt``;
    ``main`` is copied as ``1/model.py``."""

    def lay(qa: Path, repo: Path) -> None:
        if source in TORCH_MODELS and not torch_available():
            return
        target = repo / (name or source)
        (target / "1").mkdir(parents=True, exist_ok=True)
        src = qa / "python_models" / source
        for file in files:
            dest = "model.py" if file == main else file
            shutil.copy(src / file, target / "1" / dest)
        config = qa / "python_models" / (config_from or source) / "config.pbtxt"
        if config.exists():
            shutil.copy(config, target / "config.pbtxt")
        if edits is not None:
            edits(target / "config.pbtxt")

    return lay


def config_only(source: str, name: str | None = None) -> Layout:
    def lay(qa: Path, repo: Path) -> None:
        target = repo / (name or source)
        (target / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(qa / "python_models" / source / "config.pbtxt", target / "config.pbtxt")

    return lay


def tree(relative: str) -> Layout:
    """``cp -r qa/RELATIVE/* models/`` (a repository shipped with the test)."""

    def lay(qa: Path, repo: Path) -> None:
        shutil.copytree(qa / relative, repo, dirs_exist_ok=True)

    return lay


def copied(relative: str) -> Layout:
    """``cp -r qa/RELATIVE models/.`` (one model folder shipped with the test)."""

    def lay(qa: Path, repo: Path) -> None:
        source = qa / relative
        shutil.copytree(source, repo / source.name)

    return lay


def layouts(*parts: Layout) -> Layout:
    def lay(qa: Path, repo: Path) -> None:
        for part in parts:
            part(qa, repo)

    return lay


# --- scenario description -----------------------------------------------------------------
@dataclass(frozen=True)
class PytestRun:
    target: str
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 0.0
    # "unittest": run by unittest's own runner, as test.sh's "python FILE" does (tests built on
    # qa/common's TestResultCollector read unittest's result object, which pytest does not give)
    runner: str = "pytest"

    def suffix(self) -> str:
        shown = {
            k: v
            for k, v in self.env.items()
            if k in ("MODEL_NAME", "BLS_KIND", "TRIAL", "TEST_HEADER")
        }
        return "[" + ",".join(shown.values()) + "]" if shown else ""


@dataclass(frozen=True)
class ScriptRun:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpCall:
    name: str
    method: str
    path: str
    body: str | None = None
    expect: int = 200


@dataclass(frozen=True)
class KillChildren:
    """``kill -9 $(pgrep --parent $SERVER_PID)``: the model instances' processes."""


@dataclass(frozen=True)
class LogCheck:
    name: str
    pattern: str
    at_least: int = 1
    exactly: int | None = None
    # a file (next to the repository) whose lines are alternative patterns, each matched
    # in an error line ("E" + 4 digits ... pattern), as L0_model_config's test.sh greps
    expected_file: str = ""
    log_file: str = ""  # check this file (relative to the test's folder) instead of the output


Step = PytestRun | ScriptRun | HttpCall | KillChildren


@dataclass
class Scenario:
    label: str  # "<suite>/<scenario>"
    cwd: str  # relative to qa/: where test.sh runs
    layout: Layout | None  # None: the repository ships with the test (repo_dir)
    steps: list[Step] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    log_checks: list[LogCheck] = field(default_factory=list)
    expect_start: bool = True
    report_ready: bool = False  # one line for "the server started" (test.sh checks only that)
    repo_dir: str = "models"
    env: dict[str, str] = field(default_factory=dict)  # for the server and the tests
    start_timeout: float = 0.0
    keep_existing: bool = False  # add to the repository shipped in repo_dir
    server_log: str = ""  # test.sh's $SERVER_LOG, for tests that open it by name
    verbose: bool = True  # --log-verbose=1, as most test.sh files
    heavy: bool = False  # run only when -k names it (gigabytes of memory, minutes)
    repokit_flags: list[str] = field(default_factory=list)  # what Triton 2.51 does by default
    server_in_cwd: bool = False  # start the server in the test's folder (relative paths)

    def flags_for(self, kind: str) -> list[str]:
        common = [*(["--log-verbose=1"] if self.verbose else []), *self.flags]
        if kind == "triton":
            return common
        kept = [f for f in common if not f.startswith(("--backend-config", "--backend-dir"))]
        return [*kept, *self.repokit_flags]


BP = "L0_backend_python"
SHM_LEAK = "../test_infer_shm_leak.py"


def _identity_variants() -> Layout:
    """The top-level test.sh's identity_* copies of identity_fp32."""

    def uint8(config: Path) -> None:
        rename(config, "identity_uint8")
        sed(config, "TYPE_FP32", "TYPE_UINT8")
        sed(config, r"^max_batch_size:.*", "max_batch_size: 8")
        append(
            config,
            "dynamic_batching { preferred_batch_size: [8], "
            "max_queue_delay_microseconds: 12000000 }",
        )

    def uint8_nobatch(config: Path) -> None:
        rename(config, "identity_uint8_nobatch")
        sed(config, "TYPE_FP32", "TYPE_UINT8")
        sed(config, r"^max_batch_size:.*", "")

    def typed(name: str, dtype: str) -> Callable[[Path], None]:
        def edit(config: Path) -> None:
            rename(config, name)
            sed(config, "TYPE_FP32", dtype)

        return edit

    def default_name(qa: Path, repo: Path) -> None:
        model("identity_fp32", "default_model_name")(qa, repo)
        target = repo / "default_model_name"
        (target / "1" / "model.py").rename(target / "1" / "mymodel.py")
        rename(target / "config.pbtxt", "default_model_name")
        append(target / "config.pbtxt", 'default_model_filename: "mymodel.py"')

    def init_args(qa: Path, repo: Path) -> None:
        model("init_args")(qa, repo)
        sed(repo / "init_args" / "config.pbtxt", "TRITON_DIR_PATH", str(qa.parent))

    return layouts(
        model("identity_fp32"),
        model("identity_bf16"),
        model("identity_fp32", "identity_uint8", edits=uint8),
        model("identity_fp32", "identity_uint8_nobatch", edits=uint8_nobatch),
        model("identity_fp32", "identity_uint32", edits=typed("identity_uint32", "TYPE_UINT32")),
        model("identity_fp32", "identity_bool", edits=typed("identity_bool", "TYPE_BOOL")),
        default_name,
        model("pytorch_fp32_fp32", edits=lambda c: rename(c, "pytorch_fp32_fp32")),
        model("delayed_model"),
        init_args,
        model("optional"),
        model("non_contiguous"),
        model("string"),
        model("string_fixed"),
        model("dlpack_identity"),
    )


def top_level() -> list[Scenario]:
    return [
        Scenario(
            f"{BP}/python_test",
            BP,
            _identity_variants(),
            [PytestRun("python_test.py")],
            flags=["--backend-config=python,shm-default-byte-size=5242880"],
        ),
        Scenario(
            f"{BP}/multi_file",
            BP,
            model(
                "multi_file",
                files=("model.py", "file1.py", "file2.py"),
                config_from="identity_fp32",
                edits=lambda c: rename(c, "multi_file"),
            ),
            report_ready=True,
        ),
        Scenario(
            f"{BP}/model_env", BP, model("model_env"), report_ready=True, env={"MY_ENV": "MY_ENV"}
        ),
        Scenario(
            f"{BP}/init_exit",
            BP,
            model("init_exit"),
            expect_start=False,
            log_checks=[
                LogCheck("stub_not_healthy", r"Stub process 'init_exit_0_0' is not healthy\.")
            ],
        ),
    ]


def lifecycle() -> list[Scenario]:
    cwd = f"{BP}/lifecycle"

    def batched(name: str, delay: int) -> Callable[[Path], None]:
        def edit(config: Path) -> None:
            rename(config, name)
            sed(config, r"^max_batch_size:.*", "max_batch_size: 8")
            append(
                config,
                "dynamic_batching { preferred_batch_size: [8], "
                f"max_queue_delay_microseconds: {delay} }}",
            )

        return edit

    def wrong(config: Path) -> None:
        rename(config, "wrong_model")
        sed(config, "TYPE_FP32", "TYPE_UINT32")

    main = layouts(
        model("error_code"),
        model("execute_cancel"),
        model("execute_error", edits=batched("execute_error", 12000000)),
        model("execute_grpc_error", edits=batched("execute_grpc_error", 1200000)),
        model("execute_return_error"),
        model("wrong_model", edits=wrong),
    )
    return [
        Scenario(
            f"{BP}/lifecycle",
            cwd,
            main,
            [PytestRun("lifecycle_test.py")],
            server_log="lifecycle_server.log",
        ),
        Scenario(
            f"{BP}/lifecycle/init_error",
            cwd,
            model("init_error"),
            expect_start=False,
            log_checks=[LogCheck("error_in_log", r"name 'lorem_ipsum' is not defined")],
        ),
        Scenario(
            f"{BP}/lifecycle/fini_error",
            cwd,
            model("fini_error"),
            report_ready=True,
            log_checks=[LogCheck("error_in_log", r"name 'undefined_variable' is not defined")],
        ),
        Scenario(
            f"{BP}/lifecycle/auto_complete_error",
            cwd,
            model("auto_complete_error"),
            flags=["--strict-model-config=false"],
            expect_start=False,
            log_checks=[LogCheck("error_in_log", r"name 'undefined_variable' is not defined")],
        ),
    ]


def argument_validation() -> list[Scenario]:
    cwd = f"{BP}/argument_validation"
    run = PytestRun(SHM_LEAK, env={"MODEL_NAME": "argument_validation"})
    return [Scenario(f"{BP}/argument_validation", cwd, None, [run])]


def square_int32(qa: Path, repo: Path) -> None:
    """test.sh's square_int32, python_backend's examples/decoupled square model (not in the
    server's sources): src/test/models/square_int32's config on the python backend, with the
    same behaviour as a python model (IN[0] responses, each OUT = IN[0], then the final flag)."""
    from tools.triton_qa_requests import SQUARE_STAND_IN  # it imports this module

    folder = repo / "square_int32"
    shutil.copytree(qa.parent / "src" / "test" / "models" / "square_int32", folder)
    sed(folder / "config.pbtxt", r"^(backend|platform):.*", 'backend: "python"')
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(SQUARE_STAND_IN.lstrip())


def bls() -> list[Scenario]:
    cwd = f"{BP}/bls"
    main = layouts(
        square_int32,
        *(
            model(m)
            for m in (
                "bls",
                "dlpack_add_sub",
                "bls_async",
                "bls_memory",
                "bls_memory_async",
                "add_sub",
                "execute_error",
                "identity_fp32",
                "dlpack_identity",
                "dlpack_square",
                "identity_fp32_timeout",
            )
        ),
    )
    found: list[Scenario] = []
    for kind in ("non_decoupled", "decoupled"):
        runs: list[Step] = [
            PytestRun(SHM_LEAK, env={"MODEL_NAME": name, "BLS_KIND": kind})
            for name in ("bls", "bls_memory", "bls_memory_async", "bls_async")
        ]
        found.append(
            Scenario(
                f"{BP}/bls/{kind}",
                cwd,
                main,
                runs,
                env={"BLS_KIND": kind},
                log_checks=[LogCheck("bls_timeout_in_log", r"Request timeout: 11000000000")],
            )
        )
    message = r"BLS is only supported during the 'execute' function\."
    found += [
        Scenario(
            f"{BP}/bls/bls_init_error",
            cwd,
            model("bls_init_error"),
            expect_start=False,
            log_checks=[LogCheck("error_in_log", message)],
        ),
        Scenario(
            f"{BP}/bls/bls_finalize_error",
            cwd,
            model("bls_finalize_error"),
            report_ready=True,
            log_checks=[LogCheck("error_in_log", message)],
        ),
        Scenario(
            f"{BP}/bls/bls_parameters",
            cwd,
            model("bls_parameters"),
            [PytestRun("bls_parameters_test.py")],
            repo_dir="params_models",
        ),
    ]
    return found


def response_sender() -> list[Scenario]:
    cwd = f"{BP}/response_sender"
    decoupled = "model_transaction_policy { decoupled: True }"
    batching = "dynamic_batching { max_queue_delay_microseconds: 500000 }"
    parts: list[Layout] = []
    for name, main_file, extra in (
        ("response_sender", "model.py", ()),
        ("response_sender_decoupled", "model.py", (decoupled,)),
        ("response_sender_async", "model_async.py", ()),
        ("response_sender_decoupled_async", "model_async.py", (decoupled,)),
        ("response_sender_batching", "model.py", (batching,)),
        ("response_sender_decoupled_batching", "model.py", (decoupled, batching)),
        ("response_sender_async_batching", "model_async.py", (batching,)),
        ("response_sender_decoupled_async_batching", "model_async.py", (decoupled, batching)),
    ):
        parts.append(
            model(
                "response_sender",
                name,
                files=("model_common.py", main_file),
                main=main_file,
                edits=functools.partial(appended, lines=extra),
            )
        )
    return [
        Scenario(
            f"{BP}/response_sender", cwd, layouts(*parts), [PytestRun("response_sender_test.py")]
        ),
        Scenario(
            f"{BP}/response_sender/complete_final",
            cwd,
            model("response_sender_complete_final"),
            [PytestRun("response_sender_complete_final_test.py")],
        ),
    ]


def decoupled() -> list[Scenario]:
    cwd = f"{BP}/decoupled"

    def lay(qa: Path, repo: Path) -> None:
        if not torch_available():
            shutil.rmtree(repo / "decoupled_bls", ignore_errors=True)
        model("identity_fp32")(qa, repo)
        model(
            "execute_cancel",
            edits=lambda c: append(c, "model_transaction_policy { decoupled: True }"),
        )(qa, repo)
        model("dlpack_add_sub")(qa, repo)
        square_int32(qa, repo)

    checks = [
        LogCheck(f"log_{t.split()[0].lower()}", re.escape(t))
        for t in ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")
    ]
    checks += [
        LogCheck("log_finalize_invoked", r"Finalize invoked", exactly=3),
        LogCheck("log_finalize_complete", r"Finalize complete\.\.\.", exactly=3),
    ]
    # test.sh adds to the models shipped in decoupled/models
    return [
        Scenario(
            f"{BP}/decoupled",
            cwd,
            lay,
            [PytestRun("decoupled_test.py")],
            log_checks=checks,
            keep_existing=True,
            server_log="decoupled_server.log",
        )
    ]


def small_suites() -> list[Scenario]:
    found = [
        Scenario(
            f"{BP}/async_execute",
            f"{BP}/async_execute",
            layouts(model("async_execute_decouple"), model("async_execute_decouple_bls")),
            [PytestRun("concurrency_test.py")],
        ),
        Scenario(
            f"{BP}/model_control",
            f"{BP}/model_control",
            layouts(model("identity_fp32"), config_only("simple_identity_fp32")),
            [PytestRun("model_control_test.py")],
            flags=["--model-control-mode=explicit"],
        ),
        Scenario(
            f"{BP}/custom_metrics",
            f"{BP}/custom_metrics",
            model("custom_metrics"),
            [PytestRun(SHM_LEAK, env={"MODEL_NAME": "custom_metrics"})],
        ),
        Scenario(
            f"{BP}/request_rescheduling",
            f"{BP}/request_rescheduling",
            layouts(
                *(
                    model(m)
                    for m in (
                        "bls_request_rescheduling",
                        "request_rescheduling_addsub",
                        "iterative_sequence",
                        "wrong_return_type",
                    )
                )
            ),
            [
                PytestRun(SHM_LEAK, env={"MODEL_NAME": "bls_request_rescheduling"}),
                PytestRun("grpc_endpoint_test.py"),
            ],
            flags=["--model-control-mode=explicit", "--load-model=*"],
        ),
        Scenario(
            f"{BP}/ensemble",
            f"{BP}/ensemble",
            layouts(
                config_only("ensemble"),
                model("add_sub", "add_sub_1"),
                model("add_sub", "add_sub_2"),
            ),
            [PytestRun("ensemble_test.py::EnsembleTest::test_ensemble")],
        ),
    ]
    return found


def io() -> list[Scenario]:
    cwd = f"{BP}/io"
    found: list[Scenario] = []
    for trial, source in (
        ("default", "dlpack_io_identity"),
        ("decoupled", "dlpack_io_identity_decoupled"),
    ):
        parts = [
            model(
                source,
                f"dlpack_io_identity_{i}",
                edits=functools.partial(renamed, name=f"dlpack_io_identity_{i}"),
            )
            for i in (1, 2, 3)
        ]
        parts.append(config_only("ensemble_io"))
        found.append(
            Scenario(
                f"{BP}/io/{trial}",
                cwd,
                layouts(*parts),
                [PytestRun("io_test.py::IOTest::test_ensemble_io", env={"TRIAL": trial})],
                env={"TRIAL": trial},
            )
        )
    found.append(
        Scenario(
            f"{BP}/io/requested_output",
            cwd,
            layouts(model("add_sub"), model("dlpack_io_identity_decoupled")),
            [
                PytestRun("io_test.py::IOTest::test_requested_output_default"),
                PytestRun("io_test.py::IOTest::test_requested_output_decoupled"),
            ],
        )
    )
    return found


def logging() -> list[Scenario]:
    cwd = f"{BP}/logging"
    lay = model("identity_fp32_logging")

    def counts(plain: int, verbose: int) -> list[LogCheck]:
        found = [
            LogCheck(f"log_count_{t.split()[0].lower()}", re.escape(t), exactly=plain)
            for t in ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")
        ]
        return [*found, LogCheck("log_count_verbose", r"Verbose Msg!", exactly=verbose)]

    run = PytestRun("logging_test.py")
    disable = [
        HttpCall(f"disable_{p}", "POST", "/v2/logging", f'{{"{p}":false}}')
        for p in ("log_info", "log_warning", "log_error")
    ]
    verbose = HttpCall("set_verbose", "POST", "/v2/logging", '{"log_verbose_level":1}')
    return [  # the logging test.sh runs its servers without --log-verbose
        Scenario(f"{BP}/logging/default", cwd, lay, [run], log_checks=counts(4, 0), verbose=False),
        Scenario(
            f"{BP}/logging/verbose",
            cwd,
            lay,
            [verbose, run],
            log_checks=counts(4, 3),
            verbose=False,
        ),
        Scenario(
            f"{BP}/logging/disabled",
            cwd,
            lay,
            [*disable, run],
            log_checks=counts(1, 0),
            verbose=False,
        ),
    ]


COMPARE = "compare_status.py"
AUTOFILL_SUCCESS = "L0_model_config/autofill_noplatform_success/python"
AUTOFILL_NEEDS_MODEL = ("incomplete_output", "unknown_input", "unknown_output", "empty_config")


def autofill() -> list[Scenario]:
    """L0_model_config: every python case of autofill_noplatform_success loads with
    --strict-model-config=false and compare_status.py finds its config among ``expected*``.
    Those were written on a GPU machine (KIND_GPU, gpus: 0); ``compare_status_cpu`` compares
    with the same configs on the CPU (KIND_CPU, no gpus), which is what Triton serves here."""
    found: list[Scenario] = []
    cases = (
        "conflicting_scheduler_ensemble",
        "dynamic_batching",
        "dynamic_batching_no_op",
        "empty_config",
        "incomplete_input",
        "incomplete_output",
        "model_transaction_policy",
        "model_transaction_policy_decoupled_false",
        "model_transaction_policy_no_op",
        "optional_input",
        "unknown_input",
        "unknown_output",
    )
    for case in cases:

        def lay(qa: Path, repo: Path, case: str = case) -> None:
            source = qa / AUTOFILL_SUCCESS / case
            if (source / "config.pbtxt").exists():
                shutil.copytree(source, repo / case)
            else:  # a whole repository
                shutil.copytree(source, repo, dirs_exist_ok=True)
            if case in AUTOFILL_NEEDS_MODEL:
                (repo / case / "1").mkdir(parents=True, exist_ok=True)
                shutil.copy(qa / "python_models/auto_complete/model.py", repo / case / "1")
            for own in repo.glob("*/model.py"):  # test.sh: cp $modelpath/model.py $modelpath/1/
                (own.parent / "1").mkdir(exist_ok=True)
                shutil.copy(own, own.parent / "1" / "model.py")
            # the expected configs were taken on a GPU machine: the same, placed on the CPU
            cpu = repo.parent / "expected_cpu" / case
            shutil.rmtree(cpu, ignore_errors=True)
            cpu.mkdir(parents=True)
            for expected in (repo / case).glob("expected*"):
                text = re.sub(r"\n\s*gpus: 0", "", expected.read_text())
                (cpu / expected.name).write_text(text.replace("KIND_GPU", "KIND_CPU"))

        expected_dir, cpu_dir, model = f"models/{case}", f"expected_cpu/{case}", ("--model", case)
        found.append(
            Scenario(
                f"L0_model_config/autofill_python/{case}",
                "L0_model_config",
                lay,
                [
                    ScriptRun("compare_status", (COMPARE, "--expected_dir", expected_dir, *model)),
                    ScriptRun("compare_status_cpu", (COMPARE, "--expected_dir", cpu_dir, *model)),
                ],
                flags=["--strict-model-config=false"],
                report_ready=True,
            )
        )
    return found


AUTOFILL_FAILURE = "L0_model_config/autofill_noplatform/python"
FAILURE_CASES_WITHOUT_MODEL = (
    "input_mismatch_datatype",
    "input_mismatch_dims",
    "output_mismatch_datatype",
    "output_mismatch_dims",
)


def grep_pattern(text: str) -> str:
    """A grep basic regular expression (the expected files') as a Python one."""
    return text.strip().replace("(", r"\(").replace(")", r"\)")


def cli_messages() -> list[Scenario]:
    """L0_model_config cli_messages: the deprecated --strict-model-config is warned about (and
    its override by --disable-auto-complete-config); the repository's one folder holds only the
    expected file, so the server does not start, and test.sh greps its whole output."""
    cases = (
        (
            "cli_deprecation",
            ["--strict-model-config=true"],
            "Warning: '--strict-model-config' has been deprecated! Please use "
            "'--disable-auto-complete-config' instead.",
        ),
        (
            "cli_override",
            ["--disable-auto-complete-config", "--strict-model-config=false"],
            "Warning: Overriding deprecated '--strict-model-config' from False to True in "
            "favor of '--disable-auto-complete-config'!",
        ),
    )
    return [
        Scenario(
            f"L0_model_config/cli_messages/{target}",
            "L0_model_config",
            copied(f"L0_model_config/cli_messages/{target}"),
            flags=flags,
            expect_start=False,
            log_checks=[LogCheck("warning_in_output", re.escape(warning))],
            verbose=False,
        )
        for target, flags, warning in cases
    ]


def autofill_failures() -> list[Scenario]:
    """L0_model_config: every python case of autofill_noplatform must stop the server
    (--strict-model-config=false) with one of its ``expected*`` texts in an error line
    (``grep ^E[0-9][0-9][0-9][0-9].*"$EX"``). The cases are read from the qa tree."""
    found: list[Scenario] = []
    for case in AUTOFILL_FAILURE_CASES:

        def lay(qa: Path, repo: Path, case: str = case) -> None:
            source = qa / AUTOFILL_FAILURE / case
            shutil.copytree(source, repo / case)
            (repo / case / "1").mkdir(exist_ok=True)
            own = source / "model.py"
            if case in FAILURE_CASES_WITHOUT_MODEL or not own.exists():
                own = qa / "python_models/auto_complete/model.py"
            shutil.copy(own, repo / case / "1" / "model.py")
            expected = [grep_pattern(p.read_text()) for p in sorted(source.glob("expected*"))]
            (repo.parent / f"{case}.expected").write_text("\n".join(expected))

        found.append(
            Scenario(
                f"L0_model_config/autofill_python_errors/{case}",
                "L0_model_config",
                lay,
                flags=["--strict-model-config=false"],
                expect_start=False,
                log_checks=[LogCheck("expected_error", "", expected_file=f"{case}.expected")],
            )
        )
    return found


AUTOFILL_FAILURE_CASES = (
    "conflicting_max_batch_size",
    "conflicting_scheduler_sequence",
    "input_mismatch_datatype",
    "input_mismatch_dims",
    "input_missing_datatype",
    "input_missing_dims",
    "input_missing_name",
    "input_wrong_property",
    "model_transaction_policy_invalid_args",
    "model_transaction_policy_mismatch",
    "no_return",
    "output_mismatch_datatype",
    "output_mismatch_dims",
    "output_missing_datatype",
    "output_missing_dims",
    "output_missing_name",
    "output_wrong_property",
)


# --- L0_http: the HTTP frontend's raw binary requests ---------------------------------------
# A python stand-in for Triton's generated onnx identity models, so that Triton (whose python
# package here has no onnxruntime backend) runs the same repository: every INPUTn comes back
# as OUTPUTn. (The repokit-only variant keeps the onnx models and runs them on onnxruntime.)
IDENTITY_STAND_IN = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        config = json.loads(args["model_config"])
        self.pairs = [
            (given["name"], given["name"].replace("INPUT", "OUTPUT")) for given in config["input"]
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name, output in self.pairs:
                given = pb_utils.get_input_tensor_by_name(request, name)
                if given is not None:  # an optional input that did not come: no output
                    outputs.append(pb_utils.Tensor(output, given.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


def version_folders(*names: str) -> Layout:
    """``mkdir -p models/NAME/1`` (ensembles and other models without files)."""

    def lay(qa: Path, repo: Path) -> None:
        for name in names:
            (repo / name / "1").mkdir(parents=True, exist_ok=True)

    return lay


def identity_stand_ins(*names: str) -> Layout:
    """Models of Triton's test-only ``identity`` backend (not in its python package) as
    python stand-ins with the same configs."""

    def lay(qa: Path, repo: Path) -> None:
        for name in names:
            folder = repo / name
            sed(folder / "config.pbtxt", r'^backend: "identity"', 'backend: "python"')
            (folder / "1").mkdir(parents=True, exist_ok=True)
            (folder / "1" / "model.py").write_text(IDENTITY_STAND_IN)

    return lay


def _identity_models(qa: Path, into: Path) -> None:
    """Triton's qa/common/gen_qa_identity_models.py --onnx, run as its test's DATADIR has it
    (qa_identity_model_repository)."""
    subprocess.run(
        [sys.executable, "gen_qa_identity_models.py", "--onnx", "--models_dir", str(into)],
        cwd=qa / "common",
        check=True,
        capture_output=True,
    )


def _http_unit_test_models(*, stand_in: bool) -> Layout:
    """L0_http/test.sh's python_unit_test_models: four identity models and two edited
    copies (one BYTES element; a queue of one request that waits a second for a batch)."""

    def lay(qa: Path, repo: Path) -> None:
        generated = repo.parent / "qa_identity_model_repository"
        shutil.rmtree(generated, ignore_errors=True)
        _identity_models(qa, generated)
        for name in (
            "onnx_zero_1_float32",
            "onnx_zero_1_object",
            "onnx_zero_1_float16",
            "onnx_zero_3_float32",
        ):
            shutil.copytree(generated / name, repo / name)
        one = repo / "onnx_zero_1_object_1_element"
        shutil.copytree(repo / "onnx_zero_1_object", one)
        rename(one / "config.pbtxt", "onnx_zero_1_object_1_element")
        text = (one / "config.pbtxt").read_text()
        (one / "config.pbtxt").write_text(text.replace("-1", "1", 1))  # sed "0,/-1/{s/-1/1/}"
        queue = repo / "onnx_zero_1_float32_queue"
        shutil.copytree(repo / "onnx_zero_1_float32", queue)
        rename(queue / "config.pbtxt", "onnx_zero_1_float32_queue")
        append(
            queue / "config.pbtxt",
            "dynamic_batching { ",
            "    max_queue_delay_microseconds: 1000000",
            "    preferred_batch_size: [ 8 ]",
            "    default_queue_policy {",
            "        max_queue_size: 1",
            "    }",
            "}",
        )
        if stand_in:
            for folder in repo.iterdir():
                sed(folder / "config.pbtxt", r'^platform: "onnxruntime_onnx"', 'backend: "python"')
                for version in folder.iterdir():
                    if version.is_dir():
                        shutil.rmtree(version)
                (folder / "1").mkdir()
                (folder / "1" / "model.py").write_text(IDENTITY_STAND_IN)

    return lay


def http_frontend() -> list[Scenario]:
    return [
        Scenario(
            "L0_http/http_test",
            "L0_http",
            _http_unit_test_models(stand_in=True),
            [PytestRun("http_test.py", runner="unittest")],
            repo_dir="python_unit_test_models",
            verbose=False,
        ),
        Scenario(
            "L0_http/http_test[onnx]",
            "L0_http",
            _http_unit_test_models(stand_in=False),
            [PytestRun("http_test.py", runner="unittest")],
            repo_dir="python_unit_test_models",
            verbose=False,
        ),
    ]


def http_generate() -> list[Scenario]:
    """L0_http's generate extension test: the repository it ships (``generate_models``, a
    decoupled python ``mock_llm``), a server started with no other flag than that."""
    return [
        Scenario(
            "L0_http/generate_endpoint",
            "L0_http",
            None,
            [PytestRun("generate_endpoint_test.py", runner="unittest")],
            repo_dir="generate_models",
            verbose=False,
        )
    ]


# --- L0_http / L0_grpc: restricted APIs and protocols --------------------------------------
def _simple(qa: Path, repo: Path) -> None:
    """The example repository's ``simple`` (INT32 INPUT0/INPUT1 [16], OUTPUT0 = sum, OUTPUT1 =
    difference; Triton's is a TensorFlow graphdef) as tools/triton_examples.py serves it: the
    same config on a python model. The restricted tests use no other model of ``models``."""
    stand_in = STAND_INS["simple"]
    assert stand_in.source is not None
    config = qa.parent / "docs/examples/model_repository/simple/config.pbtxt"
    (repo / "simple" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "simple" / "config.pbtxt").write_text(stand_in_config(config.read_text(), stand_in))
    (repo / "simple" / "1" / "model.py").write_text(stand_in.source.lstrip())


def restricted() -> list[Scenario]:
    """The restricted-API parts of L0_http/test.sh and L0_grpc/test.sh: two flag sets each
    that must stop the server with a message in its log (test.sh greps it exactly once), then
    a server with the test's restrictions and its unittest class."""
    found: list[Scenario] = []
    for suite, flag, word in (
        ("L0_http", "--http-restricted-api", "api"),
        ("L0_grpc", "--grpc-restricted-protocol", "protocol"),
    ):
        refused = (
            (
                "repeated",
                "model-repository,health:k1=v1",
                f"{word} 'health' can not be specified in multiple config groups",
            ),
            ("unknown", "model-reposit,health:k1=v1", f"unknown restricted {word} 'model-reposit'"),
        )
        for case, first, message in refused:
            found.append(
                Scenario(
                    f"{suite}/restricted_{word}_{case}",
                    suite,
                    _simple,
                    flags=[f"{flag}={first}", f"{flag}=metadata,health:k2=v2"],
                    expect_start=False,
                    log_checks=[LogCheck("expected_message", re.escape(message), exactly=1)],
                    verbose=False,
                )
            )
    found.append(
        Scenario(
            "L0_http/restricted_api",
            "L0_http",
            _simple,
            [PytestRun("http_restricted_api_test.py::RestrictedAPITest")],
            flags=[
                "--http-restricted-api=model-repository:admin-key=admin-value",
                "--http-restricted-api=inference,metadata:infer-key=infer-value",
            ],
            verbose=False,
        )
    )
    found.append(
        Scenario(
            "L0_grpc/restricted_protocol",
            "L0_grpc",
            _simple,
            [PytestRun("python_unit_test.py::RestrictedProtocolTest")],
            flags=[
                "--grpc-restricted-protocol=model-repository:admin-key=admin-value",
                "--grpc-restricted-protocol=inference,health:infer-key=infer-value",
            ],
            verbose=False,
        )
    )
    return found


# --- L0_http / L0_grpc: tritonclient's asyncio clients --------------------------------------
# inception_graphdef (a TensorFlow graph whose weights are downloaded) is served by a python
# model with its config that answers zeros: the aio tests only count it in the repository index
ZEROS = """import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.outputs = [(o["name"], [int(d) for d in o["dims"]]) for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            batch = request.inputs()[0].as_numpy().shape[0]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor(name, np.zeros([batch, *dims], dtype=np.float32))
                for name, dims in self.outputs
            ]))
        return responses
"""


def _example_repository(models: list[str]) -> Layout:
    """The ``models`` folder Triton's QA image gives L0_http / L0_grpc (example models, plus
    the string dyna-sequence copy test.sh makes), as tools/triton_examples.py stands them in;
    inception_graphdef loads too (its labels file beside its config)."""

    def lay(qa: Path, repo: Path) -> None:
        build_repository(qa.parent, [m for m in models if m != "inception_graphdef"], repo)
        if "inception_graphdef" not in models:
            return
        source = qa.parent / "docs/examples/model_repository/inception_graphdef"
        stand_in = StandIn("inception_graphdef", "", ZEROS)
        folder = repo / "inception_graphdef"
        (folder / "1").mkdir(parents=True)
        config = stand_in_config((source / "config.pbtxt").read_text(), stand_in)
        (folder / "config.pbtxt").write_text(config)
        shutil.copy(source / "inception_labels.txt", folder / "inception_labels.txt")
        (folder / "1" / "model.py").write_text(ZEROS)

    return lay


# Triton 2.51 serves client shared memory always; repokit when allowed (README, Differences)
ALLOW_SHM = "--allow-client-shm=true"


def asyncio_clients() -> list[Scenario]:
    """python_http_aio_test.py and python_grpc_aio_test.py: the server test.sh starts on
    ``models`` (no other flag), the test run once."""
    return [
        Scenario(
            "L0_http/python_http_aio",
            "L0_http",
            _example_repository(HTTP_REPOSITORY),
            [PytestRun("python_http_aio_test.py")],
            verbose=False,
            repokit_flags=[ALLOW_SHM],
        ),
        Scenario(
            "L0_grpc/python_grpc_aio",
            "L0_grpc",
            _example_repository(GRPC_REPOSITORY),
            [PytestRun("python_grpc_aio_test.py")],
            verbose=False,
            repokit_flags=[ALLOW_SHM],
        ),
    ]


OPTIONAL_INPUT_CASES = (
    "test_all_inputs",
    "test_optional_same_input",
    "test_optional_mix_inputs",
    "test_optional_mix_inputs_2",
    "test_ensemble_all_inputs",
    "test_ensemble_optional_same_input",
    "test_ensemble_optional_mix_inputs",
    "test_ensemble_optional_mix_inputs_2",
    "test_ensemble_optional_pipeline",
    "test_ensemble_optional_connecting_tensor",
)

PARAMETER_RUNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("test_params", ()),
    (
        "test_headers",
        ("--grpc-header-forward-pattern=my_header.*", "--http-header-forward-pattern=my_header.*"),
    ),
    (
        "test_header_forward_pattern_case_insensitive",
        ("--grpc-header-forward-pattern=MY_HEADER.*", "--http-header-forward-pattern=MY_HEADER.*"),
    ),
    (
        "test_grpc_header_forward_pattern_case_sensitive",
        ("--grpc-header-forward-pattern=(?-i)MY_HEADER.*",),
    ),
)


def core_suites() -> list[Scenario]:
    """Suites of Triton's qa outside the python backend's folder whose models are python
    models (or Triton's test-only identity backend, stood in for by python models)."""
    found = [
        Scenario(
            "L0_input_validation/InputValTest",
            "L0_input_validation",
            None,
            [PytestRun("input_validation_test.py::InputValTest")],
            verbose=False,
        ),
    ]
    for case, flags in PARAMETER_RUNS:
        found.append(
            Scenario(
                f"L0_parameters/{case}",
                "L0_parameters",
                layouts(version_folders("identity", "ensemble"), identity_stand_ins("identity")),
                [PytestRun("parameters_test.py", env={"TEST_HEADER": case})],
                flags=["--exit-timeout-secs=120", *flags],
                repo_dir="model_repository",
                keep_existing=True,
                verbose=False,
            )
        )
    for case in OPTIONAL_INPUT_CASES:  # test.sh restarts the server per case (fresh statistics)
        found.append(
            Scenario(
                f"L0_optional_input/{case}",
                "L0_optional_input",
                layouts(
                    version_folders(
                        "identity_2_float32",
                        "ensemble_identity_2_float32",
                        "pipeline_identity_2_float32",
                        "optional_connecting_tensor",
                    ),
                    identity_stand_ins("identity_2_float32"),
                ),
                [
                    PytestRun(
                        f"optional_input_test.py::OptionalInputTest::{case}", runner="unittest"
                    )
                ],
                keep_existing=True,
            )
        )
    return found


def warmup() -> list[Scenario]:
    """L0_warmup's python models: a warmup sample that fails stops the load (and the server),
    a decoupled model's sample runs."""
    flags = ["--exit-timeout-secs=120"]
    return [
        Scenario(
            "L0_warmup/failing_infer",
            "L0_warmup",
            copied("L0_warmup/failing_infer"),
            flags=flags,
            expect_start=False,
            log_checks=[
                LogCheck(
                    "warmup_error",
                    re.escape("failed to run warmup sample 'zero sample': An Error Occurred;"),
                )
            ],
        ),
        Scenario(
            "L0_warmup/decoupled",
            "L0_warmup",
            copied("L0_warmup/decoupled"),
            flags=flags,
            report_ready=True,
            log_checks=[
                LogCheck("warmup_ran", re.escape("is running warmup sample 'decoupled sample'")),
                LogCheck("no_warmup_error", "failed to run warmup", exactly=0),
            ],
        ),
    ]


def _large_payload_python(qa: Path, repo: Path) -> None:
    name = "python_nobatch_zero_1_float32"
    model("identity_fp32", name)(qa, repo)
    config = repo / name / "config.pbtxt"
    sed(config, r"max_batch_size: 64", "max_batch_size: 0")
    sed(config, r'name: "identity_fp32"', f'name: "{name}"')


def _large_payload_onnx(qa: Path, repo: Path) -> None:
    generated = repo.parent / "qa_identity_model_repository"
    shutil.rmtree(generated, ignore_errors=True)
    _identity_models(qa, generated)
    shutil.copytree(generated / "onnx_nobatch_zero_1_float32", repo / "onnx_nobatch_zero_1_float32")


def large_payload() -> list[Scenario]:
    """L0_large_payload for the python and onnx identity models: 1.9 GiB over HTTP and gRPC
    answered, 3 GiB over HTTP refused, then a small request still served. Heavy (about
    10 GiB of memory between client and server, minutes): run it on purpose with
    ``-k L0_large_payload``."""
    return [
        Scenario(
            f"L0_large_payload/{target}",
            "L0_large_payload",
            layout,
            [
                PytestRun(
                    f"large_payload_test.py::LargePayLoadTest::test_{target}", runner="unittest"
                )
            ],
            heavy=True,
        )
        for target, layout in (("python", _large_payload_python), ("onnx", _large_payload_onnx))
    ]


SHARED_MEMORY_CASES = (
    "test_invalid_create_shm",
    "test_valid_create_set_register",
    "test_unregister_before_register",
    "test_unregister_after_register",
    "test_reregister_after_register",
    "test_unregister_after_inference",
    "test_register_after_inference",
    "test_too_big_shm",
    "test_mixed_raw_shm",
    "test_unregisterall",
    "test_infer_offset_out_of_bound",
    "test_infer_byte_size_out_of_bound",
    "test_register_out_of_bound",
    "test_python_client_leak",
)


def _delayed_simple(qa: Path, repo: Path) -> None:
    """test.sh's python_models/simple: python_models/execute_delayed_model under that name."""
    model("execute_delayed_model", "simple")(qa, repo)


def shared_memory() -> list[Scenario]:
    """L0_shared_memory (system shared memory; test.sh restarts the server per case and client
    kind): the ``simple`` model of its ``models`` folder (Triton's example, stood in for as in
    the restricted tests), then unregistering a region while a delayed python model runs."""
    found: list[Scenario] = []
    for case in SHARED_MEMORY_CASES:
        for kind in ("http", "grpc"):
            found.append(
                Scenario(
                    f"L0_shared_memory/{case}[{kind}]",
                    "L0_shared_memory",
                    _simple,
                    [
                        PytestRun(
                            f"shared_memory_test.py::SharedMemoryTest::{case}",
                            env={"CLIENT_TYPE": kind},
                            runner="unittest",
                        )
                    ],
                    repokit_flags=[ALLOW_SHM],
                )
            )
    for kind in ("http", "grpc"):
        found.append(
            Scenario(
                f"L0_shared_memory/unregister_during_inference[{kind}]",
                "L0_shared_memory",
                _delayed_simple,
                [
                    PytestRun(
                        "shared_memory_test.py::TestSharedMemoryUnregister::"
                        f"test_unregister_shm_during_inference_{kind}",
                        env={"CLIENT_TYPE": kind},
                        runner="unittest",
                    )
                ],
                repo_dir="python_models",
                repokit_flags=[ALLOW_SHM],
            )
        )
    return found


def _python_model_with(
    source: str, methods: str, *, versions: tuple[str, ...] = ("1",), config_lines: str = ""
) -> Layout:
    """``cp -r python_models/SOURCE models/ && echo '<methods>' >> model.py`` (methods added to
    the model's class, as L0_lifecycle's test.sh appends them), copied into each version."""

    def lay(qa: Path, repo: Path) -> None:
        target = repo / source
        target.mkdir(parents=True)
        shutil.copy(qa / "python_models" / source / "config.pbtxt", target / "config.pbtxt")
        if config_lines:
            append(target / "config.pbtxt", config_lines)
        text = (qa / "python_models" / source / "model.py").read_text()
        for version in versions:
            (target / version).mkdir()
            (target / version / "model.py").write_text(text + methods)

    return lay


SLEEPING_INITIALIZE = (
    "    def initialize(self, args):\n        import time\n        time.sleep(10)\n"
)
LOGGING_INITIALIZE = (
    "    def initialize(self, args):\n"
    "        pb_utils.Logger.log_info(f'[PB model] Loading version {args[\"model_version\"]}')\n"
)


def lifecycle_python() -> list[Scenario]:
    """The parts of L0_lifecycle that use only python models: a server stopped while a model
    loads, a stop (SIGINT) with a client's connection open, and a reload that loads only the
    versions that changed."""
    cwd = "L0_lifecycle"
    return [
        Scenario(
            f"{cwd}/test_shutdown_while_loading",
            cwd,
            _python_model_with("identity_fp32", SLEEPING_INITIALIZE),
            [PytestRun("lifecycle_test.py::LifeCycleTest::test_shutdown_while_loading",
                       runner="unittest")],
            flags=["--model-control-mode=explicit", "--log-verbose=2"],
            verbose=False,
        ),
        Scenario(
            f"{cwd}/test_shutdown_with_live_connection",
            cwd,
            _python_model_with("add_sub", ""),
            [PytestRun("lifecycle_test.py::LifeCycleTest::test_shutdown_with_live_connection",
                       runner="unittest")],
            verbose=False,
        ),
        Scenario(
            f"{cwd}/test_load_new_model_version",
            cwd,
            _python_model_with(
                "identity_fp32",
                LOGGING_INITIALIZE,
                versions=("1", "2", "3"),
                config_lines="version_policy: { specific: { versions: [1, 2] } }",
            ),
            [PytestRun("lifecycle_test.py::LifeCycleTest::test_load_new_model_version",
                       runner="unittest")],
            flags=["--model-control-mode=explicit", "--load-model=*"],
            verbose=False,
            # test.sh's: the stub's __pycache__ would make every version look modified
            env={"PYTHONDONTWRITEBYTECODE": "True"},
        ),
    ]  # fmt: skip


def _scheduling() -> list[Scenario]:
    from tools.triton_qa_scheduling import scheduling  # imports this module

    return scheduling()


def scenarios() -> list[Scenario]:
    from tools.triton_qa_requests import scenarios as request_scenarios

    return [
        *top_level(),
        *lifecycle(),
        *argument_validation(),
        *bls(),
        *response_sender(),
        *decoupled(),
        *small_suites(),
        *io(),
        *logging(),
        *autofill(),
        *autofill_failures(),
        *cli_messages(),
        *http_frontend(),
        *http_generate(),
        *asyncio_clients(),
        *restricted(),
        *core_suites(),
        *warmup(),
        *large_payload(),
        *shared_memory(),
        *batcher(),
        *sequence_batcher(),
        *lifecycle_python(),
        *operability(),
        *request_scenarios(),
        *_scheduling(),
        *_options(),
        *_reliability(),
        *_leftovers(),
    ]


def _leftovers() -> list[Scenario]:
    from tools import triton_qa_leftovers  # imports this module

    NOT_APPLICABLE.update(triton_qa_leftovers.NOT_APPLICABLE)
    return triton_qa_leftovers.scenarios()


def _options() -> list[Scenario]:
    from tools import triton_qa_options  # imports this module

    NOT_APPLICABLE.update(triton_qa_options.NOT_APPLICABLE)
    return triton_qa_options.scenarios()


def _reliability() -> list[Scenario]:
    from tools import triton_qa_reliability  # imports this module

    NOT_APPLICABLE.update(triton_qa_reliability.NOT_APPLICABLE)
    return triton_qa_reliability.scenarios()


def operability() -> list[Scenario]:
    from tools import triton_qa_operability  # imports this module

    NOT_APPLICABLE.update(triton_qa_operability.NOT_APPLICABLE)
    return triton_qa_operability.scenarios()


# --- L0_batcher ----------------------------------------------------------------------------
BATCHER_NO_DELAY = (
    "test_static_batch_preferred",
    "test_static_batch_lt_any_preferred",
    "test_static_batch_not_preferred",
    "test_static_batch_gt_max_preferred",
    "test_multi_batch_not_preferred",
    "test_multi_batch_gt_max_preferred",
    "test_multi_batch_sum_gt_max_preferred",
    "test_multi_same_output0",
    "test_multi_same_output1",
    "test_multi_different_outputs",
    "test_multi_different_output_order",
)
# test.sh's TRITONSERVER_DELAY_SCHEDULER per test: the batcher waits for that many requests
BATCHER_DELAYED = (
    ("test_multi_batch_delayed_sum_gt_max_preferred", 2),
    ("test_multi_batch_use_biggest_preferred", 6),
    ("test_multi_batch_use_best_preferred", 3),
    ("test_multi_batch_delayed_use_max_batch", 3),
)
BATCHER_DIFFERENT_SHAPE = (
    "test_multi_batch_not_preferred_different_shape",
    "test_multi_batch_preferred_different_shape",
    "test_multi_batch_different_shape_allow_ragged",
    "test_multi_batch_different_shape",
)
BATCHER_PREFERRED_ONLY = (
    ("test_preferred_batch_only_aligned", 4),
    ("test_preferred_batch_only_unaligned", 5),
    ("test_preferred_batch_only_use_biggest_preferred", 7),
    ("test_preferred_batch_only_use_no_preferred_size", 3),
)
BATCHING_TEN_SECONDS = (
    "dynamic_batching { preferred_batch_size: [ 2, 6 ], max_queue_delay_microseconds: 10000000 }"
)


def _qa_models(qa: Path, into: Path, *, variable: bool) -> None:
    """Triton's qa/common/gen_qa_models.py --onnx (its DATADIR's qa_model_repository, or
    qa_variable_model_repository with ``variable``)."""
    subprocess.run(
        [
            sys.executable,
            "gen_qa_models.py",
            "--onnx",
            *(["--variable"] if variable else []),
            "--models_dir",
            str(into),
        ],
        cwd=qa / "common",
        check=True,
        capture_output=True,
    )


def _batcher_models(backend: str, *, variable: bool, batching: str) -> Layout:
    """test.sh's models / var_models / preferred_batch_only_models for one backend: the onnx
    ``*_float32_float32_float32`` model (python: its config with ``backend: "python"`` and
    python_models/add_sub as the model), max_batch_size 8, version 1 only, ``batching``
    appended; var_models also get -1 for 16 in every config, the ragged ``custom`` identity
    model (a python stand-in, on the CPU) and, for onnx, the ragged onnx identity model."""

    def lay(qa: Path, repo: Path) -> None:
        kind = "qa_variable_model_repository" if variable else "qa_model_repository"
        generated = repo.parent / kind
        shutil.rmtree(generated, ignore_errors=True)
        _qa_models(qa, generated, variable=variable)
        source = generated / "onnx_float32_float32_float32"
        name = f"{backend}_float32_float32_float32"
        target = repo / name
        if backend == "python":
            (target / "1").mkdir(parents=True)
            text = re.sub(
                r"platform:.*", 'backend: "python"', (source / "config.pbtxt").read_text()
            )
            (target / "config.pbtxt").write_text(text.replace("onnx", "python"))
            shutil.copy(source / "output0_labels.txt", target)
            shutil.copy(qa / "python_models" / "add_sub" / "model.py", target / "1" / "model.py")
        else:
            shutil.copytree(source, target)
        config = target / "config.pbtxt"
        sed(config, r"^max_batch_size:.*", "max_batch_size: 8")
        sed(config, r"^version_policy:.*", "version_policy: { specific { versions: [1] }}")
        append(config, batching)
        if not variable:
            return
        sed(config, "16", "-1")
        custom = repo / "custom_zero_1_float32"
        shutil.copytree(qa / "custom_models" / "custom_zero_1_float32", custom)
        config = custom / "config.pbtxt"
        append(config, "instance_group [ { kind: KIND_CPU count: 1 }]")  # test.sh: KIND_GPU
        sed(config, r"^max_batch_size:.*", "max_batch_size: 8")
        sed(config, r"dims:.*\[.*\]", "dims: [ -1 ]")
        sed(config, r'name:.*"INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true')
        append(config, BATCHING_TEN_SECONDS)
        identity_stand_ins("custom_zero_1_float32")(qa, repo)
        if backend != "onnx":
            return
        identities = repo.parent / "qa_identity_model_repository"
        shutil.rmtree(identities, ignore_errors=True)
        _identity_models(qa, identities)
        ragged = repo / "onnx_zero_1_float32"
        shutil.copytree(identities / "onnx_nobatch_zero_1_float32", ragged)
        config = ragged / "config.pbtxt"
        sed(config, "nobatch_", "")
        sed(config, r"^max_batch_size:.*", "max_batch_size: 8")
        sed(config, r'name: "INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true')
        append(
            config,
            'batch_output [{target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE'
            ' source_input: "INPUT0" }]',
            BATCHING_TEN_SECONDS,
        )

    return lay


# Triton's test-only identity backend with its execute_delay_ms parameter (it sleeps that long
# in each execution) as a python model
DELAYED_IDENTITY_STAND_IN = IDENTITY_STAND_IN.replace(
    "    def execute(self, requests):\n",
    "    def execute(self, requests):\n        import time\n\n        time.sleep(self.delay_s)\n",
).replace(
    '        config = json.loads(args["model_config"])\n',
    '        config = json.loads(args["model_config"])\n'
    '        delay = config.get("parameters", {}).get("execute_delay_ms", {})\n'
    '        self.delay_s = int(delay.get("string_value", "0")) / 1000\n',
)


def _delayed_identity(folder: Path) -> None:
    sed(folder / "config.pbtxt", r'^backend: "identity"', 'backend: "python"')
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(DELAYED_IDENTITY_STAND_IN)


def _max_queue_delay_only(delay_us: int) -> Layout:
    """test.sh's custom_models: custom_zero_1_float32 with a 100 ms execution, batches of up
    to 100, ``max_queue_delay_microseconds: 0`` (its sed for MAX_QUEUE_DELAY_MICROSECONDS
    matches nothing in that line, so both tests run with 0), on the CPU (test.sh: KIND_GPU)."""

    def lay(qa: Path, repo: Path) -> None:
        folder = repo / "custom_zero_1_float32"
        shutil.copytree(qa / "custom_models" / "custom_zero_1_float32", folder)
        config = folder / "config.pbtxt"
        sed(config, r"dims:.*\[.*\]", "dims: [ -1 ]")
        sed(config, r"max_batch_size:.*", "max_batch_size: 100")
        append(
            config,
            "dynamic_batching { max_queue_delay_microseconds: 0}",
            "instance_group [ { kind: KIND_CPU } ]",
            "parameters [",
            '{ key: "execute_delay_ms"; value: { string_value: "100" }}',
            "]",
        )
        sed(
            config,
            r"max_queue_delay_microseconds:.*\[.*\]",
            f"max_queue_delay_microseconds: {delay_us}",
        )
        _delayed_identity(folder)

    return lay


def _queue_timeout_model(qa: Path, repo: Path) -> None:
    """test.sh's models/dynamic_batch: one request at a time that runs 8 s, a queue of 8 whose
    requests are rejected after 1 s."""
    folder = repo / "dynamic_batch"
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        'backend: "identity"\n'
        "max_batch_size: 1\n"
        'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        "instance_group [{ count: 1 \n kind: KIND_CPU }]\n"
        "dynamic_batching {\n"
        "  preferred_batch_size: [ 1 ]\n"
        "  default_queue_policy { timeout_action: REJECT \n default_timeout_microseconds:"
        " 1000000 \n max_queue_size: 8 }\n"
        "}\n"
        'parameters [{ key: "execute_delay_ms" \n value: { string_value: "8000" } }]\n'
    )
    _delayed_identity(folder)


def _unittest_scenario(
    suite: str, label: str, test: str, layout: Layout, repo_dir: str, env: dict[str, str]
) -> Scenario:
    """One test of ``suite`` run as its test.sh runs it: a server of its own on ``repo_dir``,
    the test file's TestResultCollector class under unittest, test.sh's environment."""
    return Scenario(
        f"{suite}/{test.rsplit('::', 1)[-1]}[{label}]",
        suite,
        layout,
        [PytestRun(test, runner="unittest")],
        repo_dir=repo_dir,
        env=env,
        verbose=False,
    )


def _batcher_run(
    backend: str, test: str, kind: str, repo_dir: str, layout: Layout, delay: int = 0
) -> Scenario:
    env = {"BACKENDS": backend, "BATCHER_TYPE": kind}
    if delay:
        env["TRITONSERVER_DELAY_SCHEDULER"] = str(delay)
    tag = "" if backend == "python" else f",{backend}"
    return _unittest_scenario(
        "L0_batcher", f"{kind}{tag}", f"batcher_test.py::BatcherTest::{test}", layout, repo_dir, env
    )


def batcher() -> list[Scenario]:
    """L0_batcher's dynamic-batcher tests for the python backend (and onnx, which this Triton
    cannot load: repokit only), one server per test and model type as test.sh runs them, with
    its TRITONSERVER_DELAY_SCHEDULER (the batcher waits until that many requests are queued)."""
    found: list[Scenario] = []
    for backend in ("python", "onnx"):
        fixed = _batcher_models(backend, variable=False, batching=BATCHING_TEN_SECONDS)
        variable = _batcher_models(backend, variable=True, batching=BATCHING_TEN_SECONDS)
        for kind, repo_dir, layout in (
            ("FIXED", "models", fixed),
            ("VARIABLE", "var_models", variable),
        ):
            found += [_batcher_run(backend, t, kind, repo_dir, layout) for t in BATCHER_NO_DELAY]
            found += [
                _batcher_run(backend, t, kind, repo_dir, layout, delay)
                for t, delay in BATCHER_DELAYED
            ]
        found += [
            _batcher_run(backend, t, "VARIABLE", "var_models", variable)
            for t in BATCHER_DIFFERENT_SHAPE
        ]
        found.append(
            _batcher_run(
                backend,
                "test_multi_batch_delayed_preferred_different_shape",
                "VARIABLE",
                "var_models",
                variable,
                4,
            )
        )
        preferred_only = _batcher_models(
            backend, variable=False, batching="dynamic_batching { preferred_batch_size: [ 4, 6 ] }"
        )
        found += [
            _batcher_run(backend, t, "FIXED", "preferred_batch_only_models", preferred_only, d)
            for t, d in BATCHER_PREFERRED_ONLY
        ]
    for test, delay_us in (
        ("test_max_queue_delay_only_default", 0),
        ("test_max_queue_delay_only_non_default", 20000),
    ):
        found.append(
            Scenario(
                f"L0_batcher/{test}",
                "L0_batcher",
                _max_queue_delay_only(delay_us),
                [PytestRun(f"batcher_test.py::BatcherTest::{test}", runner="unittest")],
                repo_dir="custom_models",
                env={"MAX_QUEUE_DELAY_MICROSECONDS": str(delay_us)},
                verbose=False,
            )
        )
    found.append(
        Scenario(
            "L0_batcher/queue_timeout",
            "L0_batcher",
            _queue_timeout_model,
            [PytestRun("queue_timeout_test.py", runner="unittest")],
            flags=["--log-verbose=2"],
            verbose=False,
        )
    )
    return found


# --- L0_sequence_batcher -------------------------------------------------------------------
SEQUENCE_NO_DELAY = (
    "test_simple_sequence",
    "test_length1_sequence",
    "test_batch_size",
    "test_no_sequence_start",
    "test_no_sequence_start2",
    "test_no_sequence_end",
    "test_no_correlation_id",
)
# test.sh's (TRITONSERVER_DELAY_SCHEDULER, TRITONSERVER_BACKLOG_DELAY_SCHEDULER) per test
SEQUENCE_DELAYED = (
    ("test_backlog_fill", 10, 2),
    ("test_backlog_fill_no_end", 10, 3),
    ("test_backlog_same_correlation_id", 12, 2),
    ("test_backlog_same_correlation_id_no_end", 16, 0),
    ("test_backlog_sequence_timeout", 4, 0),
    ("test_half_batch", 8, 0),
    ("test_skip_batch", 12, 0),
    ("test_full_batch", 12, 0),
    ("test_ragged_batch", 12, 0),
    ("test_backlog", 12, 0),
)
SEQUENCE_QUEUE_DELAY = (
    "test_queue_delay_no_min_util",
    "test_queue_delay_half_min_util",
    "test_queue_delay_full_min_util",
)
# model trial -> (repository, max_batch_size or None to keep, instance count, nobatch models)
SEQUENCE_TRIALS = {
    "0": ("models0", None, 4, True),
    "1": ("models1", 4, 1, False),
    "2": ("models2", 2, 2, False),
    "4": ("models4", 1, 4, False),
    "v": ("modelsv", 4, 1, False),
}


def _qa_sequence_models(qa: Path, into: Path, *, variable: bool) -> None:
    """Triton's qa/common/gen_qa_sequence_models.py --onnx [--variable]."""
    subprocess.run(
        [
            sys.executable,
            "gen_qa_sequence_models.py",
            "--onnx",
            *(["--variable"] if variable else []),
            "--models_dir",
            str(into),
        ],
        cwd=qa / "common",
        check=True,
        capture_output=True,
    )


def _python_sequence_model(source: Path, repo: Path, qa: Path) -> Path:
    """test.sh's generate_python_models: the onnx config with ``backend: "python"`` and onnx
    renamed python, python_models/sequence_int32/model.py as the model."""
    target = repo / source.name.replace("onnx", "python")
    (target / "1").mkdir(parents=True)
    text = re.sub(r"platform:.*", 'backend: "python"', (source / "config.pbtxt").read_text())
    (target / "config.pbtxt").write_text(text.replace("onnx", "python"))
    shutil.copy(qa / "python_models" / "sequence_int32" / "model.py", target / "1" / "model.py")
    return target / "config.pbtxt"


def _instances(config: Path, count: int) -> None:
    """test.sh's ``kind: KIND_X`` -> ``kind: KIND_X\\ncount: N``; on the CPU (the generated
    configs ask for KIND_GPU)."""
    sed(config, r"kind: KIND_GPU", "kind: KIND_CPU")
    sed(config, r"kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}")


def _sequence_models(trial: str, *, queue_delay: bool = False) -> Layout:
    """One of test.sh's python repositories (BACKENDS=python, ENSEMBLES=0): the int32 and bool
    sequence models, or queue_delay_models (Direct with a 3 s queue delay and minimum slot
    utilization 0, 0.5 and 1)."""

    def lay(qa: Path, repo: Path) -> None:
        _repository, batch, count, nobatch = SEQUENCE_TRIALS[trial]
        variable = trial == "v"
        kind = (
            "qa_variable_sequence_model_repository" if variable else "qa_sequence_model_repository"
        )
        generated = repo.parent / kind
        shutil.rmtree(generated, ignore_errors=True)
        _qa_sequence_models(qa, generated, variable=variable)
        for dtype in ("int32", "bool"):
            name = f"onnx_{'nobatch_' if nobatch else ''}sequence_{dtype}"
            config = _python_sequence_model(generated / name, repo, qa)
            if batch is not None:
                sed(config, r"^max_batch_size:.*", f"max_batch_size: {batch}")
            _instances(config, count)
            if not queue_delay:
                continue
            sed(
                config,
                r"sequence_batching \{",
                "sequence_batching {\ndirect {\nmax_queue_delay_microseconds: 3000000\n"
                "minimum_slot_utilization: 0\n}",
            )
            base = config.parent.name
            for suffix, utilization in (("half", "0.5"), ("full", "1")):
                copy = repo / f"{base}_{suffix}"
                shutil.copytree(config.parent, copy)
                sed(copy / "config.pbtxt", base, f"{base}_{suffix}")
                sed(
                    copy / "config.pbtxt",
                    r"minimum_slot_utilization: 0$",
                    f"minimum_slot_utilization: {utilization}",
                )

    return lay


def _preserve_ordering_models(qa: Path, repo: Path) -> None:
    """test.sh's preserve_ordering_models: python_models/sequence_py with and without
    preserve_ordering, decoupled and not."""
    source = qa / "python_models" / "sequence_py"
    for mode in ("decoupled", "nondecoupled"):
        for preserve in (False, True):
            name = f"seqpy_{'' if preserve else 'no_'}preserve_ordering_{mode}"
            (repo / name / "1").mkdir(parents=True)
            shutil.copy(source / "config.pbtxt", repo / name / "config.pbtxt")
            shutil.copy(source / "model.py", repo / name / "1" / "model.py")
            config = repo / name / "config.pbtxt"
            if preserve:
                sed(config, r"^preserve_ordering: False", "preserve_ordering: True")
            if mode == "decoupled":
                append(config, "", "model_transaction_policy { decoupled: true }")


def _sequence_run(
    test: str, trial: str, layout: Layout, repo_dir: str, delay: int = 0, backlog: int = -1
) -> Scenario:
    env = {
        "BACKENDS": "python",
        "ENSEMBLES": "0",
        "IMPLICIT_STATE": "0",
        "INITIAL_STATE_FILE": "0",
        "INITIAL_STATE_ZERO": "0",
        "USE_SINGLE_BUFFER": "0",
        "NO_BATCHING": "1" if trial == "0" else "0",
        "MODEL_INSTANCES": {"0": "4", "v": "1"}.get(trial, trial),
        "BATCHER_TYPE": "VARIABLE" if trial == "v" else "FIXED",
    }
    if delay:
        env["TRITONSERVER_DELAY_SCHEDULER"] = str(delay)
    if backlog >= 0:
        env["TRITONSERVER_BACKLOG_DELAY_SCHEDULER"] = str(backlog)
    test_path = f"sequence_batcher_test.py::SequenceBatcherTest::{test}"
    return _unittest_scenario("L0_sequence_batcher", repo_dir, test_path, layout, repo_dir, env)


def sequence_batcher() -> list[Scenario]:
    """L0_sequence_batcher for BACKENDS=python with ENSEMBLES=0: the basic and delayed tests
    on each model trial's repository (one server per test, test.sh's scheduler delays), the
    queue-delay tests and the preserve-ordering test on python_models/sequence_py."""
    found: list[Scenario] = []
    for trial, (repo_dir, *_rest) in SEQUENCE_TRIALS.items():
        layout = _sequence_models(trial)
        found += [_sequence_run(test, trial, layout, repo_dir) for test in SEQUENCE_NO_DELAY]
        found += [
            _sequence_run(test, trial, layout, repo_dir, delay, backlog)
            for test, delay, backlog in SEQUENCE_DELAYED
        ]
    queue_delay = _sequence_models("1", queue_delay=True)
    found += [
        _sequence_run(test, "1", queue_delay, "queue_delay_models", 2, 0)
        for test in SEQUENCE_QUEUE_DELAY
    ]
    found.append(
        Scenario(
            "L0_sequence_batcher/preserve_ordering",
            "L0_sequence_batcher",
            _preserve_ordering_models,
            [
                PytestRun(
                    "sequence_batcher_test.py::SequenceBatcherPreserveOrderingTest",
                    runner="unittest",
                    env={
                        "NO_BATCHING": "0",
                        "MODEL_INSTANCES": "1",
                        "IMPLICIT_STATE": "0",
                        "INITIAL_STATE_FILE": "0",
                        "BATCHER_TYPE": "FIXED",
                    },
                )
            ],
            repo_dir="preserve_ordering_models",
            verbose=False,
        )
    )
    return found
