"""Loading, reloading, unloading, control modes, index states and readiness."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from repokit.core.compose import build_service
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings
from repokit.errors import Code, RepokitError
from repokit.protocol.types import InferRequest, InputSpec
from tests.core.conftest import Controls, backend_factory, build_repository, f32

IDENTITY_CONFIG = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}


async def make(repo: Path, controls: Controls, **settings: object) -> InferenceService:
    svc = build_service(
        ServerSettings(repositories=[repo], **settings),  # type: ignore[arg-type]
        backend_factory(controls),
    )
    await svc.start()
    return svc


@pytest.fixture
async def explicit(tmp_path: Path, controls: Controls) -> AsyncIterator[InferenceService]:
    svc = await make(
        build_repository(tmp_path, bad=True),
        controls,
        model_control_mode="explicit",
        load_models=["*"],
    )
    yield svc
    await svc.stop()


def identity_request(model: str = "identity") -> InferRequest:
    data = f32(3)
    return InferRequest(model, inputs=[InputSpec("INPUT0", "FP32", (3,), data)])


async def test_none_mode_index_and_readiness(tmp_path: Path, controls: Controls) -> None:
    svc = await make(build_repository(tmp_path, bad=True), controls)
    try:
        index = {(e["name"], e.get("version")): e for e in svc.repository_index()}
        assert index[("add_sub", "1")] == {"name": "add_sub", "version": "1", "state": "READY"}
        assert index[("multiver", "1")]["state"] == "READY"
        assert index[("multiver", "3")]["state"] == "READY"
        assert ("multiver", "2") not in index
        bad = index[("bad_mbs", None)]
        assert (bad["name"], bad["state"]) == ("bad_mbs", "UNAVAILABLE")
        # the reason is the validator's finding: Triton's words, then advice
        assert bad["reason"].startswith("'max_batch_size' must be non-negative value for bad_mbs")
        assert index[("parse_err", None)]["reason"].startswith("failed to read text proto from")
        assert index[("noversion", None)]["reason"].startswith(
            "at least one version must be available under the version policy of model 'noversion'"
        )
        # the ensemble is READY (its composing models loaded); its scheduler comes later
        assert index[("add_sub_ensemble", "1")]["state"] == "READY"
        assert svc.server_live() is True
        assert svc.server_ready() is False  # strict readiness: failed models count
        assert {e["name"] for e in svc.repository_index(ready_only=True)} >= {"add_sub"}
        assert all(e["state"] == "READY" for e in svc.repository_index(ready_only=True))
        with pytest.raises(RepokitError) as error:
            svc.model_metadata("bad_mbs")
        assert error.value.message == "Request for unknown model: 'bad_mbs' is not found"
        with pytest.raises(RepokitError) as error:
            svc.model_metadata("noversion")
        assert error.value.message == (
            "Request for unknown model: 'noversion' has no available versions"
        )
        assert svc.manager.failed_models().keys() >= {"bad_mbs", "parse_err", "noversion"}
    finally:
        await svc.stop()


async def test_readiness_without_strict_and_with_good_repository(
    tmp_path: Path, controls: Controls
) -> None:
    bad = await make(build_repository(tmp_path / "a", bad=True), controls, strict_readiness=False)
    good = await make(build_repository(tmp_path / "b"), controls)
    try:
        assert bad.server_ready() is True
        assert good.server_ready() is True
    finally:
        await bad.stop()
        await good.stop()
    with pytest.raises(RepokitError) as error:
        good.server_ready()
    assert (error.value.code, error.value.message) == (Code.UNAVAILABLE, "Server exiting")


async def test_load_unload_need_explicit_mode(service: InferenceService) -> None:
    for call in (service.load_model("add_sub"), service.unload_model("add_sub")):
        with pytest.raises(RepokitError) as error:
            await call
        assert (error.value.code, error.value.message) == (
            Code.UNAVAILABLE,
            "explicit model load / unload is not allowed if polling is enabled",
        )


async def test_explicit_mode_loads_only_what_is_asked(tmp_path: Path, controls: Controls) -> None:
    svc = await make(
        build_repository(tmp_path),
        controls,
        model_control_mode="explicit",
        load_models=["identity"],
    )
    try:
        index = {e["name"]: e for e in svc.repository_index()}
        assert index["identity"]["state"] == "READY"
        assert index["add_sub"] == {"name": "add_sub"}
        assert svc.server_ready() is True
        await svc.load_model("add_sub_ensemble")  # loads its composing models too
        assert svc.model_ready("add_sub_ensemble")
        assert svc.model_ready("add_sub") and svc.model_ready("add_sub_onnx")
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.float32)
        response = await svc.infer(
            InferRequest(
                "add_sub_ensemble",
                inputs=[InputSpec("A", "FP32", (1, 16), a), InputSpec("B", "FP32", (1, 16), b)],
            )
        )
        outputs = {t.name: t.data for t in response.outputs}
        np.testing.assert_array_equal(outputs["TWICE_A"], 2 * a)
        np.testing.assert_array_equal(outputs["TWICE_B"], 2 * b)
        await svc.unload_model("add_sub_ensemble", unload_dependents=True)
        assert not svc.model_ready("add_sub")
    finally:
        await svc.stop()


async def test_unload_and_reload(explicit: InferenceService, controls: Controls) -> None:
    await explicit.unload_model("identity")
    entry = [e for e in explicit.repository_index() if e["name"] == "identity"]
    assert entry == [
        {"name": "identity", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    assert explicit.model_ready("identity") is False
    with pytest.raises(RepokitError) as error:
        await explicit.infer(identity_request())
    assert (error.value.code, error.value.message) == (
        Code.NOT_FOUND,
        "Request for unknown model: 'identity' has no available versions",
    )
    with pytest.raises(RepokitError) as error:
        explicit.model_metadata("identity", "1")
    assert (error.value.code, error.value.message) == (
        Code.UNAVAILABLE,
        "Request for unknown model: 'identity' version 1 is not at ready state",
    )
    await explicit.unload_model("never_heard_of")  # Triton answers 200
    await explicit.load_model("identity")
    assert explicit.model_ready("identity")
    assert controls.loads["identity"] == 2 and controls.unloads["identity"] == 1
    await explicit.load_model("identity")  # nothing changed: no reload (as Triton)
    assert controls.loads["identity"] == 2


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Model name cannot be empty. Please enter a valid name to deploy."),
        ("  ", "Model name cannot be empty. Please enter a valid name to deploy."),
        ("..", "invalid model name '..', model name must not contain path traversal characters"),
        ("a/b", "invalid model name 'a/b', model name must not contain path traversal characters"),
    ],
)
async def test_model_name_checks(explicit: InferenceService, name: str, message: str) -> None:
    with pytest.raises(RepokitError) as error:
        await explicit.load_model(name)
    assert (error.value.code, error.value.message) == (Code.INVALID_ARG, message)


async def test_load_failures(explicit: InferenceService) -> None:
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("nonexist")
    assert (error.value.code, error.value.message) == (
        Code.INTERNAL,
        "failed to load 'nonexist', failed to poll from model repository",
    )
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("bad_mbs")
    assert error.value.code is Code.INTERNAL
    assert error.value.message.startswith(
        "failed to load 'bad_mbs', failed to poll from model repository: "
        "'max_batch_size' must be non-negative value for bad_mbs"
    )
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("noversion")
    assert error.value.code is Code.INVALID_ARG
    assert error.value.message.startswith(
        "load failed for model 'noversion': at least one version must be available under the "
        "version policy of model 'noversion'"
    )


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("{not json", "Invalid config override: invalid JSON"),
        (json.dumps({"inputs": []}), "Invalid config override: "),
        (
            json.dumps({"input": [{"name": "X", "data_type": "TYPE_NOPE"}]}),
            "Invalid config override: ",
        ),
        (
            json.dumps({"name": "other", "backend": "python"}),
            "unexpected directory name 'identity' for model 'other', directory name must equal "
            "model name",
        ),
    ],
)
async def test_config_override_errors(
    explicit: InferenceService, config: str, expected: str
) -> None:
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("identity", config)
    assert error.value.code is Code.INTERNAL
    prefix = "failed to load 'identity', failed to poll from model repository: "
    assert error.value.message.startswith(prefix + expected)
    assert explicit.model_ready("identity")  # the loaded version keeps serving


async def test_config_override_replaces_the_config(explicit: InferenceService) -> None:
    config = dict(
        IDENTITY_CONFIG,
        max_batch_size=4,
        input=[
            {"name": "INPUT0", "data_type": "type_fp32", "dims": [-1]}  # enums case-insensitive
        ],
    )
    await explicit.load_model("identity", json.dumps(config))
    shown = explicit.model_config_json("identity")
    assert shown["max_batch_size"] == 4
    assert shown["input"][0]["data_type"] == "TYPE_FP32"
    assert shown["instance_group"][0]["name"] == "identity"  # as Triton 2.51 names it
    assert explicit.model_metadata("identity")["inputs"][0]["shape"] == [-1, -1]
    await explicit.load_model("identity")  # files unchanged: the override stays (as Triton)
    assert explicit.model_config_json("identity")["max_batch_size"] == 4


async def test_file_parameters(explicit: InferenceService, tmp_path: Path) -> None:
    files = {"file:1/model.py": b"# new model\nclass TritonPythonModel:\n    pass\n"}
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("newm", None, files)
    assert error.value.message.endswith(
        "Load parameter 'config' must be specified for model file override"
    )
    await explicit.load_model("newm", json.dumps(IDENTITY_CONFIG), files)
    response = await explicit.infer(identity_request("newm"))
    np.testing.assert_array_equal(response.outputs[0].data, f32(3))
    loaded = explicit.manager.get("newm")
    assert (loaded.directory / "1" / "model.py").read_bytes().startswith(b"# new model\n")
    private = loaded.directory
    await explicit.unload_model("newm")
    assert not private.exists()  # the private copy is removed with the model


@pytest.mark.parametrize(
    "key", ["file:../x.py", "file:1/../../x.py", "file:/tmp/x.py", "file:", "file:."]
)
async def test_file_parameters_must_stay_in_the_model_directory(
    explicit: InferenceService, tmp_path: Path, key: str
) -> None:
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("newm", json.dumps(IDENTITY_CONFIG), {key: b"x"})
    assert error.value.code is Code.INTERNAL
    assert f"Invalid file parameter '{key}' with normalized path" in error.value.message
    assert "must stay within model directory." in error.value.message
    assert not (tmp_path / "x.py").exists()


@pytest.mark.parametrize(
    ("files", "detail"),
    [
        # simple_grpc_model_control.py: a path component longer than NAME_MAX
        ({"file:" + "A" * 256: b"a"}, "Invalid file parameter 'file:AAAA"),
        ({"file:1/" + "B" * 300 + "/model.py": b"a"}, "File name too long"),
        ({"file:1": b"a", "file:1/model.py": b"b"}, "directory has been created as a file"),
        ({"file:1/model.py": b"a", "file:1": b"b"}, "file has been created as a directory"),
    ],
    ids=["too-long", "too-long-directory", "file-then-directory", "directory-then-file"],
)
async def test_file_parameters_the_file_system_refuses(
    explicit: InferenceService, files: dict[str, bytes], detail: str
) -> None:
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("newm", json.dumps(IDENTITY_CONFIG), files)
    assert error.value.code is Code.INTERNAL
    assert error.value.message.startswith(
        "failed to load 'newm', failed to poll from model repository: Invalid file parameter"
    )
    assert detail in error.value.message
    assert explicit.server_live() and explicit.model_ready("identity")


async def test_unload_waits_for_in_flight_requests(
    explicit: InferenceService, controls: Controls
) -> None:
    controls.gate, controls.started = asyncio.Event(), asyncio.Event()
    request = asyncio.create_task(explicit.infer(identity_request()))
    await controls.started.wait()
    unload = asyncio.create_task(explicit.unload_model("identity"))
    await asyncio.sleep(0)  # let unload reach its drain
    for _ in range(5):
        await asyncio.sleep(0)
    states = [e["state"] for e in explicit.repository_index() if e["name"] == "identity"]
    assert states == ["UNLOADING"]
    assert not unload.done() and controls.unloads.get("identity", 0) == 0
    controls.gate.set()
    response = await request
    await unload
    np.testing.assert_array_equal(response.outputs[0].data, f32(3))
    assert controls.unloads["identity"] == 1


async def test_failed_load_does_not_touch_other_models(
    explicit: InferenceService, tmp_path: Path
) -> None:
    config = dict(IDENTITY_CONFIG, parameters={"fail_load": {"string_value": "boom"}})
    with pytest.raises(RepokitError) as error:
        await explicit.load_model("identity", json.dumps(config))
    # a failed reload keeps the serving version
    assert error.value.message == (
        "load failed for model 'identity': version 1 is at UNAVAILABLE state: Internal: boom;\n"
    )
    assert explicit.model_ready("identity")
    await explicit.infer(identity_request())
    assert explicit.model_ready("add_sub")


async def test_poll_mode_rescans(tmp_path: Path, controls: Controls) -> None:
    repo = build_repository(tmp_path)
    svc = await make(repo, controls, model_control_mode="poll", repository_poll_secs=0)
    try:
        # a broken config: the reload fails and the old version keeps serving
        config = repo / "identity" / "config.pbtxt"
        good = config.read_text()
        config.write_text(good.replace("max_batch_size: 0", "max_batch_size: -3"))
        await svc.manager.poll_once()
        assert svc.model_ready("identity")
        assert controls.loads["identity"] == 1
        # fixed with only a comment more: the same config, the version is kept (Triton 2.51)
        config.write_text(good + "\n# edit\n")
        await svc.manager.poll_once()
        assert svc.model_ready("identity")
        assert controls.loads["identity"] == 1
        # changed: reloaded
        config.write_text(good + '\nparameters { key: "edited" value: { string_value: "1" } }\n')
        await svc.manager.poll_once()
        assert controls.loads["identity"] == 2
        # a new model appears, another disappears
        shutil.copytree(repo / "identity", repo / "identity2")
        (repo / "identity2" / "config.pbtxt").write_text(good.replace('"identity"', '"identity2"'))
        shutil.rmtree(repo / "add_sub_ensemble")
        shutil.rmtree(repo / "opt_in")
        await svc.manager.poll_once()
        assert svc.model_ready("identity2")
        assert "opt_in" not in {e["name"] for e in svc.repository_index()}
        with pytest.raises(RepokitError):
            svc.model_metadata("opt_in")
        await svc.manager.poll_once()  # nothing changed: nothing reloads
        assert controls.loads["identity"] == 2
    finally:
        await svc.stop()


async def test_duplicate_model_across_repositories(tmp_path: Path, controls: Controls) -> None:
    first = build_repository(tmp_path / "a")
    second = tmp_path / "b"
    shutil.copytree(first / "identity", second / "identity")
    svc = build_service(ServerSettings(repositories=[first, second]), backend_factory(controls))
    await svc.start()
    try:
        entry = [e for e in svc.repository_index() if e["name"] == "identity"]
        assert entry == [
            {
                "name": "identity",
                "state": "UNAVAILABLE",
                "reason": "model appears in two or more repositories",
            }
        ]
    finally:
        await svc.stop()


async def test_stop_drains_then_unloads(tmp_path: Path, controls: Controls) -> None:
    svc = await make(build_repository(tmp_path), controls, exit_timeout_secs=30)
    controls.gate, controls.started = asyncio.Event(), asyncio.Event()
    request = asyncio.create_task(svc.infer(identity_request()))
    await controls.started.wait()
    stop = asyncio.create_task(svc.stop())
    for _ in range(5):
        await asyncio.sleep(0)
    with pytest.raises(RepokitError) as error:
        await svc.infer(identity_request())
    assert (error.value.code, error.value.message) == (
        Code.UNAVAILABLE,
        "[request id: <id_unknown>] Server is stopping, scheduler for model has stopped "
        "accepting new inference requests",
    )
    assert not stop.done()
    controls.gate.set()
    await request
    await stop
    assert controls.unloads["identity"] == 1


class _CountingLoads:
    """Backends whose load() fails ``failures`` times per model, and that record how many
    loads run at once."""

    def __init__(self, controls: Controls, failures: int = 0) -> None:
        self.inner = backend_factory(controls)
        self.failures = failures
        self.attempts: dict[str, int] = {}
        self.running = 0
        self.most = 0

    def __call__(self, context: object) -> object:
        backend = self.inner(context)  # type: ignore[arg-type]
        load = backend.load
        counter = self

        async def counted_load() -> None:
            name = backend.context.name
            counter.attempts[name] = counter.attempts.get(name, 0) + 1
            counter.running += 1
            counter.most = max(counter.most, counter.running)
            try:
                for _ in range(3):
                    await asyncio.sleep(0)  # let other loads start meanwhile
                if counter.attempts[name] <= counter.failures:
                    raise RepokitError(Code.INTERNAL, f"load attempt {counter.attempts[name]}")
                await load()
            finally:
                counter.running -= 1

        backend.load = counted_load  # type: ignore[method-assign]
        return backend


@pytest.mark.parametrize(("threads", "most"), [(1, 1), (4, 4)])
async def test_model_load_thread_count_bounds_concurrent_loads(
    repository: Path, controls: Controls, threads: int, most: int
) -> None:
    loads = _CountingLoads(controls)
    settings = ServerSettings(repositories=[repository], model_load_thread_count=threads)
    service = build_service(settings, loads)  # type: ignore[arg-type]
    await service.start()
    try:
        assert service.model_ready("add_sub") and service.model_ready("identity")
    finally:
        await service.stop()
    assert loads.most == most


@pytest.mark.parametrize(("retries", "ready"), [(0, False), (1, True)])
async def test_model_load_retry_count(
    repository: Path, controls: Controls, retries: int, ready: bool
) -> None:
    loads = _CountingLoads(controls, failures=1)
    settings = ServerSettings(repositories=[repository], model_load_retry_count=retries)
    service = build_service(settings, loads)  # type: ignore[arg-type]
    await service.start()
    try:
        assert service.model_ready("identity") is ready
        assert loads.attempts["identity"] == 1 + retries
    finally:
        await service.stop()
