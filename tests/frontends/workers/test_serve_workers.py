"""``workers=2``: two frontend processes share the HTTP and gRPC ports over one scheduling
process. Requests through either protocol and any connection reach one set of instances and
one set of statistics (the metrics port answers in the scheduling process); a load or unload
through one connection is seen at once through every other; a worker that dies is restarted
on the same ports."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.core.tracing.options import parse_trace_flags
from tests.frontends.http.server_thread import (
    ServerThread,
    copy_models,
    running_server,
    serve_settings,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("workers") / "models", ("add_sub", "identity"))
    with running_server(
        repo, allow_grpc=True, workers=2, model_control_mode="explicit", load_models=["*"]
    ) as srv:
        yield srv


def pool_pids(server: ServerThread) -> list[int]:
    assert server.handle is not None and server.handle._pool is not None
    return server.handle._pool.pids


def infer(client: object, module: object, a: float) -> np.ndarray:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        item = module.InferInput(name, [1, 16], "FP32")  # type: ignore[attr-defined]
        item.set_data_from_numpy(np.full((1, 16), a, dtype=np.float32))
        inputs.append(item)
    result = client.infer("add_sub", inputs)  # type: ignore[attr-defined]
    out: np.ndarray = result.as_numpy("OUTPUT0")
    return out


def fresh(server: ServerThread, protocol: str) -> object:
    """A new client: a new connection, which the kernel may give to either worker."""
    return server.client(protocol)


def inference_count(server: ServerThread) -> int:
    stats = fresh(server, "http").get_inference_statistics("add_sub")  # type: ignore[attr-defined]
    return int(stats["model_stats"][0]["inference_count"])


def test_both_protocols_share_one_core(server: ServerThread) -> None:
    pids = pool_pids(server)
    assert len(set(pids)) == 2 and os.getpid() not in pids
    before = inference_count(server)
    for index in range(12):
        protocol = "http" if index % 2 else "grpc"
        module = httpclient if protocol == "http" else grpcclient
        client = fresh(server, protocol)
        np.testing.assert_array_equal(infer(client, module, index), np.full((1, 16), 2 * index))
        client.close()  # type: ignore[attr-defined]
    assert inference_count(server) == before + 12
    assert server.handle is not None
    url = f"http://127.0.0.1:{server.handle.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    assert f'nv_inference_count{{model="add_sub",version="1"}} {before + 12}' in text


def test_errors_keep_their_status_through_a_worker(server: ServerThread) -> None:
    client = fresh(server, "http")
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("nope")  # type: ignore[attr-defined]
    assert "Request for unknown model: 'nope' is not found" in str(caught.value)
    assert caught.value.status() == "404"  # the status table's NOT_FOUND, as in one process
    grpc = fresh(server, "grpc")
    with pytest.raises(InferenceServerException) as grpc_caught:
        grpc.get_model_metadata("nope")  # type: ignore[attr-defined]
    assert grpc_caught.value.status() == "StatusCode.NOT_FOUND"


def test_model_control_is_seen_through_every_connection(server: ServerThread) -> None:
    for _ in range(4):
        fresh(server, "http").unload_model("identity")  # type: ignore[attr-defined]
        for _ in range(4):  # new connections, spread over both workers
            assert not fresh(server, "grpc").is_model_ready("identity")  # type: ignore[attr-defined]
            index = fresh(server, "http").get_model_repository_index()  # type: ignore[attr-defined]
            states = {e["name"]: e.get("state") for e in index}
            assert states["identity"] == "UNAVAILABLE"
        fresh(server, "grpc").load_model("identity")  # type: ignore[attr-defined]
        for _ in range(4):
            assert fresh(server, "http").is_model_ready("identity")  # type: ignore[attr-defined]


def test_a_worker_that_dies_is_restarted(server: ServerThread) -> None:
    assert server.handle is not None and server.handle._pool is not None
    pool = server.handle._pool
    victim = pool_pids(server)[0]
    restarted = pool.restarted
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = pool_pids(server)
        if pool.restarted > restarted and len(pids) == 2 and victim not in pids:
            break
        time.sleep(0.05)
    assert pool.restarted == restarted + 1 and victim not in pool_pids(server)
    for index in range(8):  # every connection is answered, whichever worker takes it
        client = fresh(server, "http" if index % 2 else "grpc")
        module = httpclient if index % 2 else grpcclient
        np.testing.assert_array_equal(infer(client, module, 1), np.full((1, 16), 2.0))


def test_the_ports_are_the_ones_the_workers_share(tmp_path: Path) -> None:
    """Port 0: the scheduling process picks the port, every worker binds it."""
    repo = copy_models(tmp_path / "models", ("add_sub",))
    with running_server(repo, allow_grpc=True, workers=2) as srv:
        assert srv.handle is not None
        ports = (srv.handle.http_port, srv.handle.grpc_port)
        assert all(p for p in ports)
        for pid in pool_pids(srv):
            listening = _listening_ports(pid)
            assert set(ports) <= listening, (pid, listening)


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (/proc: its sockets' inodes in the tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_traces_are_taken_server_wide_with_the_workers_timestamps(tmp_path: Path) -> None:
    """Tracing turned on through one connection is on through every worker at once; each
    request is sampled in the scheduling process and its trace has the frontend's receive and
    send timestamps (HTTP) or the codec's (gRPC), as in one process."""
    repo = copy_models(tmp_path / "models", ("add_sub",))
    base = tmp_path / "trace.json"
    trace = parse_trace_flags([f"triton,file={base}", "triton,log-frequency=1"])
    with running_server(repo, allow_grpc=True, workers=2, trace=trace) as srv:
        settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
        fresh(srv, "http").update_trace_settings(settings=settings)  # type: ignore[attr-defined]
        for index in range(8):
            protocol = "http" if index % 2 else "grpc"
            module = httpclient if protocol == "http" else grpcclient
            infer(fresh(srv, protocol), module, index)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_traces(base)) < 8:
            time.sleep(0.05)
        traces = _traces(base)
    assert len(traces) == 8
    http = [t for t in traces.values() if "HTTP_RECV_START" in t]
    grpc = [t for t in traces.values() if "GRPC_WAITREAD_START" in t]
    assert len(http) == len(grpc) == 4
    for stamps in http:
        assert {"HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "COMPUTE_START"} <= stamps
        assert {"INFER_RESPONSE_COMPLETE", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END"} <= (
            stamps
        )


def _traces(base: Path) -> dict[int, set[str]]:
    """The timestamp names of each trace written to ``base``'s index files, by trace id."""
    traces: dict[int, set[str]] = {}
    for path in base.parent.glob(base.name + ".*"):
        if not path.suffix[1:].isdigit():
            continue
        try:
            document = json.loads(path.read_text())
        except ValueError:  # being written
            continue
        for item in document:
            names = traces.setdefault(item["id"], set())
            names.update(stamp["name"] for stamp in item.get("timestamps", []))
    return traces


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_that_cannot_serve_fails_the_start_with_its_reason(
    tmp_path: Path, workers: int
) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    server = ServerThread(serve_settings(repo, allow_grpc=True, grpc_use_ssl=True, workers=workers))
    before = set(_worker_children(os.getpid()))  # other tests' servers may be running
    try:
        with pytest.raises(ValueError, match=r"^--grpc-use-ssl needs --grpc-server-key$"):
            server.start()
    finally:
        server.handle = None
        server.stop()
    assert set(_worker_children(os.getpid())) == before  # none of its workers left running


def _worker_children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == parent and b"repokit.frontends.workers.process" in command:
            found.append(int(entry.name))
    return found
