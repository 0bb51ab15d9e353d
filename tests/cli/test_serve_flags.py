"""tritonserver's flags on `repokit serve`: a launch line written for tritonserver runs
unchanged, the log flags shape the log as Triton's do, and bad values are refused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cli.serve_process import PORT_FLAGS, ServeProcess, write_model

ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [IWE] \d+ [\w.]+:\d+\] ")
LOGGING_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.say("Initialize")

    def say(self, when):
        logger = pb_utils.Logger
        logger.log(f"{when}-Specific Msg!", logger.INFO)
        logger.log(f"{when}-Default Msg!")
        logger.log_info(f"{when}-Info Msg!")
        logger.log_warn(f"{when}-Warning Msg!")
        logger.log_error(f"{when}-Error Msg!")
        logger.log_verbose(f"{when}-Verbose Msg!")

    def execute(self, requests):
        self.say("Execute")
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses

    def finalize(self):
        self.say("Finalize")
"""
INFER_BODY = '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1,2]}]}'


def _logging_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_model(repo, "logs", "y = x", count=1)
    (repo / "logs" / "1" / "model.py").write_text(LOGGING_MODEL)
    return repo


def _post(address: str, path: str, body: str) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{address}{path}", data=body.encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _run_once(server: ServeProcess, before: str = "") -> str:
    """Infer once (after POSTing ``before`` to /v2/logging), stop, return the log."""
    address = server.url("HTTPService")
    try:
        if before:
            assert _post(address, "/v2/logging", before)[0] == 200
        status, text = _post(address, "/v2/models/logs/infer", INFER_BODY)
        assert status == 200, text
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        server.kill()
    return server.text


def _count(log: str, message: str) -> int:
    return sum(1 for line in log.splitlines() if f'] "{message}"' in line)


def test_model_logs_at_default_settings_reach_the_server_log(tmp_path: Path) -> None:
    """Triton's qa/L0_backend_python/logging: INFO (and log() at its default level),
    WARNING and ERROR lines of initialize, execute and finalize; no verbose ones."""
    log = _run_once(ServeProcess(str(_logging_repo(tmp_path)), *PORT_FLAGS))
    for kind in ("Specific", "Default", "Info", "Warning", "Error"):
        counts = [_count(log, f"{when}-{kind} Msg!") for when in ("Initialize", "Execute")]
        assert [*counts, _count(log, f"Finalize-{kind} Msg!")] == [1, 1, 1], log
    assert "Verbose Msg!" not in log
    line = next(x for x in log.splitlines() if "Execute-Warning Msg!" in x)
    assert re.match(r"^W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ model\.py:\d+\] ", line), line


def test_verbose_level_set_at_run_time_lets_model_verbose_lines_through(tmp_path: Path) -> None:
    server = ServeProcess(str(_logging_repo(tmp_path)), *PORT_FLAGS)
    log = _run_once(server, before='{"log_verbose_level": 1}')
    assert _count(log, "Initialize-Verbose Msg!") == 0  # logged before the change
    assert _count(log, "Execute-Verbose Msg!") == 1
    assert _count(log, "Finalize-Verbose Msg!") == 1
    line = next(x for x in log.splitlines() if "Execute-Verbose Msg!" in x)
    assert line.startswith("I")  # verbose lines print as I, as Triton's
    # the request itself at verbose level 1
    assert "completed: model logs version 1" in log


def test_log_levels_switched_off_at_run_time(tmp_path: Path) -> None:
    server = ServeProcess(str(_logging_repo(tmp_path)), *PORT_FLAGS)
    body = '{"log_info": false, "log_warning": false, "log_error": false}'
    log = _run_once(server, before=body)
    assert "Execute-" not in log and "Finalize-" not in log
    assert _count(log, "Initialize-Error Msg!") == 1


def test_a_tritonserver_launch_line_with_gpu_flags_runs_unchanged(tmp_path: Path) -> None:
    server = ServeProcess(
        f"--model-repository={_logging_repo(tmp_path)}",
        *PORT_FLAGS,
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,stub-timeout-seconds=10",
        "--cuda-memory-pool-byte-size=0:67108864",
        "--pinned-memory-pool-byte-size=268435456",
        "--host-policy=gpu0,numa-node=0",
        "--http-thread-count=8",
        "--allow-gpu-metrics=false",
        "--model-load-thread-count=2",
        "--model-load-retry-count=1",
        "--strict-model-config=false",
        "--log-verbose=1",
        "--log-format=ISO8601",
    )
    address = server.url("HTTPService")
    try:
        status, text = _post(address, "/v2/models/logs/infer", INFER_BODY)
        assert status == 200 and json.loads(text)["outputs"][0]["data"] == [1, 2]
        status, text = _post(address, "/v2/models/logs/infer", INFER_BODY.replace("FP32", "INT8"))
        assert status == 400, text
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        server.kill()
    log = server.text
    lines = [x for x in log.splitlines() if "] " in x and not x.startswith(("|", "+"))]
    assert lines and all(ISO_LINE.match(x) for x in lines), log
    for flag in (
        "--cuda-memory-pool-byte-size",
        "--pinned-memory-pool-byte-size",
        "--host-policy",
        "--http-thread-count",
        "--allow-gpu-metrics",
        "--backend-config python,shm-default-byte-size",
    ):
        assert log.count(f"{flag} has no effect on this server") == 1, flag
    assert "stub-timeout-seconds has no effect" not in log
    failed = [x for x in log.splitlines() if "Infer failed: " in x]  # the error, with its cause
    assert len(failed) == 1 and "INT8" in failed[0] and "'logs'" in failed[0], log
    assert "completed: model logs version 1" in log
    for table_head in ("| Model ", "| Option "):
        assert table_head in log


def test_metrics_flags(tmp_path: Path) -> None:
    server = ServeProcess(
        str(_logging_repo(tmp_path)),
        *PORT_FLAGS,
        "--allow-cpu-metrics=false",
        "--metrics-interval-ms=100",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
        "--metrics-config=counter_latencies=false",
        "--metrics-config=no_such_setting=1",
    )
    try:
        assert _post(server.url("HTTPService"), "/v2/models/logs/infer", INFER_BODY)[0] == 200
        address = server.url("Metrics Service")
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
            text = response.read().decode()
    finally:
        server.kill()
    assert "nv_cpu_utilization" not in text
    assert "nv_inference_request_duration_us" not in text
    assert 'nv_inference_request_summary_us_count{model="logs",version="1"} 1' in text
    quantiles = re.findall(r'nv_inference_queue_summary_us\{.*quantile="([\d.]+)"\}', text)
    assert quantiles == ["0.5", "0.99"]
    assert "--metrics-config no_such_setting has no effect on this server" in server.text


@pytest.mark.parametrize(
    "flags",
    [
        ["--cache-config", "local,size=1048576", "--cache-directory", "/opt/tritonserver/caches"],
        ["--cache-config=local,size=4096", "--cache-config=local,size=1048576"],
        ["--response-cache-byte-size=1048576"],
    ],
    ids=["spaced", "repeated", "deprecated"],
)
def test_cache_flags_enable_the_response_cache(tmp_path: Path, flags: list[str]) -> None:
    repo = _logging_repo(tmp_path)
    config = repo / "logs" / "config.pbtxt"
    config.write_text(config.read_text() + "response_cache { enable: true }\n")
    server = ServeProcess(str(repo), *PORT_FLAGS, *flags)
    try:
        address = server.url("HTTPService")
        for _ in range(2):
            assert _post(address, "/v2/models/logs/infer", INFER_BODY)[0] == 200
        with urllib.request.urlopen(f"http://{address}/v2/models/logs/stats", timeout=30) as r:
            stats = json.loads(r.read())["model_stats"][0]
    finally:
        server.kill()
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 1)
    assert stats["execution_count"] == 1
    assert re.search(r"\| cache_enabled +\| 1 +\|", server.text)
    deprecated = "'--response-cache-byte-size' has been deprecated!"
    assert (deprecated in server.text) == flags[0].startswith("--response-cache-byte-size")
    directory = "--cache-directory has no effect on this server: the local response cache"
    assert (directory in server.text) == ("--cache-directory" in flags)


def test_log_file_takes_the_log(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "repokit", "serve", str(_logging_repo(tmp_path)), *PORT_FLAGS,
         "--log-file", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            if path.exists() and "Started Metrics Service" in path.read_text():
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    text = path.read_text()
    assert '"Started HTTPService at 127.0.0.1:' in text
    assert '"Finalize-Info Msg!"' in text
    assert "Msg!" not in out + err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--log-format", "xml"], "invalid argument for --log-format, got: xml"),
        (["--log-info", "maybe"], "--log-info expects true or false"),
        (["--backend-config", "python,stub-timeout-seconds"], "--backend-config option format"),
        # qa/L0_backend_config: a leading comma, an empty value (global or per backend)
        (["--backend-config", ",default-max-batch-size=3"], "No backend specified. --backend-co"),
        (["--backend-config", "default-max-batch-size="], "--backend-config option format is"),
        (["--backend-config", "python,stub-timeout-seconds="], "--backend-config option format"),
        (["--backend-config", "python,=3"], "--backend-config option format is"),
        # qa/L0_custom_model_config: an empty name is refused, not taken as "no name"
        (["--model-config-name="], "empty argument for --model-config-name"),
        (["--model-load-thread-count", "0"], "--model-load-thread-count must be at least 1"),
        (["--no-such-flag", "1"], "No such option"),
        (["--metrics-config", "summary_latencies=maybe"], "summary_latencies expects true"),
        (["--metrics-config", "summary_latencies"], "--metrics-config option format"),
        (["--metrics-interval-ms", "0"], "--metrics-interval-ms must be greater than 0"),
        (["--trace-config", "level=LOUD"], "invalid value for trace level option: loud"),
        (["--trace-config", "zipkin,url=x"], "invalid value for trace mode option: zipkin"),
        (["--trace-rate", "often"], 'Bad option: "--trace-rate". Invalid option value'),
        (["--cache-config", "local"], "No cache specified. --cache-config option format"),
        (["--cache-config", "local,size"], "--cache-config option format is"),
        (["--cache-config", "local,size=abc"], "size 'abc' is not a number of bytes"),
        (["--cache-config", "local,size=10"], "a cache of 10 bytes is too small"),
        (["--cache-config", "redis,host=h"], "unable to find 'libtritoncache_redis.so'"),
        (
            ["--cache-config", "local,size=4096", "--response-cache-byte-size", "4096"],
            "Incompatible flags --response-cache-byte-size and --cache-config both provided",
        ),
        (["--response-cache-byte-size", "lots"], "invalid option value. Got lots"),
        # qa/L0_http and qa/L0_grpc test.sh: the server refuses to start with these messages
        (
            [
                "--http-restricted-api=model-repository,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            "restricted api 'health' can not be specified in multiple config groups",
        ),
        (
            ["--http-restricted-api=model-reposit,health:k1=v1"],
            "unknown restricted api 'model-reposit'",
        ),
        (
            [
                "--grpc-restricted-protocol=model-repository,health:k1=v1",
                "--grpc-restricted-protocol=metadata,health:k2=v2",
            ],
            "restricted protocol 'health' can not be specified in multiple config groups",
        ),
        (
            ["--grpc-restricted-protocol=model-reposit,health:k1=v1"],
            "unknown restricted protocol 'model-reposit'",
        ),
        (
            ["--http-restricted-api=health"],
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health",
        ),
        (
            ["--grpc-restricted-protocol=health:key"],
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'."
            " Got health:key",
        ),
        (
            ["--grpc-restricted-protocol=health:key="],
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'."
            " Got health:key=",
        ),
    ],
)
def test_bad_flag_values_exit_2(tmp_path: Path, flags: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(_logging_repo(tmp_path)), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2
    assert message in re.sub(r"\s+", " ", result.stdout + result.stderr)


def test_mode_flags_are_case_insensitive(tmp_path: Path) -> None:
    """tritonserver lowercases --model-control-mode and --rate-limit (L0_model_namespacing
    starts it with POLL and EXPLICIT)."""
    repo = _logging_repo(tmp_path)
    write_model(repo, "other", "y = x", count=1)
    server = ServeProcess(
        str(repo),
        *PORT_FLAGS,
        "--model-control-mode=EXPLICIT",
        "--load-model=logs",
        "--rate-limit=Execution_Count",
    )
    try:
        address = server.url("HTTPService")
        assert _post(address, "/v2/models/logs/infer", INFER_BODY)[0] == 200
        status, text = _post(address, "/v2/repository/index", '{"ready": true}')
    finally:
        server.kill()
    assert status == 200 and [m["name"] for m in json.loads(text)] == ["logs"], text
    assert re.search(r"\| model_control_mode +\| MODE_EXPLICIT +\|", server.text)
    assert re.search(r"\| rate_limit +\| EXEC_COUNT +\|", server.text)


def test_unambiguous_flag_prefixes_are_taken_as_tritonserver_takes_them(tmp_path: Path) -> None:
    """tritonserver's getopt_long accepts any unambiguous prefix of a long option
    (L0_logging starts it with --log-warn=false)."""
    server = ServeProcess(
        str(_logging_repo(tmp_path)), *PORT_FLAGS, "--log-warn=false", "--log-verb", "1"
    )
    try:
        with urllib.request.urlopen(
            f"http://{server.url('HTTPService')}/v2/logging", timeout=30
        ) as answer:
            settings = json.loads(answer.read())
    finally:
        server.kill()
    assert (settings["log_warning"], settings["log_verbose_level"]) == (False, 1)
    for flags, message in (
        (["--log=1"], "No such option: --log"),  # log-file, log-info, ...: ambiguous
        (["--log-warnings=false"], "No such option: --log-warnings"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "repokit", "serve", str(tmp_path / "models"), *flags],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert result.returncode == 2 and message in result.stdout + result.stderr, result


DEPRECATED_STRICT = (
    "Warning: '--strict-model-config' has been deprecated! Please use "
    "'--disable-auto-complete-config' instead."
)
OVERRIDDEN_STRICT = (
    "Warning: Overriding deprecated '--strict-model-config' from False to True in favor of "
    "'--disable-auto-complete-config'!"
)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--strict-model-config=true"], [DEPRECATED_STRICT]),
        (["--strict-model-config=false"], [DEPRECATED_STRICT]),
        (
            ["--disable-auto-complete-config", "--strict-model-config=false"],
            [DEPRECATED_STRICT, OVERRIDDEN_STRICT],
        ),
        (["--disable-auto-complete-config"], []),
    ],
    ids=["strict", "not-strict", "overridden", "replacement"],
)
def test_the_deprecated_strict_model_config_flag_is_warned_about(
    tmp_path: Path, flags: list[str], expected: list[str]
) -> None:
    # Triton's qa L0_model_config cli_messages: a repository whose one model cannot load, so
    # the server exits at once; the lines come on stderr before the log, as tritonserver's
    (tmp_path / "models" / "broken").mkdir(parents=True)
    run = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", f"--model-repository={tmp_path / 'models'}",
         *flags, *PORT_FLAGS],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("Warning: ")] == expected


@pytest.mark.parametrize("level", ["1", "true"])  # tritonserver 2.51 takes true as 1
def test_verbose_logging_names_each_http_request(tmp_path: Path, level: str) -> None:
    """tritonserver at --log-verbose 1 logs 'HTTP request: <method> <path>' for every request
    on the HTTP and metrics ports (libevhtp's method numbers: GET 0, POST 2); L0_logging
    counts them. Nothing is logged for them without verbose logging."""
    server = ServeProcess(str(_logging_repo(tmp_path)), *PORT_FLAGS, f"--log-verbose={level}")
    address = server.url("HTTPService")
    try:
        assert _post(address, "/v2/models/logs/infer", INFER_BODY)[0] == 200
        urllib.request.urlopen(f"http://{server.url('Metrics Service')}/metrics", timeout=30)
        assert _post(address, "/v2/logging", '{"log_verbose_level":0}')[0] == 200
        urllib.request.urlopen(f"http://{address}/v2/health/ready", timeout=30)
        assert server.wait_for_line("/v2/logging", 30)
    finally:
        server.kill()
    log = server.text
    assert _count(log, "HTTP request: 2 /v2/models/logs/infer") == 1, log
    assert _count(log, "HTTP request: 0 /metrics") == 1, log
    assert _count(log, "HTTP request: 2 /v2/logging") == 1, log  # logged before it applies
    assert "/v2/health/ready" not in log


def test_default_max_batch_size_is_not_called_inert() -> None:
    """onnxruntime's autofill uses default-max-batch-size (global or its own); a setting no
    backend here reads is still noted as having no effect."""
    from repokit.cli.serve_flags import backend_config_notes, parse_backend_config

    config = parse_backend_config(
        ["default-max-batch-size=6", "onnxruntime,default-max-batch-size=8", "tensorflow,x=1"]
    )
    assert backend_config_notes(config) == [
        "--backend-config tensorflow,x has no effect on this server"
    ]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        ([], "Adding default backend config setting: default-max-batch-size,4"),
        (["--backend-config=default-max-batch-size=6"], "Found overwritten default setting:"
         " default-max-batch-size,6"),
        (["--backend-config=default-max-batch-size=7",
          "--backend-config=python,default-max-batch-size=8"],
         "Found overwritten default setting: default-max-batch-size,8"),
    ],
)  # fmt: skip
def test_verbose_log_says_which_default_max_batch_size_a_model_gets(
    tmp_path: Path, flags: list[str], line: str
) -> None:
    """qa/L0_backend_config greps these lines of Triton's core (one per model load) and the
    "backend configuration:" JSON a backend logs with the settings it gets."""
    repo = tmp_path / "models"
    write_model(repo, "plain", "y = x", count=1)
    server = ServeProcess(str(repo), *PORT_FLAGS, "--log-verbose=1", "--backend-config=python,"
                          "stub-timeout-seconds=10", *flags)  # fmt: skip
    try:
        server.process.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
    finally:
        server.kill()
    assert _count(server.text, line) == 1, server.text
    found = re.search(r'"backend configuration:\\n(\{.*\})"$', server.text, re.MULTILINE)
    assert found, server.text
    cmdline = json.loads(found.group(1).replace('\\"', '"'))["cmdline"]
    assert cmdline["stub-timeout-seconds"] == "10"
    assert cmdline["auto-complete-config"] == "true"
    assert cmdline["default-max-batch-size"] == line.rsplit(",", 1)[1]
