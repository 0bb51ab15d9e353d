"""Scheduling against real Triton 2.51: the same python-backend models (``batcher`` reports the
batch size it ran in, ``accumulate`` keeps a running sum per sequence) served by both, the same
requests sent to both over HTTP.

Compared: outputs, status codes and error texts exactly; batch-size distributions by their
structural facts only (every batch within max_batch_size, batching happens under concurrency on
both), since the exact batches depend on arrival timing.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.frontends.http.server_thread import copy_models, running_server

pytestmark = pytest.mark.triton

TRITON_SCRIPT = Path("/work/shared/tools/triton-reference.sh")
SHARED_VENV = Path("/tmp/triton-reference-venv")
MODELS = ("batcher", "accumulate")


def _free_port() -> int:
    for _ in range(50):
        port = random.randint(20000, 60000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def private_venv(root: Path) -> Path:
    """A venv directory of symlinks into the shared Triton venv, so triton.log is our own."""
    root.mkdir(parents=True, exist_ok=True)
    for entry in SHARED_VENV.iterdir():
        if entry.name != "triton.log":
            (root / entry.name).symlink_to(entry)
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("sched_diff_repo"), MODELS)


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    venv = private_venv(tmp_path_factory.mktemp("triton") / "venv")
    ports = [_free_port() for _ in range(3)]
    out = subprocess.run(
        [str(TRITON_SCRIPT), str(repository), *map(str, ports)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TRITON_VENV": str(venv)},
    )
    pid = int(out.stdout.strip().splitlines()[-1])
    base = f"http://127.0.0.1:{ports[0]}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{base}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Triton did not become ready; see {venv / 'triton.log'}")
            time.sleep(0.2)
        yield base
    finally:
        os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[str]:
    with running_server(repository) as srv:
        yield f"http://{srv.http_url}"


def _post(base: str, model: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = requests.post(f"{base}/v2/models/{model}/infer", json=body, timeout=30)
    doc: dict[str, Any] = response.json()
    return response.status_code, doc


def _batcher_body(value: float) -> dict[str, Any]:
    return {
        "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [value] * 4}]
    }


def _concurrent_batch_sizes(base: str, count: int) -> list[int]:
    barrier = threading.Barrier(count)
    session_local = threading.local()

    def one(index: int) -> int:
        session = getattr(session_local, "s", None) or requests.Session()
        session_local.s = session
        barrier.wait()
        response = session.post(
            f"{base}/v2/models/batcher/infer", json=_batcher_body(index), timeout=30
        )
        assert response.status_code == 200
        outputs = {o["name"]: o for o in response.json()["outputs"]}
        assert outputs["OUTPUT0"]["data"] == [float(index)] * 4
        return int(outputs["BATCH_SIZE"]["data"][0])

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def test_dynamic_batches_on_both(triton: str, repokit: str) -> None:
    for base in (triton, repokit):
        _concurrent_batch_sizes(base, 8)  # warm the connection pools up
        sizes = [size for _ in range(3) for size in _concurrent_batch_sizes(base, 32)]
        assert all(1 <= size <= 32 for size in sizes), (base, sizes)
        assert max(sizes) > 1, (base, sizes)
        stats = requests.get(f"{base}/v2/models/batcher/stats", timeout=10).json()
        entry = stats["model_stats"][0]
        assert entry["execution_count"] < entry["inference_count"]
        batched = sum(b["batch_size"] * b["compute_infer"]["count"] for b in entry["batch_stats"])
        assert batched == entry["inference_count"]


def test_single_request_and_sequence_id_on_batcher(triton: str, repokit: str) -> None:
    body = {**_batcher_body(2.5), "parameters": {"sequence_id": 42, "sequence_start": True}}
    assert _post(triton, "batcher", body) == _post(repokit, "batcher", body)


def _acc(value: int, **parameters: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        "parameters": parameters,
    }


def test_sequence_outputs_and_errors_match(triton: str, repokit: str) -> None:
    script: list[tuple[str, dict[str, Any]]] = [
        ("missing start", _acc(1, sequence_id=501)),
        ("missing start with id", {**_acc(1, sequence_id=502), "id": "req-7"}),
        ("no correlation id", _acc(1)),
        ("zero correlation id", _acc(1, sequence_id=0, sequence_start=True)),
        (
            "batch of two",
            {
                "inputs": [{"name": "INPUT", "shape": [2, 1], "datatype": "INT32", "data": [1, 2]}],
                "parameters": {"sequence_id": 503, "sequence_start": True},
            },
        ),
        ("start", _acc(3, sequence_id=504, sequence_start=True)),
        ("middle", _acc(4, sequence_id=504)),
        ("end", _acc(5, sequence_id=504, sequence_end=True)),
        ("after end", _acc(6, sequence_id=504)),
    ]
    for name, body in script:
        assert _post(triton, "accumulate", body) == _post(repokit, "accumulate", body), name


def test_concurrent_sequences_match(triton: str, repokit: str) -> None:
    def run(base: str, corrid: int) -> list[int]:
        sums = []
        with requests.Session() as session:
            for step, value in enumerate((2, 7, 1, 8)):
                body = _acc(
                    value * corrid,
                    sequence_id=corrid,
                    sequence_start=step == 0,
                    sequence_end=step == 3,
                )
                response = session.post(f"{base}/v2/models/accumulate/infer", json=body, timeout=30)
                assert response.status_code == 200, response.text
                sums.append(response.json()["outputs"][0]["data"][0])
        return sums

    results: dict[str, list[list[int]]] = {}
    for base in (triton, repokit):
        with ThreadPoolExecutor(6) as pool:  # 6 sequences on 4 slots
            results[base] = list(pool.map(lambda c, b=base: run(b, c), range(601, 607)))
    assert results[triton] == results[repokit]
    assert results[repokit][0] == [1202, 5409, 6010, 10818]
