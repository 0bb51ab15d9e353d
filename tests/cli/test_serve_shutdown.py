"""Stopping `repokit serve` as tritonserver stops: SIGTERM under load answers every request it
accepted, Ctrl-C reaches no instance process, a hung model cannot hold the server past
--exit-timeout-secs, and the log says each step."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from repokit.core.service import SCHEDULER_STOPPED
from tests.cli.serve_process import PORT_FLAGS, ServeProcess, write_model

# tritonserver 2.51's countdown while the models unload (server.cc, InferenceServer::Stop)
_LIVE = re.compile(
    r'"Timeout (\d+): Found (\d+) live models and (\d+) in-flight non-inference requests"'
)


@dataclass
class Outcomes:
    answered: int = 0  # the real answer came back
    answered_after_signal: int = 0
    refused: list[str] = field(default_factory=list)  # not accepted (the allowed failures)
    wrong: list[str] = field(default_factory=list)  # anything else: the test fails
    lock: threading.Lock = field(default_factory=threading.Lock)


def _http_client(address: str, seed: int, out: Outcomes, signalled: threading.Event) -> None:
    host, port = address.split(":")
    connection: http.client.HTTPConnection | None = None
    for i in range(100_000):
        x = [float(seed * 100_000 + i), 1.5]
        body = json.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": x}]}
        )
        after = signalled.is_set()
        try:
            if connection is None:
                connection = http.client.HTTPConnection(host, int(port), timeout=60)
            connection.request("POST", "/v2/models/slow_double/infer", body)
            response = connection.getresponse()
            status, text = response.status, response.read().decode()
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            with out.lock:
                out.refused.append(f"http connection: {exc!r}")
            if signalled.is_set():
                return
            connection = None
            continue
        with out.lock:
            if status == 200 and json.loads(text)["outputs"][0]["data"] == [2 * v for v in x]:
                out.answered += 1
                out.answered_after_signal += signalled.is_set() and not after
                if signalled.is_set():
                    # as a client told the server is going (a load balancer draining it):
                    # the stop waits for open HTTP connections, as tritonserver's does
                    connection.close()
                    return
            elif status == 503 and SCHEDULER_STOPPED in text and signalled.is_set():
                out.refused.append(text)
                return
            else:
                out.wrong.append(f"http {status}: {text}")
                return


def _grpc_client(address: str, seed: int, out: Outcomes, signalled: threading.Event) -> None:
    client = grpcclient.InferenceServerClient(address)
    for i in range(100_000):
        x = np.array([seed * 100_000 + i, 2.5], dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT0", [2], "FP32")
        tensor.set_data_from_numpy(x)
        after = signalled.is_set()
        try:
            result = client.infer("slow_double", [tensor], client_timeout=60)
        except InferenceServerException as exc:
            with out.lock:
                if signalled.is_set() and exc.status() == "StatusCode.UNAVAILABLE":
                    out.refused.append(f"grpc: {exc}")
                else:
                    out.wrong.append(f"grpc: {exc.status()} {exc}")
            return
        with out.lock:
            if np.array_equal(result.as_numpy("OUTPUT0"), 2 * x):
                out.answered += 1
                out.answered_after_signal += signalled.is_set() and not after
            else:
                out.wrong.append(f"grpc: wrong answer {result.as_numpy('OUTPUT0')}")
                return


def _slow_double_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_model(repo, "slow_double", "time.sleep(0.2)\ny = x * 2", count=2)
    return repo


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c", "sigterm-group"])
def test_shutdown_under_load_answers_every_accepted_request(tmp_path: Path, how: str) -> None:
    server = ServeProcess(
        str(_slow_double_repo(tmp_path)), *PORT_FLAGS, new_session=how != "sigterm"
    )
    try:
        out = Outcomes()
        signalled = threading.Event()
        clients = [
            threading.Thread(
                target=_http_client, args=(server.url("HTTPService"), n, out, signalled)
            )
            for n in range(3)
        ] + [
            threading.Thread(
                target=_grpc_client,
                args=(server.url("GRPCInferenceService"), 10 + n, out, signalled),
            )
            for n in range(3)
        ]
        for thread in clients:
            thread.start()
        # under load: every client has a request in flight most of the time
        server.wait_for(lambda: out.answered >= 12, 60)
        signalled.set()
        if how == "sigterm":
            server.process.send_signal(signal.SIGTERM)
        elif how == "ctrl-c":  # a terminal's Ctrl-C reaches every process of the foreground group
            server.signal_group(signal.SIGINT)
        else:  # systemd and Triton's qa kill_server signal the whole process group
            server.signal_group(signal.SIGTERM)
        code = server.wait(timeout=60)
        for thread in clients:
            thread.join(timeout=60)
    finally:
        server.kill()
    log = server.text
    assert code == 0, log
    assert out.wrong == [], out.wrong
    assert out.answered >= 12
    assert out.answered_after_signal >= 1  # requests in flight at the signal got answers
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    number = 2 if how == "ctrl-c" else 15
    steps = [
        f"Signal ({number}) received.",
        '"Waiting for in-flight requests to complete."',
        '"All models are stopped, unloading models"',
        "\"successfully unloaded 'slow_double' version 1\"",
    ]
    positions = [log.find(step) for step in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), log
    assert log.count('"slow_double finalize ran"') == 2  # each instance ran finalize
    assert "is not healthy" not in log


def test_hung_model_cannot_hold_the_server_past_the_exit_timeout(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_model(
        repo,
        "hangs",
        'pb_utils.Logger.log_info("hang started")\ntime.sleep(3600)\ny = x',
        count=1,
    )
    server = ServeProcess(str(repo), *PORT_FLAGS, "--exit-timeout-secs", "2")
    answers: list[str] = []

    def call() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.ports["HTTPService"])
        body = '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[1]}]}'
        try:
            connection.request("POST", "/v2/models/hangs/infer", body)
            response = connection.getresponse()
            answers.append(f"{response.status} {response.read().decode()}")
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            answers.append(repr(exc))

    client = threading.Thread(target=call)
    try:
        client.start()
        assert server.wait_for_line('"hang started"', 60), server.text
        server.process.send_signal(signal.SIGTERM)
        # the bug: not exited 120 s after SIGTERM; a bound far above the 2 s timeout
        code = server.wait(timeout=60)
        client.join(timeout=30)
    finally:
        server.kill()
    log = server.text
    assert code == 1, log  # as tritonserver: the exit timeout expired with requests in flight
    assert "Exit timeout expired. Exiting immediately." in log
    # tritonserver names each model with requests in flight (qa/L0_lifecycle greps the line)
    assert "\"Model 'hangs' (version 1) has 1 in-flight inferences\"" in log, log
    assert "\"successfully unloaded 'hangs' version 1\"" in log
    # the countdown had run out: one live-model line, and the failure said once
    assert [m.groups() for m in _LIVE.finditer(log)] == [("0", "1", "0")], log
    assert log.count("Exit timeout expired") == 1, log
    assert not client.is_alive()
    assert len(answers) == 1 and not answers[0].startswith("200"), answers
    assert "Traceback" not in log, log


def test_grpc_serves_until_the_models_are_unloaded(tmp_path: Path) -> None:
    """tritonserver 2.51 stops its gRPC endpoint after the server has stopped (main.cc): while
    a request still runs after SIGTERM, a new gRPC client connects and its request reaches the
    model's scheduler, which refuses it in Triton's words (qa/L0_lifecycle's shutdown tests
    assert them); the running request is answered. Before, gRPC closed at the signal and the
    client could not connect. (A request held over HTTP would keep the HTTP stop waiting for
    its connection first, as tritonserver's does.)"""
    repo = tmp_path / "models"
    write_model(
        repo, "held", 'pb_utils.Logger.log_info("held started")\ntime.sleep(6)\ny = x', count=1
    )
    server = ServeProcess(str(repo), *PORT_FLAGS, "--exit-timeout-secs", "30")
    answers: list[str] = []

    tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))

    def call() -> None:
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.ports['GRPCInferenceService']}")
        result = grpc.infer("held", [tensor], client_timeout=60)
        answers.append(str(result.as_numpy("OUTPUT0").tolist()))
        grpc.close()

    client = threading.Thread(target=call)
    try:
        client.start()
        assert server.wait_for_line('"held started"', 60), server.text
        server.process.send_signal(signal.SIGTERM)
        assert server.wait_for_line('"Waiting for in-flight requests to complete."', 30)
        late = grpcclient.InferenceServerClient(f"127.0.0.1:{server.ports['GRPCInferenceService']}")
        with pytest.raises(InferenceServerException) as refused:
            late.infer("held", [tensor], request_id="late", client_timeout=30)
        late.close()
        code = server.wait(timeout=60)
        client.join(timeout=30)
    finally:
        server.kill()
    log = server.text
    assert refused.value.status() == "StatusCode.UNAVAILABLE", refused.value
    assert refused.value.message() == f"[request id: late] {SCHEDULER_STOPPED}", log
    assert log.index("held finalize ran") > log.index("Found 1 model versions"), log  # in time
    assert code == 0, log
    assert answers == ["[1.0]"], answers


def _stopped(repo: Path, *flags: str) -> tuple[int, str]:
    """``repokit serve repo`` started with ``flags`` and sent SIGTERM once ready: its exit
    status and log."""
    server = ServeProcess(str(repo), *PORT_FLAGS, *flags)
    try:
        server.process.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    finally:
        server.kill()
    return code, server.text


def test_the_countdown_goes_on_while_the_models_unload(tmp_path: Path) -> None:
    """As tritonserver 2.51's InferenceServer::Stop (server.cc): once the models are asked to
    unload, "Timeout N: Found M live models and K in-flight non-inference requests" with the
    same N as the last in-flight count, each live version's state at --log-verbose 1, then
    once a second, one less each time, until no model is live."""
    repo = tmp_path / "models"
    write_model(repo, "double", "y = 2 * x", count=1)
    write_model(repo, "triple", "y = 3 * x", count=1)
    code, log = _stopped(repo, "--log-verbose=1")
    assert code == 0, log
    drained = re.findall(r'"Timeout (\d+): Found 0 model versions that have in-flight', log)
    counts = [(m.start(), *map(int, m.groups())) for m in _LIVE.finditer(log)]
    assert drained and counts, log
    stopped = log.find('"All models are stopped, unloading models"')
    first, last = counts[0][0], counts[-1][0]
    assert 0 <= stopped < first, log
    # Triton's exit_timeout_iters: the unload goes on with the drain's number, then counts down
    assert [n for _, n, _, _ in counts] == list(
        range(int(drained[-1]), int(drained[-1]) - len(counts), -1)
    ), log
    assert counts[0][2:] == (2, 0) and counts[-1][2:] == (0, 0), log
    assert all(live > 0 for _, _, live, _ in counts[:-1]), log
    for line in ('"double v1: UNLOADING"', '"triple v1: UNLOADING"'):
        assert first < log.find(line) < last, log
    for name in ("double", "triple"):
        assert first < log.find(f"\"successfully unloaded '{name}' version 1\"") < last, log


def test_models_still_live_at_the_exit_timeout_fail_the_stop(tmp_path: Path) -> None:
    """tritonserver 2.51 with --exit-timeout-secs=0: "Timeout 0: Found 1 live models and 0
    in-flight non-inference requests", then "failed to stop server: Internal - Exit timeout
    expired. Exiting immediately." and exit status 1; repokit still stops the model."""
    repo = tmp_path / "models"
    write_model(repo, "double", "y = 2 * x", count=1)
    code, log = _stopped(repo, "--exit-timeout-secs", "0")
    assert code == 1, log
    assert [m.groups() for m in _LIVE.finditer(log)] == [("0", "1", "0")], log
    steps = [
        '"All models are stopped, unloading models"',
        '"Timeout 0: Found 1 live models and 0 in-flight non-inference requests"',
        "\"successfully unloaded 'double' version 1\"",
        '"failed to stop server: Internal - Exit timeout expired. Exiting immediately."',
    ]
    positions = [log.find(step) for step in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), log
    assert log.count("Exit timeout expired") == 1, log
    assert "Traceback" not in log, log


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_server_when_nobody_reads_its_output(
    tmp_path: Path, how: signal.Signals
) -> None:
    # `repokit serve 2>&1 | head`, or a log collector that went away: writing "Signal (N)
    # received." to the closed pipe raised in the signal handler and the server never stopped
    repo = tmp_path / "models"
    write_model(repo, "double", "y = 2 * x", count=1)
    process = subprocess.Popen(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", "--http-address", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        for line in process.stdout:  # until the server says it serves, then read no more
            if b"Started HTTPService" in line:
                break
        process.stdout.close()
        process.send_signal(how)
        code = process.wait(timeout=60)  # the bug: still running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 0


def _refuses_connections(port: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            probe = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            return True
        probe.close()
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_open_http_connections_are_served_until_their_clients_close_them(
    tmp_path: Path, workers: str
) -> None:
    """As tritonserver 2.51 stops (Triton's qa L0_lifecycle test_shutdown_with_live_connection):
    new connections are refused at once, a connection a client holds open is still answered,
    the log counts the open ones once a second, and the models stop once the last closes.
    With frontend workers, the worker holding the connection waits for it and the models
    serve it meanwhile."""
    repo = tmp_path / "models"
    write_model(repo, "double", "y = 2 * x", count=1)
    server = ServeProcess(str(repo), *PORT_FLAGS, "--workers", workers)
    port = server.ports["HTTPService"]
    body = '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"data":[4]}]}'
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/v2/models/double/infer", body)
        assert connection.getresponse().read()
        server.process.send_signal(signal.SIGINT)
        assert server.wait_for_line("HTTP service connections", 30), server.text
        # the port no longer accepts (with workers: once each has taken the signal; the line
        # above is the first worker's, so another may still be about to stop accepting)
        assert _refuses_connections(port, within_s=10.0)
        connection.request("POST", "/v2/models/double/infer", body)
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())["outputs"][0]["data"]) == (200, [8])
        assert server.process.poll() is None  # still waiting for the open connection
        connection.close()
        code = server.wait(timeout=60)
    finally:
        server.kill()
    log = server.text
    assert code == 0, log
    # each process counts its own connections: once per process, and the countdown goes on,
    # it does not restart. With workers, a worker the signal reached a moment later may count a
    # probe above that it accepted before (a connection it serves like any other), so the
    # count is per process.
    countdowns = re.findall(r"^I\S+ \S+ (\d+) \S+\] \"Timeout 30: Found (\d+) HTTP", log, re.M)
    pids = [pid for pid, _ in countdowns]
    assert countdowns and len(pids) == len(set(pids)) <= int(workers), log
    assert ("1" in [found for _, found in countdowns]) and log.count("Timeout 30: ") == len(pids)
    steps = [
        "Found 1 HTTP service connections",
        '"Waiting for in-flight requests to complete."',
        "\"successfully unloaded 'double' version 1\"",
    ]
    positions = [log.find(step) for step in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), log
