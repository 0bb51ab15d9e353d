"""Triton's qa suites about running a server (response cache, metrics, logging settings, model
control and namespacing) as scenarios for ``triton_qa.py``.

Each scenario is one server run of the suite's ``test.sh``: its model repository (Triton's
test-only ``identity`` backend stood in for by python models, as in ``triton_qa_suites``), the
flags it starts the server with, and the test files it then runs unmodified, or the log lines
and HTTP answers it checks. ``{cwd}`` in a flag or an environment value is the test's folder
(test.sh's `pwd`), ``{qa}`` the qa tree. Nothing here is Triton's text: it is read from a git
dir at run time.
"""

from __future__ import annotations

import compileall
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tools.triton_qa_suites import (
    HttpCall,
    Layout,
    LogCheck,
    PytestRun,
    Scenario,
    ScriptRun,
    Step,
    _delayed_identity,
    _qa_models,
    append,
    identity_stand_ins,
    sed,
)

# (its qa paths are listed in triton_qa_suites.QA_PATHS)

NOT_APPLICABLE: dict[str, str] = {
    "L0_response_cache unit tests, redis": "response_cache_test is a C++ program built with"
    " Triton; the redis cache needs a redis server and Triton's redis cache library",
    "L0_metrics GPU, pinned memory, metrics_api_test": "GPU utilization/energy/peer-access and"
    " pinned-memory pool metrics need CUDA; metrics_api_test is a C++ program",
    "L0_response_statistics": "its models are Triton's test-only 'square' backend, which"
    " reports a response's compute-infer and compute-output times separately from delays set"
    " in its config (CUSTOM_INFER_DELAY_NS / CUSTOM_OUTPUT_DELAY_NS); a python model cannot"
    " separate them",
    "L0_logging simple clients, log_format_test": "the simple_http/grpc_infer_client programs"
    " are C++ (the log-line counts after them are left out); log_format_test starts its own"
    " tritonserver from PATH",
    "L0_server_status": "its repository is qa_model_repository's graphdef and TensorRT models",
    "L0_query": "Triton's test-only 'query' backend and a C++ unit test",
    "L0_model_update (by default)": "its 65 scenarios (each test on a server of its own, a"
    " failed one sleeping 30 s in tearDown) run only when -k names them. Its tearDown reads"
    " unittest internals Python 3.11 removed (_feedErrorsToResult, _outcome.errors): the"
    " runner gives them back. test_gpu_*, test_instance_name_update, test_instance_signature"
    " and test_*_scheduler_update_with_ongoing_sequences ask for KIND_GPU instances: with no"
    " GPU here they fail on both servers",
    "L0_metrics namespace_on": "expects the namespace label to be Triton's install path"
    " (/opt/tritonserver/qa/...): fails on both (the label is the repository's path)",
}


# --- L0_response_cache ---------------------------------------------------------------------
def _cache_models(qa: Path, repo: Path) -> None:
    """The test's own ``models`` (identity_cache, decoupled_cache) as python stand-ins."""
    identity_stand_ins("identity_cache", "decoupled_cache")(qa, repo)


def _cache_start(name: str, flags: list[str], *, fails_with: str = "") -> Scenario:
    explicit = ["--model-control-mode=explicit", "--load-model=identity_cache"]
    checks = [LogCheck("error_message", f"(?i){fails_with}")] if fails_with else []
    return Scenario(
        f"L0_response_cache/{name}",
        "L0_response_cache",
        _cache_models,
        flags=[*flags, *explicit],
        expect_start=not fails_with,
        report_ready=not fails_with,
        log_checks=checks,
        keep_existing=True,
        verbose=False,
    )


ENSEMBLE = "simple_graphdef_float32_float32_float32"
COMPOSING = "graphdef_float32_float32_float32"
DECOUPLED = "model_transaction_policy { decoupled: True }"
CACHE_ON = "response_cache { enable: True }"


def _ensemble_cache_models(ensemble_lines: str = "", composing_lines: str = "") -> Layout:
    """test.sh's ensemble repositories: qa_ensemble_model_repository's
    simple_graphdef_float32_float32_float32 (Triton's gen_qa_models.py --ensemble) and its
    composing graphdef_float32_float32_float32 (versions 1 and 3) as python_models/add_sub on
    the config gen_qa_models.py --onnx writes for onnx_float32_float32_float32."""

    def lay(qa: Path, repo: Path) -> None:
        generated = repo.parent.parent / "ensemble_generated"
        shutil.rmtree(generated, ignore_errors=True)
        subprocess.run(
            [sys.executable, "gen_qa_models.py", "--ensemble", "--models_dir", str(generated)],
            cwd=qa / "common",
            check=True,
            capture_output=True,
        )
        shutil.copytree(generated / ENSEMBLE, repo / ENSEMBLE)
        onnx = repo.parent.parent / "onnx_generated"
        shutil.rmtree(onnx, ignore_errors=True)
        _qa_models(qa, onnx, variable=False)
        source = onnx / "onnx_float32_float32_float32"
        target = repo / COMPOSING
        target.mkdir()
        text = re.sub(r"platform:.*", 'backend: "python"', (source / "config.pbtxt").read_text())
        (target / "config.pbtxt").write_text(text.replace("onnx", "graphdef"))
        shutil.copy(source / "output0_labels.txt", target)
        for version in source.iterdir():
            if version.is_dir():
                (target / version.name).mkdir()
                shutil.copy(
                    qa / "python_models" / "add_sub" / "model.py",
                    target / version.name / "model.py",
                )
        if ensemble_lines:
            append(repo / ENSEMBLE / "config.pbtxt", ensemble_lines)
        if composing_lines:
            append(target / "config.pbtxt", composing_lines)

    return lay


def _ensemble_cache_test(test: str, size: int = 10840) -> Scenario:
    checks = []
    if test == "test_ensemble_cache_insertion_failure":
        checks.append(LogCheck("insert_failed", "(?i)Failed to insert key"))
    return Scenario(
        f"L0_response_cache/{test}",
        "L0_response_cache",
        _ensemble_cache_models(),
        [PytestRun(f"ensemble_cache_test.py::EnsembleCacheTest::{test}", runner="unittest")],
        flags=["--cache-config", f"local,size={size}", "--model-control-mode=explicit"],
        log_checks=checks,
        repo_dir="models/ensemble_models",
        verbose=False,
    )


def _ensemble_decoupled(label: str, layout: Layout) -> Scenario:
    return Scenario(
        f"L0_response_cache/{label}",
        "L0_response_cache",
        layout,
        flags=[
            "--cache-config",
            "local,size=10480",
            "--model-control-mode=explicit",
            f"--load-model={ENSEMBLE}",
        ],
        expect_start=False,
        log_checks=[LogCheck("error_message", DECOUPLED_REFUSAL)],
        repo_dir=f"models/{label}",
        verbose=False,
    )


DECOUPLED_REFUSAL = r"(?i)^(?=.*response cache does not currently support)(?=.*decoupled).*$"


def response_cache() -> list[Scenario]:
    """test.sh's server runs: a decoupled model with the cache refused, both cache flags
    accepted, several cache configurations and both flag styles together refused."""
    return [
        Scenario(
            "L0_response_cache/decoupled_model",
            "L0_response_cache",
            _cache_models,
            flags=[
                "--cache-config",
                "local,size=10480",
                "--model-control-mode=explicit",
                "--load-model=decoupled_cache",
            ],
            expect_start=False,
            log_checks=[LogCheck("error_message", DECOUPLED_REFUSAL)],
            keep_existing=True,
            verbose=False,
        ),
        _cache_start("response_cache_byte_size", ["--response-cache-byte-size=8192"]),
        _cache_start("cache_config", ["--cache-config=local,size=8192"]),
        _cache_start(
            "multiple_cache_configs",
            ["--cache-config=local,size=8192", "--cache-config=redis,key=value"],
            fails_with="multiple cache configurations",
        ),
        _cache_start(
            "both_flag_styles",
            ["--response-cache-byte-size=12345", "--cache-config=local,size=67890"],
            fails_with="incompatible flags",
        ),
        _ensemble_decoupled(
            "ensemble_cache_decoupled",
            _ensemble_cache_models(ensemble_lines=f"{CACHE_ON}\n{DECOUPLED}"),
        ),
        _ensemble_decoupled(
            "ensemble_cache_composing_decoupled",
            _ensemble_cache_models(ensemble_lines=CACHE_ON, composing_lines=DECOUPLED),
        ),
        _ensemble_cache_test("test_ensemble_top_level_response_cache"),
        _ensemble_cache_test("test_ensemble_all_models_cache_enabled"),
        _ensemble_cache_test("test_ensemble_composing_model_cache_enabled"),
        _ensemble_cache_test("test_ensemble_cache_insertion_failure", size=200),
    ]


# --- L0_metrics ----------------------------------------------------------------------------
def _cpu_metrics_model(qa: Path, repo: Path) -> None:
    """test.sh's libtorch_float32_float32_float32 (INPUT0/INPUT1 -> OUTPUT0/OUTPUT1, FP32
    [16], batches of 8) as python_models/add_sub."""
    folder = repo / "libtorch_float32_float32_float32"
    (folder / "1").mkdir(parents=True)
    shutil.copy(qa / "python_models" / "add_sub" / "model.py", folder / "1" / "model.py")
    tensor = '{{ name: "{}" data_type: TYPE_FP32 dims: [ 16 ] }}'
    inputs = ", ".join(tensor.format(f"INPUT{i}") for i in (0, 1))
    outputs = ", ".join(tensor.format(f"OUTPUT{i}") for i in (0, 1))
    (folder / "config.pbtxt").write_text(
        f'backend: "python"\nmax_batch_size: 8\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
        "instance_group [{ kind: KIND_CPU }]\n"
    )


def _unit_test_models(qa: Path, repo: Path) -> None:
    identity_stand_ins("identity_cache_on", "identity_cache_off")(qa, repo)


def _namespacing_repos(qa: Path, repo: Path) -> None:
    (repo / "addsub_ensemble" / "1").mkdir(parents=True, exist_ok=True)
    (repo.parent / "subadd_repo" / "subadd_ensemble" / "1").mkdir(parents=True, exist_ok=True)


def _queue_size_models(qa: Path, repo: Path) -> None:
    """test.sh's queue_size_models: identity_delay (2 s per execution) per scheduler."""
    source = qa / "L0_metrics"
    default = repo / "default"
    shutil.copytree(source / "identity_delay", default)
    sed(default / "config.pbtxt", r"^max_batch_size.*", "max_batch_size: 4")
    _delayed_identity(default)
    extra = {
        "dynamic": "dynamic_batching { max_queue_delay_microseconds: 100000 }",
        "max_queue_size": "dynamic_batching { max_queue_delay_microseconds: 100000"
        " default_queue_policy { max_queue_size: 4 } }",
        "sequence_direct": "sequence_batching { direct { max_queue_delay_microseconds: 100000,"
        " minimum_slot_utilization: 1.0 } }",
        "sequence_oldest": "sequence_batching { oldest { max_queue_delay_microseconds: 100000,"
        " max_candidate_sequences: 4 } }",
    }
    for name, line in extra.items():
        shutil.copytree(default, repo / name)
        append(repo / name / "config.pbtxt", "", line, "")
    shutil.copytree(source / "ensemble_delay", repo / "ensemble")
    (repo / "ensemble" / "1").mkdir(exist_ok=True)
    shutil.copytree(default, repo / "default_composing")
    shutil.copytree(repo / "dynamic", repo / "dynamic_composing")


def _config_tests(*names: str, env: dict[str, str] | None = None) -> list[Step]:
    return [
        PytestRun(
            f"metrics_config_test.py::MetricsConfigTest::{name}", env=env or {}, runner="unittest"
        )
        for name in names
    ]


def _metrics_config(label: str, flags: list[str], tests: list[Step]) -> Scenario:
    return Scenario(
        f"L0_metrics/{label}",
        "L0_metrics",
        _unit_test_models,
        tests,
        flags=["--model-control-mode=explicit", *flags],
        repo_dir="unit_test_models",
        keep_existing=True,
        verbose=False,
    )


SUMMARY = "summary_latencies=true"


def metrics() -> list[Scenario]:
    """L0_metrics' CPU-server parts: CPU/RAM metrics, the --metrics-config counters and
    summaries (with and without the cache, custom quantiles), the model namespace label and
    the pending-request (queue size) gauge for each scheduler."""
    off = "--load-model=identity_cache_off"
    quantiles = "0.1:0.0.1,0.7:0.01,0.75:0.01"
    return [
        Scenario(
            "L0_metrics/cpu_metrics",
            "L0_metrics",
            _cpu_metrics_model,
            [PytestRun("cpu_metrics_test.py", timeout=600)],
            flags=["--metrics-interval-ms=1000"],
        ),
        _metrics_config(
            "default",
            [off],
            _config_tests(
                "test_inf_counters_exist",
                "test_inf_summaries_missing",
                "test_cache_counters_missing",
                "test_cache_summaries_missing",
            ),
        ),
        _metrics_config(
            "summaries",
            [off, "--metrics-config", SUMMARY],
            _config_tests(
                "test_inf_counters_exist",
                "test_inf_summaries_exist",
                "test_cache_counters_missing",
                "test_cache_summaries_missing",
            ),
        ),
        _metrics_config(
            "summaries_no_counters",
            [off, "--metrics-config", SUMMARY, "--metrics-config", "counter_latencies=false"],
            _config_tests(
                "test_inf_counters_missing",
                "test_inf_summaries_exist",
                "test_cache_counters_missing",
                "test_cache_summaries_missing",
            ),
        ),
        _metrics_config(
            "cache",
            [
                "--cache-config",
                "local,size=1048576",
                "--load-model=identity_cache_on",
                "--metrics-config",
                SUMMARY,
                "--metrics-config",
                "counter_latencies=true",
            ],
            _config_tests(
                "test_inf_counters_exist",
                "test_inf_summaries_exist_with_cache",
                "test_cache_counters_exist",
                "test_cache_summaries_exist",
            ),
        ),
        _metrics_config(
            "custom_quantiles",
            [
                off,
                "--metrics-config",
                SUMMARY,
                "--metrics-config",
                f"summary_quantiles={quantiles}",
            ],
            _config_tests("test_summaries_custom_quantiles", env={"SUMMARY_QUANTILES": quantiles}),
        ),
        Scenario(
            "L0_metrics/namespace_on",
            "L0_metrics",
            _namespacing_repos,
            _config_tests("test_model_namespacing_label_with_namespace_on"),
            flags=[
                "--model-repository={cwd}/model_namespacing_repos/subadd_repo",
                "--model-namespacing=true",
                "--allow-metrics=true",
            ],
            repo_dir="model_namespacing_repos/addsub_repo",
            keep_existing=True,
            verbose=False,
        ),
        Scenario(
            "L0_metrics/namespace_off",
            "L0_metrics",
            _namespacing_repos,
            _config_tests("test_model_namespacing_label_with_namespace_off"),
            flags=["--model-namespacing=false", "--allow-metrics=true"],
            repo_dir="model_namespacing_repos/addsub_repo",
            keep_existing=True,
            verbose=False,
        ),
        Scenario(
            "L0_metrics/queue_size",
            "L0_metrics",
            _queue_size_models,
            [PytestRun("metrics_queue_size_test.py", runner="unittest")],
            repo_dir="queue_size_models",
            env={"MAX_BATCH_SIZE": "4", "MAX_QUEUE_DELAY_US": "100000"},
        ),
    ]


# --- L0_logging ----------------------------------------------------------------------------
# test.sh's verify_correct_settings (its curl of GET /v2/logging and greps of the answer):
# argv: log_file, log_info, log_warning, log_error, log_verbose_level, log_format
VERIFY_SETTINGS = """
import json, os, sys, urllib.request
with urllib.request.urlopen("http://localhost:8000/v2/logging", timeout=30) as answer:
    settings = json.loads(answer.read())
keys = ("log_file", "log_info", "log_warning", "log_error", "log_verbose_level", "log_format")
wanted = dict(zip(keys, sys.argv[1:]))
wanted["log_verbose_level"] = int(wanted["log_verbose_level"])
for key in ("log_info", "log_warning", "log_error"):
    wanted[key] = wanted[key] == "true"
settings["log_file"] = os.path.basename(settings.get("log_file", ""))  # test.sh's cwd
wrong = {k: (settings.get(k), v) for k, v in wanted.items() if settings.get(k) != v}
if wrong:
    sys.exit(f"settings differ (got, wanted): {wrong}")
"""


def _verify(name: str, *values: str) -> ScriptRun:
    return ScriptRun(name, ("-c", VERIFY_SETTINGS, *values))


def _log_models(qa: Path, repo: Path) -> None:
    """test.sh's log_models/simple (qa_model_repository's onnx_int32_int32_int32, version 1):
    an add/sub python model with its inputs and outputs."""
    (repo.parent / "log_file.log").unlink(missing_ok=True)  # test.sh: rm -f log_file.log
    folder = repo / "simple"
    (folder / "1").mkdir(parents=True)
    shutil.copy(qa / "python_models" / "add_sub" / "model.py", folder / "1" / "model.py")
    config = (qa / "python_models" / "add_sub" / "config.pbtxt").read_text()
    config = config.replace("TYPE_FP32", "TYPE_INT32")
    (folder / "config.pbtxt").write_text(config)
    sed(folder / "config.pbtxt", r"^name:.*", 'name: "simple"')


def _logging(
    label: str, flags: list[str], steps: list[Step], checks: tuple[LogCheck, ...] = ()
) -> Scenario:
    return Scenario(
        f"L0_logging/{label}",
        "L0_logging",
        _log_models,
        list(steps),
        flags=flags,
        log_checks=list(checks),
        repo_dir="log_models",
        verbose=False,
    )


LOG_LINE = r"^[IWEV]\d{4}"


def _in_file(name: str, pattern: str, *, at_least: int = 1, exactly: int | None = None) -> LogCheck:
    return LogCheck(name, pattern, at_least, exactly, log_file="log_file.log")


def _post(name: str, body: str, expect: int = 200) -> HttpCall:
    return HttpCall(name, "POST", "/v2/logging", body, expect)


# test.sh's curl of a bad update: any answer but 200 (Triton 2.51 answers 500 for these)
REFUSED = """
import sys, urllib.error, urllib.request
request = urllib.request.Request("http://localhost:8000/v2/logging", data=sys.argv[1].encode())
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        sys.exit(f"accepted with {answer.status}: {answer.read()[:200]!r}")
except urllib.error.HTTPError as error:
    print(error.code, error.read()[:200])
"""


def _refused(name: str, body: str) -> ScriptRun:
    return ScriptRun(name, ("-c", REFUSED, body))


def logging() -> list[Scenario]:
    """L0_logging: the settings GET /v2/logging reports for each log flag, the updates it
    accepts or refuses, and its logging_endpoint_test."""
    log_file = "--log-file={cwd}/log_file.log"
    cwd_file = "log_file.log"
    refusals: list[Step] = []
    for param in ("log_info", "log_warning", "log_error"):
        refusals += [
            _refused(f"{param}_integer", f'{{"{param}":1}}'),
            _refused(f"{param}_upper_case", f'{{"{param}":False}}'),
            _refused(f"{param}_string", f'{{"{param}":"false"}}'),
            _post(f"{param}_bool", f'{{"{param}":true}}'),
        ]
    refusals += [
        _refused("verbose_negative", '{"log_verbose_level":-1}'),
        _refused("verbose_string", '{"log_verbose_level":"1"}'),
        _post("verbose_zero", '{"log_verbose_level":0}'),
    ]
    return [
        _logging("default", [], [_verify("settings", "", "true", "true", "true", "0", "default")]),
        _logging(
            "log_file",
            [log_file],
            [_verify("settings", cwd_file, "true", "true", "true", "0", "default")],
            (  # everything goes to the file, nothing to the console
                LogCheck("console_quiet", LOG_LINE, exactly=0),
                _in_file("file_lines", LOG_LINE, at_least=10),
            ),
        ),
        _logging(
            "log_file_not_updatable",
            [log_file, "--log-verbose=1"],
            [
                _post("update_log_file", '{"log_file":"other_log.log"}', 501),
                _verify("settings", cwd_file, "true", "true", "true", "1", "default"),
            ],
        ),
        _logging(
            "log_info",
            [log_file, "--log-info=false", "--log-verbose=1"],
            [
                _verify("settings", cwd_file, "false", "true", "true", "1", "default"),
                _post("enable_info", '{"log_info":true}'),
                _verify("settings_after", cwd_file, "true", "true", "true", "1", "default"),
            ],
            (  # no info line at startup; info again at shutdown once switched on
                _in_file("no_startup_info", "Started HTTPService at", exactly=0),
                _in_file("shutdown_info", "Waiting for in-flight requests to complete", exactly=1),
            ),
        ),
        _logging(
            "log_warning",
            ["--log-warning=false"],
            [_verify("settings", "", "true", "false", "true", "0", "default")],
        ),
        _logging(
            "log_error",
            ["--log-error=false"],
            [_verify("settings", "", "true", "true", "false", "0", "default")],
        ),
        _logging(
            "log_verbose",
            [log_file, "--log-verbose=1"],
            [
                _verify("settings", cwd_file, "true", "true", "true", "1", "default"),
                _post("verbose_off", '{"log_verbose_level":0}'),
                _verify("settings_after", cwd_file, "true", "true", "true", "0", "default"),
            ],
            # verbose lines for the first GET and the POST, none for the GET after it
            (_in_file("verbose_requests", "/v2/logging", exactly=2),),
        ),
        _logging(
            "log_format",
            [log_file, "--log-verbose=1", "--log-format=ISO8601"],
            [
                _verify("settings", cwd_file, "true", "true", "true", "1", "ISO8601"),
                _post("format_default", '{"log_format":"default"}'),
                _verify("settings_after", cwd_file, "true", "true", "true", "1", "default"),
            ],
            (
                _in_file("iso8601_first", r"\A\d{4}-\d\d-\d\dT", exactly=1),
                _in_file("default_last", r"^[IWEV]\d{4} [^\n]*\n?\Z", exactly=1),
            ),
        ),
        _logging("invalid_updates", ["--log-warn=false"], refusals),
        _logging(
            "logging_endpoint_test",
            [],
            [PytestRun("logging_endpoint_test.py", runner="unittest")],
        ),
    ]


# --- L0_model_update -----------------------------------------------------------------------
def _model_init_del(qa: Path, repo: Path) -> None:
    """test.sh's setup_models: python_models/model_init_del with model.py in version 1 and
    util.py beside the config (the test imports it from models/)."""
    folder = repo / "model_init_del"
    shutil.copytree(qa / "python_models" / "model_init_del", folder)
    (folder / "1").mkdir()
    shutil.move(folder / "model.py", folder / "1" / "model.py")
    # test.sh's PYTHONDONTWRITEBYTECODE keeps Triton's stub from writing __pycache__ into the
    # model (a changed model folder: every update would become a full reload); the stub of
    # the Triton 2.51 wheel here writes it all the same, so the layout has it already
    compileall.compile_dir(folder, quiet=1)


# instance_update_test's tests; those of --rate-limit resources only where they do not skip
MODEL_UPDATE_TESTS = (
    "test_add_rm_add_instance_no_batching",
    "test_add_rm_add_instance_with_batching",
    "test_rm_add_rm_instance_no_batching",
    "test_rm_add_rm_instance_with_batching",
    "test_rm_instance_to_zero",
    "test_cpu_instance_update",
    "test_gpu_instance_update",
    "test_gpu_cpu_instance_update",
    "test_instance_name_update",
    "test_instance_signature",
    "test_invalid_config",
    "test_model_file_update",
    "test_non_instance_config_update",
    "test_load_api_with_config",
    "test_update_while_inferencing",
    "test_infer_while_updating",
    "test_direct_scheduler_update_no_ongoing_sequences",
    "test_direct_scheduler_update_with_ongoing_sequences",
    "test_oldest_scheduler_update_no_ongoing_sequences",
    "test_oldest_scheduler_update_with_ongoing_sequences",
)
RATE_LIMITED_UPDATE_TESTS = ("test_instance_resource_increase", "test_instance_resource_decrease")
EXPLICIT_RESOURCE_UPDATE_TESTS = ("test_instance_resource_increase_above_explicit",)


def model_update() -> list[Scenario]:
    """L0_model_update's instance_update_test, once per --rate-limit mode, each test on a
    server of its own (test.sh runs the file on one; here a server that dies in one test,
    as Triton 2.51 does now and then, fails only that test)."""
    found = []
    for mode, flags, extra in (
        ("off", ["--rate-limit=off"], ()),
        ("execution_count", ["--rate-limit=execution_count"], RATE_LIMITED_UPDATE_TESTS),
        (
            "execution_count_with_explicit_resource",
            ["--rate-limit=execution_count", "--rate-limit-resource=R1:10"],
            RATE_LIMITED_UPDATE_TESTS + EXPLICIT_RESOURCE_UPDATE_TESTS,
        ),
    ):
        for test in (*MODEL_UPDATE_TESTS, *extra):
            found.append(
                Scenario(
                    f"L0_model_update/{mode}/{test}",
                    "L0_model_update",
                    _model_init_del,
                    [
                        PytestRun(
                            f"instance_update_test.py::TestInstanceUpdate::{test}",
                            runner="unittest",
                        )
                    ],
                    flags=["--model-control-mode=explicit", *flags, "--log-verbose=2"],
                    log_checks=[LogCheck("should_not_print", "Should not print this", exactly=0)],
                    # test.sh exports PYTHONDONTWRITEBYTECODE: without it Triton's stub writes
                    # a __pycache__ into version 1 and every update becomes a full reload
                    env={
                        "RATE_LIMIT_MODE": mode,
                        "MODEL_LOG_DIR": "{cwd}",
                        "PYTHONDONTWRITEBYTECODE": "True",
                    },
                    server_log=f"instance_update_test.rate_limit_{mode}.server.log",
                    verbose=False,
                    heavy=True,  # see NOT_APPLICABLE
                )
            )
    return found


# --- L0_model_namespacing ------------------------------------------------------------------
NAMESPACING_TESTS = (
    "test_duplication",
    "test_dynamic_resolution",
    "test_ensemble_duplication",
    "test_no_duplication",
)


def _namespacing_test_dir(test: str) -> Layout:
    """``cp -r <test> test_dir`` (each model with a version folder)."""

    def lay(qa: Path, repo: Path) -> None:
        test_dir = repo.parent
        shutil.rmtree(test_dir, ignore_errors=True)
        shutil.copytree(qa / "L0_model_namespacing" / test, test_dir)
        for model_dir in test_dir.glob("*/*"):
            (model_dir / "1").mkdir(exist_ok=True)

    return lay


def model_namespacing() -> list[Scenario]:
    """L0_model_namespacing: two repositories with --model-namespacing=true, each test once
    with polling (every 2 s) and once with explicit model control."""
    found = []
    for suite, control in (
        ("ModelNamespacePoll", ["--model-control-mode=POLL", "--repository-poll-secs=2"]),
        ("ModelNamespaceExplicit", ["--model-control-mode=EXPLICIT"]),
    ):
        for test in NAMESPACING_TESTS:
            found.append(
                Scenario(
                    f"L0_model_namespacing/{suite}.{test}",
                    "L0_model_namespacing",
                    _namespacing_test_dir(test),
                    [PytestRun(f"test.py::{suite}::{test}", runner="unittest")],
                    flags=[
                        "--model-namespacing=true",
                        "--model-repository={cwd}/test_dir/subadd_repo",
                        *control,
                    ],
                    repo_dir="test_dir/addsub_repo",
                    env={
                        "TRITON_QA_ROOT_DIR": "{qa}",
                        "TRITON_QA_PYTHON_MODEL_DIR": "{cwd}",
                        "NAMESPACE_TESTING_DIRCTORY": "{cwd}/test_dir",
                    },
                    verbose=False,
                )
            )
    return found


def scenarios() -> list[Scenario]:
    return [*response_cache(), *metrics(), *logging(), *model_update(), *model_namespacing()]
