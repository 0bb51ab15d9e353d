"""A load that changes only a model's ``instance_group`` updates the serving version in place,
as Triton 2.51 does (qa/L0_model_update): instances are added and removed while requests keep
running and none is refused, the instances that stay keep their state (and, as Triton, the
last instances of a signature are the ones that stay), statistics go on, and a removed
instance of a sequence batcher finishes the sequences it holds first. Any other change still
loads the version again, and an invalid new instance group is refused with Triton's message
while the version serves on (READY, the reason in the index)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import ServerThread, running_server

MODEL = """import pathlib
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.log = pathlib.Path(args["model_repository"]).parent / "instances.log"
        self.served = 0
        if (self.log.parent / "refuse").exists() and self.name != "scaled_0_0":
            raise RuntimeError("refused " + self.name)
        with self.log.open("a") as out:
            out.write("init " + self.name + "\\n")

    def execute(self, requests):
        time.sleep(0.005)
        responses = []
        for request in requests:
            self.served += 1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SERVED", np.array([self.served], dtype=np.int64)),
                pb_utils.Tensor("NAME", np.array([self.name.encode()], dtype=np.object_)),
            ]))
        return responses

    def finalize(self):
        with self.log.open("a") as out:
            out.write("fini " + self.name + "\\n")
"""

IO = """backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }]
output [
  { name: "SERVED" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "NAME" data_type: TYPE_STRING dims: [ 1 ] }
]
"""


def _config(folder: Path, groups: str, extra: str = "") -> None:
    name = folder.name
    text = f'name: "{name}"\n{IO}instance_group [ {groups} ]\n{extra}\n'
    (folder / "config.pbtxt").write_text(text)


def _events(repo: Path) -> list[str]:
    log = repo / "instances.log"
    return log.read_text().splitlines() if log.exists() else []


def _wait_for_events(repo: Path, count: int) -> list[str]:
    """The instance log once it has ``count`` lines (finalize may run after a load returns)."""
    deadline = time.monotonic() + 60
    while len(_events(repo)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return _events(repo)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "scaled"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    _config(folder, "{ count: 1 kind: KIND_CPU }")
    return tmp_path / "models"


def _infer(client: Any, model: str = "scaled", **kwargs: Any) -> tuple[int, str]:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    given = module.InferInput("IN", [1], "FP32")
    given.set_data_from_numpy(np.ones(1, np.float32))
    result = client.infer(model, [given], **kwargs)
    return int(result.as_numpy("SERVED")[0]), result.as_numpy("NAME")[0].decode()


class _Load:
    """Clients sending requests one after another until stopped, counting what they got."""

    def __init__(self, url: str, clients: int = 4) -> None:
        self.url = url
        self.sent = 0
        self.answered = 0
        self.errors: list[str] = []
        self.names: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run) for _ in range(clients)]

    def __enter__(self) -> _Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(self.url)
        try:
            while not self._stop.is_set():
                with self._lock:
                    self.sent += 1
                try:
                    _served, name = _infer(client)
                except InferenceServerException as exc:
                    with self._lock:
                        self.errors.append(str(exc))
                    continue
                with self._lock:
                    self.answered += 1
                    self.names.add(name)
        finally:
            client.close()

    def wait_for(self, answered: int) -> None:
        deadline = time.monotonic() + 60
        while self.answered < answered and time.monotonic() < deadline:
            time.sleep(0.01)


def _stats(client: httpclient.InferenceServerClient) -> int:
    stats = client.get_inference_statistics("scaled")["model_stats"][0]
    return int(stats["inference_count"])


@pytest.fixture
def server(repo: Path) -> Iterator[ServerThread]:
    with running_server(repo, model_control_mode="explicit", load_models=["scaled"]) as running:
        yield running


@pytest.mark.parametrize("batching", ["", "dynamic_batching { }"])
def test_scaling_up_and_down_under_load_refuses_and_loses_nothing(
    repo: Path, batching: str
) -> None:
    folder = repo / "scaled"
    _config(folder, "{ count: 1 kind: KIND_CPU }", batching)
    with running_server(repo, model_control_mode="explicit", load_models=["scaled"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert _infer(client) == (1, "scaled_0_0")
        with _Load(server.http_url) as load:
            load.wait_for(20)
            _config(folder, "{ count: 3 kind: KIND_CPU }", batching)
            client.load_model("scaled")
            # two instances added, the first one kept (no finalize, no second initialize)
            assert sorted(_events(repo)) == [
                "init scaled_0_0",
                "init scaled_0_1",
                "init scaled_0_2",
            ]
            assert client.get_model_config("scaled")["instance_group"][0]["count"] == 3
            start = load.answered
            load.wait_for(start + 40)
            _config(folder, "{ count: 1 kind: KIND_CPU }", batching)
            client.load_model("scaled")
            # the load returns once the removed instances finished and ran finalize; as in
            # Triton, the last instance of the signature is the one that stays
            assert sorted(_events(repo)[3:]) == ["fini scaled_0_0", "fini scaled_0_1"]
            start = load.answered
            load.wait_for(start + 20)
        assert load.errors == []
        assert load.answered == load.sent  # none refused, none lost
        assert client.is_model_ready("scaled")
        assert client.get_model_repository_index() == [
            {"name": "scaled", "version": "1", "state": "READY"}
        ]
        # the statistics went on through both updates: every request counted once
        assert _stats(client) == load.answered + 1
        assert _infer(client)[1] == "scaled_0_2"
        client.close()
    assert _wait_for_events(repo, 6)[5] == "fini scaled_0_2"


def test_kept_instances_keep_their_state(server: ServerThread, repo: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert [_infer(client) for _ in range(3)][-1] == (3, "scaled_0_0")
    _config(repo / "scaled", '{ name: "wide" count: 2 kind: KIND_CPU }')
    client.load_model("scaled")
    # the new group's first instance is the one that served (its name and its count kept),
    # the second is new and named after its place in the new group
    assert _events(repo) == ["init scaled_0_0", "init wide_1"]
    config = client.get_model_config("scaled")
    assert [(g["name"], g["count"]) for g in config["instance_group"]] == [("wide", 2)]
    answers = {name: served for served, name in (_infer(client) for _ in range(8))}
    assert answers.get("scaled_0_0", 4) >= 4  # it went on counting where it was
    client.close()


def test_a_load_with_a_config_override_updates_in_place(server: ServerThread, repo: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("scaled")
    config["instance_group"][0]["count"] = 2
    client.load_model("scaled", config=json.dumps(config))
    assert _events(repo) == ["init scaled_0_0", "init scaled_0_1"]
    client.close()


def test_other_changes_still_load_the_version_again(server: ServerThread, repo: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(3):
        _infer(client)
    _config(
        repo / "scaled",
        "{ count: 2 kind: KIND_CPU }",
        'parameters { key: "edited" value { string_value: "1" } }',
    )
    client.load_model("scaled")
    # Triton's ConfigChangeRequiresReload: a new version with new instances, the old one's
    # finalized; its statistics start again
    events = _wait_for_events(repo, 4)
    assert events[0] == "init scaled_0_0"
    assert sorted(events[1:3]) == ["init scaled_0_0", "init scaled_0_1"]  # (concurrently)
    assert events[3:] == ["fini scaled_0_0"]
    assert _stats(client) == 0
    assert _infer(client)[0] == 1
    client.close()


def test_changed_model_files_load_the_version_again(server: ServerThread, repo: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    folder = repo / "scaled"
    with (folder / "1" / "model.py").open("a") as out:
        out.write("\n# edited\n")
    _config(folder, "{ count: 2 kind: KIND_CPU }")
    client.load_model("scaled")
    events = _wait_for_events(repo, 4)
    assert sorted(events[1:]) == ["fini scaled_0_0", "init scaled_0_0", "init scaled_0_1"]
    client.close()


def test_an_invalid_instance_group_is_refused_and_the_version_serves_on(
    server: ServerThread, repo: Path
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert _infer(client) == (1, "scaled_0_0")
    _config(repo / "scaled", "{ count: 2 kind: KIND_CPU gpus: [ 0 ] }")
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("scaled")
    reason = (
        "Invalid argument: instance group scaled_0 of model scaled has kind KIND_CPU but "
        "specifies one or more GPUs"
    )
    # Triton 2.51's words, status 400
    assert refused.value.status() == "400"
    assert refused.value.message() == (
        f"load failed for model 'scaled': version 1 is at READY state: {reason};\n"
    )
    # the version serves on as it was: READY, the reason in the index, its instance kept
    assert client.get_model_repository_index() == [
        {"name": "scaled", "version": "1", "state": "READY", "reason": reason}
    ]
    assert client.is_model_ready("scaled")
    assert _infer(client) == (2, "scaled_0_0")
    assert client.get_model_config("scaled")["instance_group"][0]["count"] == 1
    assert _events(repo) == ["init scaled_0_0"]
    # a valid group then updates it and clears the reason
    _config(repo / "scaled", "{ count: 2 kind: KIND_CPU }")
    client.load_model("scaled")
    assert client.get_model_repository_index() == [
        {"name": "scaled", "version": "1", "state": "READY"}
    ]
    assert _events(repo) == ["init scaled_0_0", "init scaled_0_1"]
    client.close()


def test_a_failing_new_instance_leaves_the_version_as_it_was(
    server: ServerThread, repo: Path
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert _infer(client) == (1, "scaled_0_0")
    (repo / "refuse").write_text("")  # new instances' initialize raises (see MODEL)
    _config(repo / "scaled", "{ count: 3 kind: KIND_CPU }")
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("scaled")
    message = refused.value.message()
    assert message.startswith("load failed for model 'scaled': version 1 is at READY state: ")
    assert "refused scaled_0_" in message
    # nothing changed: the one instance serves, the config says so, the index gives why
    assert _events(repo) == ["init scaled_0_0"]
    assert _infer(client) == (2, "scaled_0_0")
    assert client.get_model_config("scaled")["instance_group"][0]["count"] == 1
    (entry,) = client.get_model_repository_index()
    assert entry["state"] == "READY"
    assert "refused scaled_0_" in entry["reason"]
    (repo / "refuse").unlink()
    _config(repo / "scaled", "{ count: 3 kind: KIND_CPU }")  # rewritten: a plain load of
    # unchanged files does nothing
    client.load_model("scaled")
    assert sorted(_events(repo)) == ["init scaled_0_0", "init scaled_0_1", "init scaled_0_2"]
    client.close()


def test_polling_updates_in_place(repo: Path) -> None:
    with running_server(repo, model_control_mode="poll", repository_poll_secs=0) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert _infer(client) == (1, "scaled_0_0")
        _config(repo / "scaled", "{ count: 2 kind: KIND_CPU }")
        assert server.handle is not None
        server.call(server.handle.service.manager.poll_once())
        assert _events(repo) == ["init scaled_0_0", "init scaled_0_1"]
        assert _stats(client) == 1
        client.close()


SEQUENCE = "sequence_batching { direct { } max_sequence_idle_microseconds: 60000000 }"


def test_a_removed_instance_finishes_its_sequences_first(repo: Path) -> None:
    folder = repo / "scaled"
    _config(folder, "{ count: 3 kind: KIND_CPU }", SEQUENCE)
    with running_server(
        repo, model_control_mode="explicit", load_models=["scaled"], allow_grpc=True
    ) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        first = _infer(client, sequence_id=1, sequence_start=True)
        second = _infer(client, sequence_id=2, sequence_start=True)
        assert {first[1], second[1]} == {"scaled_0_0", "scaled_0_1"}
        _config(folder, "{ count: 1 kind: KIND_CPU }", SEQUENCE)
        client.load_model("scaled")
        # scaled_0_2 stays; the other two hold a sequence each: not finalized yet
        assert sorted(_events(repo)) == [f"init scaled_0_{i}" for i in range(3)]
        # the sequences go on where they started, a new one goes to the instance that stays
        assert _infer(client, sequence_id=1) == (2, first[1])
        assert _infer(client, sequence_id=3, sequence_start=True)[1] == "scaled_0_2"
        assert _events(repo)[3:] == []
        assert _infer(client, sequence_id=1, sequence_end=True) == (3, first[1])
        assert _wait_for_events(repo, 4)[3:] == [f"fini {first[1]}"]
        assert _infer(client, sequence_id=2, sequence_end=True) == (2, second[1])
        assert _wait_for_events(repo, 5)[3:] == [f"fini {first[1]}", f"fini {second[1]}"]
        assert _infer(client, sequence_id=3, sequence_end=True)[1] == "scaled_0_2"
        client.close()
    assert _wait_for_events(repo, 6)[5] == "fini scaled_0_2"


def _onnx_identity() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        "g",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [-1, 4])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [-1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def _onnx_config(folder: Path, count: int, extra: str = "") -> None:
    (folder / "config.pbtxt").write_text(
        'name: "ident" platform: "onnxruntime_onnx" max_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n{extra}\n"
    )


@pytest.mark.parametrize("batching", ["", "dynamic_batching { }"])
def test_onnxruntime_instances_update_in_place(tmp_path: Path, batching: str) -> None:
    folder = tmp_path / "models" / "ident"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(_onnx_identity())
    _onnx_config(folder, 1, batching)
    data = np.arange(8, dtype=np.float32).reshape(2, 4)

    def infer(client: httpclient.InferenceServerClient) -> None:
        given = httpclient.InferInput("INPUT", [2, 4], "FP32")
        given.set_data_from_numpy(data)
        assert client.infer("ident", [given]).as_numpy("OUTPUT").tolist() == data.tolist()

    with running_server(
        tmp_path / "models", model_control_mode="explicit", load_models=["ident"]
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        for count in (3, 1, 2):
            for _ in range(4):
                infer(client)
            _onnx_config(folder, count, batching)
            client.load_model("ident")
            assert client.get_model_config("ident")["instance_group"][0]["count"] == count
        infer(client)
        stats = client.get_inference_statistics("ident")["model_stats"][0]
        # one version all along: its statistics count every request (a reload restarts them)
        assert int(stats["inference_count"]) == 2 * 13
        client.close()


def test_a_first_load_with_an_invalid_instance_group_fails_each_version(repo: Path) -> None:
    folder = repo / "scaled"
    _config(folder, "{ count: 1 kind: KIND_GPU }")
    with running_server(repo, model_control_mode="explicit") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("scaled")
        reason = (
            "Invalid argument: instance group scaled_0 of model scaled has kind KIND_GPU but no"
            " GPUs are available"
        )
        # Triton 2.51: 400, the version UNAVAILABLE with the reason (repokit's hint after it)
        assert refused.value.status() == "400"
        assert refused.value.message().startswith(
            f"load failed for model 'scaled': version 1 is at UNAVAILABLE state: {reason}"
        )
        (entry,) = client.get_model_repository_index()
        assert (entry["version"], entry["state"]) == ("1", "UNAVAILABLE")
        assert entry["reason"].startswith(reason)
        # fixed, it loads
        _config(folder, "{ count: 1 kind: KIND_CPU }")
        client.load_model("scaled")
        assert _infer(client) == (1, "scaled_0_0")
        client.close()


def test_rate_limited_instances_load_again(repo: Path) -> None:
    folder = repo / "scaled"
    limited = 'rate_limiter { resources [ { name: "R1" count: 2 } ] }'
    _config(folder, f"{{ count: 1 kind: KIND_CPU {limited} }}")
    with running_server(
        repo, model_control_mode="explicit", load_models=["scaled"], rate_limit="execution_count"
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert _infer(client) == (1, "scaled_0_0")
        _config(folder, f"{{ count: 2 kind: KIND_CPU {limited} }}")
        client.load_model("scaled")
        # not updated in place (see the README's differences): a new version, new instances
        events = _wait_for_events(repo, 4)
        assert events[0] == "init scaled_0_0"
        assert sorted(events[1:3]) == ["init scaled_0_0", "init scaled_0_1"]
        assert events[3:] == ["fini scaled_0_0"]
        assert _stats(client) == 0
        client.close()
