"""`repokit serve` as a user runs it: a real process, its flags, its exit codes and signals."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repokit.paths import default_sample_repository, sample_repos_dir
from tests.tls_helpers import make_self_signed_cert

STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")


def _repo(tmp_path: Path, *models: str) -> Path:
    repo = tmp_path / "models"
    for name in models:
        shutil.copytree(default_sample_repository() / name, repo / name)
    return repo


class Served:
    def __init__(
        self, process: subprocess.Popen[str], ports: dict[str, int], lines: list[str]
    ) -> None:
        self.process = process
        self.ports = ports
        self.lines = lines  # the output until the last service started


def _start(*args: str, timeout: float = 60.0, services: int = 3) -> Served:
    env = {**os.environ, "COLUMNS": "200"}
    process = subprocess.Popen(
        [sys.executable, "-m", "repokit", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    ports: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline and len(ports) < services:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = STARTED.search(line)
        if match:
            ports[match.group(1)] = int(match.group(3))
    if len(ports) < services:
        process.kill()
        pytest.fail("server did not start:\n" + "".join(lines))
    return Served(process, ports, lines)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = _start(
        str(_repo(tmp_path, "add_sub")), "--http-port", "0", "--grpc-port", "0",
        "--metrics-port", "0", "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
    )  # fmt: skip
    yield s
    if s.process.poll() is None:
        s.process.kill()
        s.process.wait()


def test_serves_http_grpc_metrics_and_exits_0_on_sigterm(served: Served) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    http = httpclient.InferenceServerClient(f"127.0.0.1:{served.ports['HTTPService']}")
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = http.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{served.ports['GRPCInferenceService']}")
    assert grpc.is_server_ready()
    http.close()  # as tritonserver, the server waits for clients' open HTTP connections
    grpc.close()
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=30) == 0


def test_sigint_also_exits_0(served: Served) -> None:
    served.process.send_signal(signal.SIGINT)
    assert served.process.wait(timeout=30) == 0


def test_a_bad_http_address_is_ignored_when_http_is_disabled(tmp_path: Path) -> None:
    """qa/L0_socket: tritonserver starts with ``--http-address -47 --allow-http 0``. The metrics
    default to the HTTP address, which names no host: they listen on 0.0.0.0 (a warning)."""
    s = _start(
        str(_repo(tmp_path, "add_sub")), "--http-address", "-47", "--allow-http", "0",
        "--grpc-port", "0", "--metrics-port", "0", "--grpc-address", "127.0.0.1",
        services=2,
    )  # fmt: skip
    try:
        assert "HTTPService" not in s.ports
        assert "--http-address '-47' is not an address and HTTP is disabled" in "".join(s.lines)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{s.ports['Metrics Service']}/metrics")
        assert b"nv_inference_count" in metrics.read()
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{s.ports['GRPCInferenceService']}")
        assert grpc.is_server_ready()
        grpc.close()
        s.process.send_signal(signal.SIGTERM)
        assert s.process.wait(timeout=30) == 0
    finally:
        if s.process.poll() is None:
            s.process.kill()
            s.process.wait()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--http-address", "-47"], "failed to start HTTP service at -47:0: "),
        (
            ["--allow-http", "0", "--metrics-address", "-48"],
            "failed to start Metrics service at -48:0: ",
        ),
    ],
)
def test_an_address_that_names_no_host_stops_the_start(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(_repo(tmp_path, "add_sub")),
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 1
    assert f"error: creating server: {message}" in result.stderr


def test_grpc_tls_flags(tmp_path: Path) -> None:
    key, cert = make_self_signed_cert(tmp_path)
    s = _start(
        str(_repo(tmp_path, "add_sub")), "--http-port", "0", "--grpc-port", "0",
        "--metrics-port", "0", "--grpc-use-ssl=true", "--grpc-server-cert", str(cert),
        "--grpc-server-key", str(key), "--grpc-infer-response-compression-level", "low",
    )  # fmt: skip
    try:
        client = grpcclient.InferenceServerClient(
            f"localhost:{s.ports['GRPCInferenceService']}", ssl=True, root_certificates=str(cert)
        )
        assert client.is_server_live()
    finally:
        s.process.send_signal(signal.SIGTERM)
        assert s.process.wait(timeout=30) == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grpc-infer-response-compression-level", "max"], "none, low, medium or high"),
        (["--grpc-use-ssl=true"], "--grpc-server-cert and --grpc-server-key"),
        (["--allow-client-shm", "maybe"], "expects true or false"),
        (["--strict-readiness=no"], "invalid value for bool option: no"),  # as tritonserver
        (["--log-verbose=loud"], "--log-verbose expects a level (0, 1, 2 ...) or true/false"),
        (["--log-verbose=-1"], "--log-verbose must not be negative"),
        (["--exit-on-error", "yes"], "invalid value for bool option: yes"),
        (
            ["--load-model=*"],
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well.",
        ),
        (
            ["--model-control-mode=poll", "--load-model=add_sub"],
            "requires setting '--model-control-mode=explicit'",
        ),
        (["--http-max-input-size", "0"], "must be greater than 0"),
        # the repositories of Triton's docs in cloud storage, named whole (not s3:/bucket)
        (
            ["--model-repository=s3://bucket/path/to/model/repository"],
            "model repository 's3://bucket/path/to/model/repository' is in cloud storage",
        ),
        (["--model-repository=gs://bucket/models"], "'gs://bucket/models' is in cloud storage"),
    ],
)
def test_bad_flags_exit_2_with_a_message(tmp_path: Path, flags: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(_repo(tmp_path, "add_sub")), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2
    assert message in re.sub(r"\s+", " ", result.stdout + result.stderr)


def test_missing_repository_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2
    assert "is not a directory" in re.sub(r"\s+", " ", result.stdout + result.stderr)


def test_model_failing_at_startup_exits_1(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: -1"))
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 1
    # as tritonserver: the log (with the model table) and the error go to stderr
    assert "error: creating server: Internal - failed to load all models" in result.stderr
    assert "'max_batch_size' must be non-negative" in result.stderr
    assert re.search(
        r"\| add_sub +\|[^|]*\| UNAVAILABLE: .*'max_batch_size' must be non-neg", result.stderr
    )


def _taken_ports() -> list[socket.socket]:
    """Three bound loopback ports: a server that tried to listen on one would fail on it."""
    taken = []
    for _ in range(3):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        taken.append(sock)
    return taken


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "error: creating server: Internal - failed to load all models"),
        (
            ["--model-control-mode=explicit", "--load-model=add_sub"],
            "error: creating server: Invalid argument - load failed for model 'add_sub'",
        ),
        (["--model-control-mode=poll"], "Internal - failed to load all models"),
    ],
)
def test_a_failed_startup_load_exits_before_any_port_opens(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    repo = _repo(tmp_path, "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: -1"))
    taken = _taken_ports()
    ports = [str(sock.getsockname()[1]) for sock in taken]
    try:
        result = subprocess.run(
            [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", ports[0],
             "--grpc-port", ports[1], "--metrics-port", ports[2], *flags],
            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
    finally:
        for sock in taken:
            sock.close()
    output = re.sub(r"\s+", " ", result.stdout + result.stderr)
    assert result.returncode == 1
    assert message in output
    assert "'max_batch_size' must be non-negative" in output
    assert "Started" not in output and "Errno" not in output  # no port was bound


def test_a_load_model_in_no_repository_stops_the_start_as_tritonserver(tmp_path: Path) -> None:
    """tritonserver 2.51 logs the name it cannot find, loads the other --load-model names,
    then exits 1 with 'failed to load all models' (--exit-on-error) before opening a port."""
    repo = _repo(tmp_path, "add_sub")
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--model-control-mode=explicit",
         "--load-model=nosuch", "--load-model=add_sub"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        "failed to poll model 'nosuch': model not found in any model repository." in result.stderr
    )
    assert "successfully loaded 'add_sub'" in result.stderr  # the others load all the same
    assert "error: creating server: Internal - failed to load all models" in result.stderr
    assert "Started" not in result.stderr + result.stdout


def test_without_exit_on_error_a_missing_load_model_is_logged_and_the_rest_served(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path, "add_sub", "identity")
    s = _start(
        str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--model-control-mode=explicit", "--load-model=nosuch", "--load-model=add_sub",
        "--exit-on-error=false",
    )  # fmt: skip
    try:
        seen = "".join(s.lines)
        assert "failed to poll model 'nosuch': model not found" in seen
        # the options table lists the --load-model names as tritonserver's (a sorted set)
        assert re.search(r"\| startup_models_0 +\| add_sub +\|", seen)
        assert re.search(r"\| startup_models_1 +\| nosuch +\|", seen)
        # the models table has the models something tried to load, not 'identity'
        assert re.search(r"\| add_sub +\| 1 +\| READY +\|", seen)
        assert "| identity" not in seen
        client = httpclient.InferenceServerClient(f"127.0.0.1:{s.ports['HTTPService']}")
        assert client.is_model_ready("add_sub")
        assert not client.is_model_ready("nosuch")
        client.close()  # as tritonserver, the server waits for open HTTP connections
    finally:
        s.process.send_signal(signal.SIGINT)
        s.process.communicate(timeout=30)
    assert s.process.returncode == 0


def test_an_explicit_load_failing_per_version_names_the_version_as_tritonserver(
    tmp_path: Path,
) -> None:
    """tritonserver 2.51: 'error: creating server: Invalid argument - load failed for model
    'm': version 1 is at UNAVAILABLE state: Invalid argument: <reason>;'."""
    repo = _repo(tmp_path, "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 16 ]", "dims: [ 0 ]", 1))
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--model-control-mode=explicit",
         "--load-model=add_sub"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        "error: creating server: Invalid argument - load failed for model 'add_sub': "
        "version 1 is at UNAVAILABLE state: Invalid argument: model input 'INPUT0' dimension "
        "must be integer >= 1"
    ) in result.stderr


def test_an_explicit_load_of_an_ensemble_refused_against_its_steps_stops_the_start(
    tmp_path: Path,
) -> None:
    """tritonserver 2.51: 'error: creating server: Invalid argument - load failed for model
    'E': in ensemble E, ensemble tensor E_IN: inconsistent data type: ...' (no version)."""
    case = sample_repos_dir() / "invalid" / "ensemble-tensor-datatype-mismatch"
    repo = tmp_path / "models"
    shutil.copytree(case, repo, ignore=shutil.ignore_patterns("expected.json"))
    ensemble = "ensemble-tensor-datatype-mismatch-ens"
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--model-control-mode=explicit",
         f"--load-model={ensemble}"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        f"error: creating server: Invalid argument - load failed for model '{ensemble}': in "
        f"ensemble {ensemble}, ensemble tensor E_IN: inconsistent data type: TYPE_FP32 is "
        f"inferred from model {ensemble} while TYPE_INT32 is inferred from model "
        "ensemble-tensor-datatype-mismatch-add"
    ) in result.stderr
    assert "Traceback" not in result.stderr


def test_exit_on_error_false_serves_the_other_models(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "add_sub")
    shutil.copytree(repo / "add_sub", repo / "broken")
    config = repo / "broken" / "config.pbtxt"
    text = config.read_text().replace("max_batch_size: 8", "max_batch_size: -1")
    config.write_text(text.replace('name: "add_sub"', 'name: "broken"'))
    process = subprocess.Popen(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--exit-on-error=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        seen = ""
        for line in process.stdout:
            seen += line
            if "Started HTTPService" in line:
                break
        assert "Started HTTPService" in seen and "broken" in seen
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
