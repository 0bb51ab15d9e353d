"""A soak at saturation (``nox -s slow``): ``repokit serve`` in its own process under HTTP and
gRPC load on the default scheduler (add_sub), the dynamic batcher (batcher) and the sequence
batcher (accumulate) for ``REPOKIT_SOAK_SECONDS`` (default 180). Fails on any error or wrong
answer, on server RSS growth beyond :data:`RSS_GROWTH_BOUND_MB` between the end of the warm-up
and the end of the load, and on descriptor growth (under load, and idle before and after).
Prints its figures."""

from __future__ import annotations

import itertools
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repokit.paths import default_sample_repository
from tests.limits.served import ServedProcess, served

pytestmark = pytest.mark.slow

DURATION_S = float(os.environ.get("REPOKIT_SOAK_SECONDS", "180"))
WARMUP_S = max(10.0, DURATION_S / 10)
RSS_GROWTH_BOUND_MB = 32.0
# workers per (protocol, model)
WORKERS = {"add_sub": 4, "batcher": 8, "accumulate": 2}
SEQUENCE_LENGTH = 5


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, count: int) -> None:
        with self.lock:
            self.requests += count

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


def _modules(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def _input(module: Any, name: str, data: np.ndarray, datatype: str) -> Any:
    tensor = module.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def _add_sub(module: Any, client: Any, _: Any) -> int:
    a = np.random.default_rng().random((1, 16), dtype=np.float32)
    result = client.infer(
        "add_sub", [_input(module, "INPUT0", a, "FP32"), _input(module, "INPUT1", a, "FP32")]
    )
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros_like(a))
    return 1


def _batcher(module: Any, client: Any, _: Any) -> int:
    x = np.random.default_rng().random((1, 4), dtype=np.float32)
    result = client.infer("batcher", [_input(module, "INPUT0", x, "FP32")])
    assert result.as_numpy("OUTPUT0").shape == (1, 4)
    return 1


def _accumulate(module: Any, client: Any, ids: Any) -> int:
    sequence = next(ids)
    total = 0
    for step in range(SEQUENCE_LENGTH):
        value = int(sequence % 7) + step
        total += value
        result = client.infer(
            "accumulate",
            [_input(module, "INPUT", np.array([[value]], np.int32), "INT32")],
            sequence_id=sequence,
            sequence_start=step == 0,
            sequence_end=step == SEQUENCE_LENGTH - 1,
        )
        assert int(result.as_numpy("OUTPUT").reshape(-1)[0]) == total
    return SEQUENCE_LENGTH


LOADS: dict[str, Callable[[Any, Any, Any], int]] = {
    "add_sub": _add_sub,
    "batcher": _batcher,
    "accumulate": _accumulate,
}


def _worker(
    server: ServedProcess, protocol: str, model: str, stop: threading.Event, tally: Tally, ids: Any
) -> None:
    module = _modules(protocol)
    port = server.http_port if protocol == "http" else server.grpc_port
    client = module.InferenceServerClient(f"127.0.0.1:{port}")
    run = LOADS[model]
    try:
        while not stop.is_set():
            try:
                tally.add(run(module, client, ids))
            except Exception as exc:  # every error fails the soak
                tally.error(f"{protocol} {model}: {type(exc).__name__}: {exc}")
    finally:
        client.close()


def _run_load(server: ServedProcess, seconds: float, tally: Tally) -> None:
    stop = threading.Event()
    ids = itertools.count(1 + int(time.time() * 1000) % 1_000_000 * 1000)
    lock = threading.Lock()

    def next_id(_: Any = None) -> int:
        with lock:
            return next(ids)

    class _Ids:
        def __next__(self) -> int:
            return next_id()

    threads = [
        threading.Thread(
            target=_worker, args=(server, protocol, model, stop, tally, _Ids()), daemon=True
        )
        for protocol in ("http", "grpc")
        for model, count in WORKERS.items()
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(60)


def _settled_fds(server: ServedProcess, at_most: int) -> int:
    """The server's descriptors once closed connections are gone (up to 15 s)."""
    count = server.fd_count()
    for _ in range(150):
        if count <= at_most:
            break
        time.sleep(0.1)
        count = server.fd_count()
    return count


@pytest.mark.timeout(int(WARMUP_S + DURATION_S) + 300)
def test_soak_at_saturation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    for name in WORKERS:
        shutil.copytree(default_sample_repository() / name, repo / name)
    with served(repo) as server:
        fds_idle_start = server.fd_count()
        warmup = Tally()
        _run_load(server, WARMUP_S, warmup)
        assert not warmup.errors, warmup.errors[:5]
        fds_idle_after_warmup = _settled_fds(server, fds_idle_start)
        rss_start = server.rss_mb()
        tally = Tally()
        began = time.monotonic()
        sampler_stop = threading.Event()
        samples: list[tuple[float, int]] = []

        def sample() -> None:
            while not sampler_stop.wait(2.0):
                samples.append((server.rss_mb(), server.fd_count()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _run_load(server, DURATION_S, tally)
        elapsed = time.monotonic() - began
        sampler_stop.set()
        sampler.join()
        rss_end = server.rss_mb()
        fds_idle_end = _settled_fds(server, fds_idle_after_warmup)
        rss_loaded_start = samples[len(samples) // 10][0] if samples else rss_start
        rss_loaded_end = max(s[0] for s in samples[-3:]) if samples else rss_end
        fds_loaded = [s[1] for s in samples]
        figures = (
            f"soak: {DURATION_S:g} s (+{WARMUP_S:g} s warm-up), {tally.requests} requests "
            f"({tally.requests / elapsed:.0f}/s, http+grpc x add_sub/batcher/accumulate), "
            f"{len(tally.errors)} errors; server RSS {rss_start:.0f} MB after warm-up, "
            f"{rss_loaded_start:.0f} -> {rss_loaded_end:.0f} MB under load, {rss_end:.0f} MB at "
            f"the end; descriptors idle {fds_idle_start} at start, {fds_idle_after_warmup} after "
            f"warm-up, {fds_idle_end} at the end, under load "
            f"{min(fds_loaded, default=0)}-{max(fds_loaded, default=0)}"
        )
        with capsys.disabled():
            print("\n" + figures)
    assert not tally.errors, tally.errors[:5]
    assert tally.requests > 0
    assert rss_end - rss_start <= RSS_GROWTH_BOUND_MB, figures
    assert rss_loaded_end - rss_loaded_start <= RSS_GROWTH_BOUND_MB, figures
    # the first load opens a few for good (executor threads, gRPC): growth is counted after it
    assert fds_idle_end <= fds_idle_after_warmup, figures
    if len(fds_loaded) > 4:
        assert max(fds_loaded[len(fds_loaded) // 2 :]) <= max(fds_loaded[: len(fds_loaded) // 2]), (
            figures
        )
