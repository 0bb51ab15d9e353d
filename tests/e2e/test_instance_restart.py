"""A crashed python instance through a real server: the request that was at it fails with
Triton's text (500), the readiness endpoints and the repository index tell the truth while it
restarts, the next request is served by the new process; a model that keeps dying becomes
UNAVAILABLE with the reason."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.frontends.http.server_thread import running_server

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

# initialize records its pid; a restart (a second initialize) waits for the file "gate".
# INPUT0 = 1 segfaults, 3 hangs.
MODEL = """
import os, signal, time
from pathlib import Path
import triton_python_backend_utils as pb_utils

HERE = Path(__file__).parent


class TritonPythonModel:
    def initialize(self, args):
        restart = (HERE / "inits").exists()
        with open(HERE / "inits", "a") as f:
            f.write(f"{os.getpid()}\\n")
        while restart and not (HERE / "gate").exists():
            time.sleep(0.01)

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x[0] == 1:
                os.kill(os.getpid(), signal.SIGSEGV)
            if x[0] == 3:
                time.sleep(600)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
"""


def repository(tmp_path: Path, name: str) -> Path:
    repo = tmp_path / "repo"
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    (repo / name / "1" / "model.py").write_text(MODEL)
    return repo


def call(base: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    method = "GET" if body is None and "index" not in path else "POST"
    req = urllib.request.Request(base + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def infer(base: str, model: str, value: float) -> tuple[int, Any]:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [value]}]}
    return call(base, f"/v2/models/{model}/infer", body)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait for a state change the test caused (no timing is asserted)."""
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


def index_entry(base: str, name: str) -> dict[str, Any]:
    status, entries = call(base, "/v2/repository/index")
    assert status == 200
    (entry,) = [e for e in entries if e["name"] == name]
    return dict(entry)


def test_a_killed_instance_restarts_and_readiness_tells_the_truth(tmp_path: Path) -> None:
    repo = repository(tmp_path, "crashy")
    inits = repo / "crashy" / "1" / "inits"
    with running_server(repo) as server:
        base = f"http://{server.http_url}"
        assert call(base, "/v2/models/crashy/ready")[0] == 200
        (pid,) = map(int, inits.read_text().split())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: len(inits.read_text().split()) == 2, "the restart begins")
        # the new process waits in initialize: not ready, and the index says why
        assert call(base, "/v2/models/crashy/ready")[0] == 400
        assert call(base, "/v2/health/ready")[0] == 400
        entry = index_entry(base, "crashy")
        assert entry["state"] == "LOADING"
        assert entry["reason"] == ("instance 'crashy_0_0' is restarting: killed by signal SIGKILL")
        (repo / "crashy" / "1" / "gate").touch()
        assert infer(base, "crashy", 7.0)[1]["outputs"][0]["data"] == [7.0]
        assert call(base, "/v2/models/crashy/ready")[0] == 200
        assert call(base, "/v2/health/ready")[0] == 200
        assert index_entry(base, "crashy") == {"name": "crashy", "version": "1", "state": "READY"}
        # a segfault in execute: Triton's error for the request that was there
        assert infer(base, "crashy", 1.0) == (
            500,
            {"error": "Stub process 'crashy_0_0' is not healthy."},
        )
        assert infer(base, "crashy", 2.0)[1]["outputs"][0]["data"] == [2.0]
        assert len(inits.read_text().split()) == 3


def test_a_model_that_keeps_dying_becomes_unavailable(tmp_path: Path) -> None:
    repo = repository(tmp_path, "doomed")
    (repo / "doomed" / "1" / "gate").touch()
    with running_server(repo) as server:
        base = f"http://{server.http_url}"
        for _ in range(3):  # three restarts are allowed within a minute
            assert infer(base, "doomed", 1.0)[0] == 500
            assert infer(base, "doomed", 0.0)[0] == 200
        assert infer(base, "doomed", 1.0)[0] == 500
        reason = (
            "model instance 'doomed_0_0' died 4 times within 60 s and is not restarted "
            "again (last: killed by signal SIGSEGV)"
        )
        wait_for(lambda: index_entry(base, "doomed").get("state") == "UNAVAILABLE", "given up")
        assert index_entry(base, "doomed") == {
            "name": "doomed",
            "version": "1",
            "state": "UNAVAILABLE",
            "reason": reason,
        }
        assert call(base, "/v2/models/doomed/ready")[0] == 400
        assert infer(base, "doomed", 0.0) == (
            404,
            {"error": "Request for unknown model: 'doomed' has no available versions"},
        )
        pids = [int(p) for p in (repo / "doomed" / "1" / "inits").read_text().split()]
        wait_for(lambda: all(_gone(pid) for pid in pids), "every process reaped")


def test_the_execute_timeout_flag_kills_and_restarts_a_hung_instance(tmp_path: Path) -> None:
    repo = repository(tmp_path, "stuck")
    (repo / "stuck" / "1" / "gate").touch()
    with running_server(repo, python_execute_timeout_secs=0.5) as server:
        base = f"http://{server.http_url}"
        assert infer(base, "stuck", 3.0) == (
            500,
            {
                "error": "Stub process 'stuck_0_0' is not healthy. Execute did not finish "
                "within 0.5 s (--python-execute-timeout-secs), the process was killed."
            },
        )
        assert infer(base, "stuck", 4.0)[1]["outputs"][0]["data"] == [4.0]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
