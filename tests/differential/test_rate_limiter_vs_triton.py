"""The rate limiter against real Triton 2.51: the same repository with the same flags gives the
same load verdicts and messages (a count below a model's need, a resource both global and per
device), the same overlaps of recorded executions (one resource of count 1: never; count 2:
two at once) and the same order of waiting instances with priorities 1 and 2. Models:
``tests/e2e/rate_limit_models.py``; assertions read the recorded order of execution starts and
ends, never durations."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from repokit.scheduler.rate_limiter import parse_resource_flags
from tests.differential.triton_reference import running_triton
from tests.e2e.rate_limit_models import max_concurrency, starts, write_model
from tests.frontends.http.server_thread import running_server

pytestmark = pytest.mark.triton

FLAGS = ["--rate-limit-resource=R1:1", "--rate-limit-resource=R:1"]


def _load(base_url: str, model: str) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{base_url}/v2/repository/models/{model}/load", data=b"", method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status), ""
    except urllib.error.HTTPError as exc:
        return int(exc.code), str(json.loads(exc.read()).get("error", ""))


def test_load_verdicts_and_messages_match(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    log = tmp_path / "unused"
    write_model(repo, "needs_two", log_path=log, resources=[("R1", 2, False)])
    write_model(repo, "global_r", log_path=log, resources=[("R", 1, True)])
    write_model(repo, "device_r", log_path=log, resources=[("R", 1, False)])
    write_model(repo, "needs_one", log_path=log, resources=[("R1", 1, False)])
    order = ["needs_two", "global_r", "device_r", "needs_one"]
    with (
        running_triton(
            repo,
            tmp_path / "triton",
            ["--model-control-mode=explicit", "--rate-limit=execution_count", *FLAGS],
        ) as triton,
        running_server(
            repo,
            allow_grpc=True,
            model_control_mode="explicit",
            rate_limit="execution_count",
            rate_limit_resources=parse_resource_flags(f.split("=", 1)[1] for f in FLAGS),
        ) as ours,
    ):
        theirs = [_load(triton.url, model) for model in order]
        mine = [_load(ours.endpoints.http, model) for model in order]
    assert mine == theirs
    assert [status for status, _ in mine] == [400, 200, 400, 200]
    assert 'Resource count for \\"R1\\" is limited to 1' in json.dumps(mine[0][1])
    assert "present as both global and device-specific" in mine[2][1]


def _repo(root: Path, logs: Path) -> Path:
    for name in ("share_a", "share_b"):
        write_model(
            root,
            name,
            log_path=logs / "share",
            resources=[("R1", 1, False)],
            parameters={"wait_for_peer_s": "0.3"},
        )
    for name in ("pair_a", "pair_b"):
        write_model(
            root,
            name,
            log_path=logs / "pair",
            resources=[("P", 1, False)],
            parameters={"wait_for_peer_s": "60"},
        )
    write_model(root, "big_p", log_path=logs / "unused", resources=[("P", 2, False)])
    gate = {"gate_path": str(logs / "gate")}
    write_model(root, "hold", log_path=logs / "prio", resources=[("R3", 1, False)], parameters=gate)
    write_model(root, "prio_a", log_path=logs / "prio", resources=[("R3", 1, False)], priority=1)
    write_model(root, "prio_b", log_path=logs / "prio", resources=[("R3", 1, False)], priority=2)
    return root


def _pending(metrics_url: str) -> int:
    """nv_inference_pending_request_count summed over prio_a and prio_b."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("nv_inference_pending_request_count")
        and ('model="prio_a"' in line or 'model="prio_b"' in line)
    )


def _priority_order(url: str, metrics_url: str, logs: Path) -> str:
    """Six requests each to prio_a (priority 1) and prio_b (2) wait while ``hold`` has the
    resource; the order they then run in."""
    with ThreadPoolExecutor(13) as pool:
        hold = pool.submit(_run_all, url, ["hold"])
        _until(lambda: starts(logs / "prio") == ["hold_0_0"])
        waiting = pool.submit(_run_all, url, ["prio_a", "prio_b"] * 6)
        _until(lambda: _pending(metrics_url) >= 10)  # 5 or 6 each, as the server counts
        (logs / "gate").touch()
        hold.result(timeout=60)
        waiting.result(timeout=120)
    return "".join(name[5] for name in starts(logs / "prio")[1:])


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.01)


def _run_all(url: str, calls: list[str]) -> None:
    def one(model: str) -> None:
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        item = httpclient.InferInput("INPUT0", [1], "FP32")
        item.set_data_from_numpy(np.ones((1,), np.float32))
        assert client.infer(model, [item]).as_numpy("OUTPUT0") is not None
        client.close()

    with ThreadPoolExecutor(len(calls)) as pool:
        list(pool.map(one, calls))


def _behaviour(url: str, metrics_url: str, logs: Path) -> dict[str, Any]:
    _run_all(url, ["share_a", "share_b"] * 3)
    _run_all(url, ["pair_a", "pair_b"])
    return {
        "share": max_concurrency(logs / "share"),
        "share_runs": len(starts(logs / "share")),
        "pair": max_concurrency(logs / "pair"),
        "priority_order": _priority_order(url, metrics_url, logs),
    }


@pytest.mark.slow
def test_the_same_repository_overlaps_and_takes_turns_as_on_triton(tmp_path: Path) -> None:
    flags = ["--rate-limit=execution_count"]
    results: dict[str, dict[str, Any]] = {}
    serve: dict[str, Callable[[Path, Path], Any]] = {
        "triton": lambda repo, work: running_triton(repo, work, flags, ready=()),
        "repokit": lambda repo, work: running_server(
            repo, rate_limit="execution_count", allow_grpc=True
        ),
    }
    for name, start in serve.items():
        logs = tmp_path / name / "logs"
        logs.mkdir(parents=True)
        repo = _repo(tmp_path / name / "models", logs)
        with start(repo, tmp_path / name) as server:
            endpoints = server.endpoints
            results[name] = _behaviour(endpoints.http, endpoints.metrics, logs)
    assert results["repokit"] == results["triton"]
    assert results["repokit"] == {
        "share": 1,
        "share_runs": 6,
        "pair": 2,
        "priority_order": "aabaabaabbbb",
    }


def _pending_of(metrics_url: str, model: str) -> int:
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("nv_inference_pending_request_count") and f'model="{model}"' in line
    )


def _batch_sizes(url: str, metrics_url: str, logs: Path) -> list[int]:
    """One request runs (held at the gate) on one of two instances sharing R8 while eight
    more queue; the batch sizes the dynamic batcher then forms."""
    log = logs / "dyn"

    def one(value: float) -> None:
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        item = httpclient.InferInput("INPUT0", [1, 1], "FP32")
        item.set_data_from_numpy(np.full((1, 1), value, np.float32))
        out = client.infer("dyn_full", [item]).as_numpy("OUTPUT0")
        assert out is not None and float(out[0, 0]) == value
        client.close()

    with ThreadPoolExecutor(9) as pool:
        first = pool.submit(one, 0.0)
        _until(lambda: len(starts(log)) == 1)
        rest = [pool.submit(one, float(v)) for v in range(1, 9)]
        _until(lambda: _pending_of(metrics_url, "dyn_full") >= 8)
        (logs / "dyn_gate").touch()
        for future in [first, *rest]:
            future.result(timeout=120)
    return [int(line.split()[2]) for line in log.read_text().splitlines() if line[0] == "S"]


@pytest.mark.slow
def test_dynamic_batches_grow_while_waiting_as_on_triton(tmp_path: Path) -> None:
    flags = ["--rate-limit=execution_count"]
    sizes: dict[str, list[int]] = {}
    serve: dict[str, Callable[[Path, Path], Any]] = {
        "triton": lambda repo, work: running_triton(repo, work, flags, ready=()),
        "repokit": lambda repo, work: running_server(
            repo, rate_limit="execution_count", allow_grpc=True
        ),
    }
    for name, start in serve.items():
        logs = tmp_path / name / "logs"
        logs.mkdir(parents=True)
        repo = tmp_path / name / "models"
        write_model(
            repo,
            "dyn_full",
            log_path=logs / "dyn",
            resources=[("R8", 1, False)],
            count=2,
            max_batch_size=4,
            scheduling="dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ] "
            "max_queue_delay_microseconds: 5000000 }",
            parameters={"gate_path": str(logs / "dyn_gate")},
        )
        with start(repo, tmp_path / name) as server:
            endpoints = server.endpoints
            sizes[name] = _batch_sizes(endpoints.http, endpoints.metrics, logs)
    assert sizes["repokit"] == sizes["triton"] == [1, 4, 4]
