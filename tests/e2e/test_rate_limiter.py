"""``--rate-limit execution_count`` end to end: python models that record their executions
(``rate_limit_models``) on a real server, called through tritonclient.

Every assertion reads the recorded order of execution starts and ends (overlaps, who ran
first), never a duration: a model that may overlap waits until its peer runs, one that may not
gives the limiter the same chance to let it.
"""

from __future__ import annotations

import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.core.loaded_model import LoadedVersion
from tests.e2e.rate_limit_models import (
    events,
    max_concurrency,
    starts,
    write_ensemble,
    write_model,
)
from tests.frontends.http.server_thread import ServerThread, running_server

PEER_WAIT = {"wait_for_peer_s": "0.2"}  # long enough to overlap if the limiter allowed it
SEQUENCE = "sequence_batching { max_sequence_idle_microseconds: 5000000 }"
DYNAMIC = "dynamic_batching { max_queue_delay_microseconds: 1000 }"
BATCHING = ("dyn", "dyn_full")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rate_logs")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, logs: Path) -> Path:
    repo = tmp_path_factory.mktemp("rate_repo")
    # one resource of count 1 shared by two models
    for name in ("share_a", "share_b"):
        write_model(
            repo, name, log_path=logs / "share", resources=[("R1", 1, False)], parameters=PEER_WAIT
        )
    # P has count 2 (big_p needs 2): two models that need 1 each run together
    for name in ("pair_a", "pair_b"):
        write_model(
            repo,
            name,
            log_path=logs / "pair",
            resources=[("P", 1, False)],
            parameters={"wait_for_peer_s": "60"},
        )
    write_model(repo, "big_p", log_path=logs / "unused", resources=[("P", 2, False)])
    # priorities: prio_hold keeps the resource until the gate file exists
    write_model(
        repo,
        "prio_hold",
        log_path=logs / "prio",
        resources=[("R3", 1, False)],
        parameters={"gate_path": str(logs / "prio_gate")},
    )
    write_model(repo, "prio_a", log_path=logs / "prio", resources=[("R3", 1, False)], priority=1)
    write_model(repo, "prio_b", log_path=logs / "prio", resources=[("R3", 1, False)], priority=2)
    # two instances of one model share a resource of count 1
    write_model(
        repo,
        "two_inst",
        log_path=logs / "two",
        resources=[("R4", 1, False)],
        count=2,
        parameters=PEER_WAIT,
    )
    # an instance group without rate_limiter is not limited
    write_model(
        repo,
        "free_runner",
        log_path=logs / "free",
        count=2,
        parameters={"wait_for_peer_s": "60"},
    )
    # every scheduler shares R5: dynamic batcher, sequence batcher, an ensemble's steps
    common: dict[str, Any] = {"log_path": logs / "sched", "resources": [("R5", 1, False)]}
    write_model(repo, "dyn", max_batch_size=4, scheduling=DYNAMIC, parameters=PEER_WAIT, **common)
    write_model(repo, "seq", scheduling=SEQUENCE, parameters=PEER_WAIT, **common)
    write_model(repo, "step_a", parameters=PEER_WAIT, **common)
    write_model(repo, "step_b", parameters=PEER_WAIT, **common)
    write_ensemble(repo, "ens", "step_a", "step_b")
    # a dynamic batcher whose two instances share R8: batches form once an instance may run
    write_model(
        repo,
        "dyn_full",
        log_path=logs / "dynfull",
        resources=[("R8", 1, False)],
        count=2,
        max_batch_size=4,
        scheduling="dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ] "
        "max_queue_delay_microseconds: 5000000 }",
        parameters={"gate_path": str(logs / "dyn_gate")},
    )
    # error paths share R6
    write_model(
        repo,
        "failing",
        log_path=logs / "err",
        resources=[("R6", 1, False)],
        parameters={"fail": "boom"},
    )
    write_model(
        repo,
        "crashing",
        log_path=logs / "err",
        resources=[("R6", 1, False)],
        parameters={"crash_marker": str(logs / "crashed")},
    )
    write_model(repo, "healthy", log_path=logs / "err", resources=[("R6", 1, False)])
    # an instance that dies while its request waits for R9 (held by a gated model)
    write_model(
        repo,
        "die_hold",
        log_path=logs / "die",
        resources=[("R9", 1, False)],
        parameters={"gate_path": str(logs / "die_gate")},
    )
    write_model(repo, "die_wait", log_path=logs / "die", resources=[("R9", 1, False)])
    # cancellation while waiting: R7 held by a gated model
    write_model(
        repo,
        "cancel_hold",
        log_path=logs / "cancel",
        resources=[("R7", 1, False)],
        parameters={"gate_path": str(logs / "cancel_gate")},
    )
    write_model(repo, "cancel_wait", log_path=logs / "cancel", resources=[("R7", 1, False)])
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerThread]:
    with running_server(
        repo,
        allow_grpc=True,
        model_control_mode="explicit",
        load_models=["*"],
        rate_limit="execution_count",
    ) as srv:
        yield srv


def _row(value: float) -> np.ndarray:
    return np.full((1,), value, np.float32)


def infer(server: ServerThread, model: str, value: float = 1.0, **kwargs: Any) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    data = _row(value)
    shape = [1]
    if model in BATCHING:
        data, shape = data.reshape(1, 1), [1, 1]
    item = httpclient.InferInput("INPUT0", shape, "FP32")
    item.set_data_from_numpy(data)
    result = client.infer(model, [item], **kwargs).as_numpy("OUTPUT0")
    client.close()
    assert result is not None
    return result


def run_all(calls: list[Callable[[], Any]]) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def loaded(server: ServerThread, model: str) -> LoadedVersion:
    assert server.handle is not None
    return server.handle.service.manager.get(model)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


def test_two_models_sharing_one_resource_never_overlap(server: ServerThread, logs: Path) -> None:
    # share_a's plain requests take the wire lane, share_b's (with a parameter) the standard
    # path: both wait for the resource where the instance's requests leave for it
    assert loaded(server, "share_a").wire_lane is not None
    calls: list[Callable[[], Any]] = []
    for v in range(4):
        calls.append(lambda v=v: infer(server, "share_a", v))
        calls.append(lambda v=v: infer(server, "share_b", v, parameters={"lane": "standard"}))
    results = run_all(calls)
    assert [float(r[0]) for r in results] == [float(v) for v in range(4) for _ in range(2)]
    assert len(starts(logs / "share")) == 8
    assert max_concurrency(logs / "share") == 1


def test_a_resource_of_count_two_lets_two_instances_run_together(
    server: ServerThread, logs: Path
) -> None:
    # each execution waits until the other model's runs: they overlap (or it would take 60 s)
    run_all([lambda: infer(server, "pair_a"), lambda: infer(server, "pair_b")])
    assert max_concurrency(logs / "pair") == 2


def test_instances_of_one_model_share_its_resource(server: ServerThread, logs: Path) -> None:
    run_all([lambda v=v: infer(server, "two_inst", v) for v in range(6)])
    assert len(starts(logs / "two")) == 6
    assert max_concurrency(logs / "two") == 1


def test_a_group_without_rate_limiter_is_not_limited(server: ServerThread, logs: Path) -> None:
    run_all([lambda: infer(server, "free_runner"), lambda: infer(server, "free_runner")])
    assert max_concurrency(logs / "free") == 2


def test_waiting_instances_take_turns_by_priority(server: ServerThread, logs: Path) -> None:
    prio = logs / "prio"
    with ThreadPoolExecutor(13) as pool:
        hold = pool.submit(infer, server, "prio_hold")
        until(lambda: starts(prio) == ["prio_hold_0_0"], "the holder runs")
        waiting = [pool.submit(infer, server, m, v) for v in range(6) for m in ("prio_a", "prio_b")]
        for model in ("prio_a", "prio_b"):  # all six of each wait at the instance
            scheduler = loaded(server, model).scheduler
            assert scheduler is not None
            until(lambda s=scheduler: s.pending_count == 5, f"{model} queued")
        (logs / "prio_gate").touch()
        hold.result(timeout=60)
        for future in waiting:
            future.result(timeout=60)
    order = "".join(name[5] for name in starts(prio)[1:])  # 'a' / 'b'
    # turns go to the lowest executions x priority: priority 1 gets twice the turns of 2
    assert order == "aabaabaabbbb"  # as Triton 2.51 runs them
    assert max_concurrency(prio) == 1


def test_every_scheduler_waits_for_the_resource(server: ServerThread, logs: Path) -> None:
    seq_client = grpcclient.InferenceServerClient(server.grpc_url)

    def sequence(seq_id: int) -> None:
        for step in range(2):
            item = grpcclient.InferInput("INPUT0", [1], "FP32")
            item.set_data_from_numpy(_row(float(seq_id)))
            out = seq_client.infer(
                "seq",
                [item],
                sequence_id=seq_id,
                sequence_start=step == 0,
                sequence_end=step == 1,
            ).as_numpy("OUTPUT0")
            assert out is not None and float(out[0]) == float(seq_id)

    calls: list[Callable[[], Any]] = [lambda v=v: infer(server, "dyn", v) for v in range(4)]
    calls += [lambda v=v: infer(server, "ens", v) for v in range(3)]
    calls += [lambda s=s: sequence(s) for s in (11, 12)]
    run_all(calls)
    seq_client.close()
    names = {name.rsplit("_", 2)[0] for name in starts(logs / "sched")}
    assert names == {"dyn", "seq", "step_a", "step_b"}
    assert max_concurrency(logs / "sched") == 1


def test_resources_come_back_after_an_error_and_a_crash(server: ServerThread, logs: Path) -> None:
    with pytest.raises(InferenceServerException, match="boom"):
        infer(server, "failing")
    with pytest.raises(InferenceServerException, match="not healthy"):
        infer(server, "crashing")
    # the crashed instance is restarted; everything sharing R6 still runs
    until(lambda: loaded(server, "crashing").healthy(), "crashing restarted")
    run_all([lambda: infer(server, "healthy", 2.0), lambda: infer(server, "crashing", 3.0)])
    assert starts(logs / "err").count("healthy_0_0") == 1
    assert max_concurrency(logs / "err") == 1


def test_a_request_cancelled_while_waiting_never_runs(server: ServerThread, logs: Path) -> None:
    log = logs / "cancel"
    client = grpcclient.InferenceServerClient(server.grpc_url)
    item = grpcclient.InferInput("INPUT0", [1], "FP32")
    item.set_data_from_numpy(_row(5.0))
    with ThreadPoolExecutor(1) as pool:
        hold = pool.submit(infer, server, "cancel_hold")
        until(lambda: starts(log) == ["cancel_hold_0_0"], "the holder runs")
        answers: queue.Queue[Any] = queue.Queue()
        call = client.async_infer(
            "cancel_wait", [item], callback=lambda result, error: answers.put(error)
        )
        slots = loaded(server, "cancel_wait").backend.rate_slots  # type: ignore[union-attr]
        slot = slots.slot(0) if slots is not None else None
        assert slot is not None
        until(lambda: slot.waiting != 0, "the request waits for R7")
        call.cancel()
        assert isinstance(answers.get(timeout=30), InferenceServerException)
        until(lambda: slot.waiting == 0, "its instance stops waiting")
        (logs / "cancel_gate").touch()
        hold.result(timeout=60)
    out = client.infer("cancel_wait", [item]).as_numpy("OUTPUT0")
    client.close()
    assert out is not None and float(out[0]) == 5.0
    assert starts(log) == ["cancel_hold_0_0", "cancel_wait_0_0"]
    assert events(log)[-1] == ("E", "cancel_wait_0_0")


def test_dynamic_batches_grow_while_the_instance_waits(server: ServerThread, logs: Path) -> None:
    # one batch runs (held at the gate) while the other requests queue: every preferred size
    # is ready at once, but the other instance has no resources, so the batcher keeps them
    # until an instance may run, and then takes full batches (Triton's qa L0_rate_limiter)
    log = logs / "dynfull"
    scheduler = loaded(server, "dyn_full").scheduler
    assert scheduler is not None
    with ThreadPoolExecutor(9) as pool:
        first = pool.submit(infer, server, "dyn_full", 0.0)
        until(lambda: len(starts(log)) == 1, "the first batch runs")
        rest = [pool.submit(infer, server, "dyn_full", float(v)) for v in range(1, 9)]
        until(lambda: scheduler.pending_count == 8, "the other requests queue")
        (logs / "dyn_gate").touch()
        assert [float(f.result(timeout=60)[0, 0]) for f in [first, *rest]] == list(range(9))
    sizes = [int(line.split()[2]) for line in log.read_text().splitlines() if line[0] == "S"]
    assert sizes == [1, 4, 4]
    assert max_concurrency(log) == 1


def test_an_instance_that_dies_while_waiting_fails_its_request_and_is_restarted(
    server: ServerThread, logs: Path
) -> None:
    log = logs / "die"
    version = loaded(server, "die_wait")
    assert version.backend is not None and version.backend.rate_slots is not None
    slot = version.backend.rate_slots.slot(0)
    assert slot is not None
    with ThreadPoolExecutor(2) as pool:
        hold = pool.submit(infer, server, "die_hold")
        until(lambda: starts(log) == ["die_hold_0_0"], "the holder runs")
        waiting = pool.submit(infer, server, "die_wait", 4.0)
        until(lambda: slot.waiting != 0, "the request waits for R9")
        os.kill(version.backend.describe()["pids"][0], signal.SIGKILL)
        with pytest.raises(InferenceServerException, match="not healthy"):
            waiting.result(timeout=60)
        (logs / "die_gate").touch()
        hold.result(timeout=60)
    until(lambda: version.healthy(), "die_wait restarted")
    assert float(infer(server, "die_wait", 6.0)[0]) == 6.0
    assert starts(log) == ["die_hold_0_0", "die_wait_0_0"]  # the killed one never ran
    assert not slot.holding and not slot.waiting
