"""Metadata, /config JSON, statistics, metrics, shared memory, classification, logging."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest

from repokit.core.service import SCHEDULER_STOPPED, InferenceService
from repokit.core.settings import ServerSettings
from repokit.core.shared_memory import DISABLED_MESSAGE
from repokit.errors import Code, RepokitError
from repokit.protocol.types import InferRequest, InputSpec, RequestedOutput, SharedMemoryRef
from tests.core.conftest import Controls, backend_factory, f32

TRITON_CONFIGS = json.loads(
    (Path(__file__).parent / "testdata" / "triton_2_51_configs.json").read_text()
)


def add_sub_request(batch: int = 1) -> InferRequest:
    a, b = f32(batch, 16), f32(batch, 16, start=1)
    return InferRequest(
        "add_sub",
        inputs=[InputSpec("INPUT0", "FP32", a.shape, a), InputSpec("INPUT1", "FP32", b.shape, b)],
    )


def test_server_metadata_lists_only_implemented_extensions(service: InferenceService) -> None:
    meta = service.server_metadata()
    assert meta["name"] == "triton" and meta["version"] == "2.51.0"
    assert "cuda_shared_memory" not in meta["extensions"]
    assert meta["extensions"][-2:] == ["trace", "logging"]  # Triton's order
    assert meta["extensions"][:3] == ["classification", "sequence", "model_repository"]


def test_model_metadata_as_triton(service: InferenceService) -> None:
    # recorded from Triton 2.51 for the same configs
    assert service.model_metadata("add_sub") == {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "python",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]},
        ],
    }
    assert service.model_metadata("multiver")["versions"] == ["1", "3"]
    assert service.model_metadata("multiver", "3")["versions"] == ["3"]
    assert service.model_metadata("reshape_in")["inputs"][0]["shape"] == [-1, 4]
    assert service.model_metadata("strin")["inputs"][0]["datatype"] == "BYTES"
    assert service.model_metadata("add_sub_onnx")["platform"] == "onnxruntime_onnx"


def test_model_ready(service: InferenceService) -> None:
    assert service.model_ready("add_sub") is True
    assert service.model_ready("multiver", "3") is True
    # Triton 2.51 answers "Model version not ready" (400) for both of these
    assert service.model_ready("multiver", "2") is False
    assert service.model_ready("nope") is False


@pytest.mark.parametrize("name", sorted(TRITON_CONFIGS))
def test_config_json_equals_triton(service: InferenceService, name: str) -> None:
    mine = service.model_config_json(name)
    assert mine == TRITON_CONFIGS[name]
    assert list(mine) == list(TRITON_CONFIGS[name])  # same key order as well
    assert service.model_config(name).name == name


def test_config_json_of_onnx_model(service: InferenceService) -> None:
    config = service.model_config_json("add_sub_onnx")
    assert config["backend"] == "onnxruntime"
    assert config["default_model_filename"] == "model.onnx"
    assert config["dynamic_batching"]["preferred_batch_size"] == [8]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert config["instance_group"][0]["kind"] == "KIND_CPU"


async def test_onnx_model_runs_on_the_real_backend(service: InferenceService) -> None:
    request = add_sub_request(2)
    request.model_name = "add_sub_onnx"
    response = await service.infer(request)
    out = {t.name: t.data for t in response.outputs}
    np.testing.assert_allclose(out["OUTPUT0"], f32(2, 16) * 2 + 1)


async def test_statistics_count_requests_and_batches(service: InferenceService) -> None:
    empty = service.model_statistics("add_sub")["model_stats"][0]
    assert empty["inference_count"] == 0 and empty["last_inference"] == 0
    await service.infer(add_sub_request(1))
    await service.infer(add_sub_request(8))
    with pytest.raises(RepokitError):  # rejected by the checks: not counted, as Triton
        await service.infer(add_sub_request(9))
    stats = service.model_statistics("add_sub")["model_stats"][0]
    assert (stats["name"], stats["version"]) == ("add_sub", "1")
    assert stats["inference_count"] == 9
    assert stats["execution_count"] == 2
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 2 and inference["success"]["ns"] > 0
    assert inference["fail"] == {"count": 0, "ns": 0}
    assert inference["queue"]["count"] == 2
    assert inference["compute_infer"]["count"] == 2
    assert inference["cache_hit"] == {"count": 0, "ns": 0}
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 8]
    assert stats["batch_stats"][0]["compute_input"] == {"count": 1, "ns": 1000}
    assert stats["response_stats"] == {} and stats["memory_usage"] == []
    assert stats["last_inference"] > 1_600_000_000_000
    everything = service.model_statistics()["model_stats"]
    assert {(s["name"], s["version"]) for s in everything} >= {("add_sub", "1"), ("multiver", "3")}
    assert ("multiver", "2") not in {(s["name"], s["version"]) for s in everything}


@pytest.mark.parametrize(
    ("name", "version", "message"),
    [
        ("nope", "", "requested model 'nope' is not available"),
        ("nope", "1", "requested model 'nope' is not available"),
        ("multiver", "2", "requested model version is not available for model 'multiver'"),
    ],
)
def test_statistics_errors(
    service: InferenceService, name: str, version: str, message: str
) -> None:
    with pytest.raises(RepokitError) as error:
        service.model_statistics(name, version)
    assert (error.value.code, error.value.message) == (Code.INVALID_ARG, message)


async def test_metrics_text(service: InferenceService) -> None:
    await service.infer(add_sub_request(1))
    await service.infer(add_sub_request(3))
    text = service.metrics_text()
    assert (
        "# HELP nv_inference_request_success Number of successful inference requests, "
        "all batch sizes\n# TYPE nv_inference_request_success counter\n" in text
    )
    assert 'nv_inference_request_success{model="add_sub",version="1"} 2\n' in text
    assert 'nv_inference_count{model="add_sub",version="1"} 4\n' in text
    assert 'nv_inference_exec_count{model="add_sub",version="1"} 2\n' in text
    for reason in ("REJECTED", "OTHER", "CANCELED", "BACKEND"):
        assert (
            f'nv_inference_request_failure{{model="add_sub",reason="{reason}",version="1"}} 0'
            in text
        )
    assert 'nv_inference_pending_request_count{model="add_sub",version="1"} 0\n' in text
    assert re.search(
        r'nv_model_load_duration_secs\{model="add_sub",version="1"\} [0-9.e-]+\n', text
    )
    assert "# TYPE nv_inference_pending_request_count gauge" in text
    for line in text.splitlines():  # every sample line is a well-formed Prometheus sample
        assert line.startswith("#") or re.fullmatch(r"nv_[a-z_]+(\{[^}]*\})? [0-9.e+-]+", line)
    assert re.search(r"\nnv_cpu_memory_total_bytes [1-9][0-9]*\n", text)  # CPU gauges, unlabelled


async def test_classification_with_labels(service: InferenceService) -> None:
    data = np.array([[0.1, 0.9, 0.3, 0.2], [5, 1, 2, 7]], np.float32)
    request = InferRequest(
        "classify",
        inputs=[InputSpec("X", "FP32", (2, 4), data)],
        outputs=[RequestedOutput("PROB", classification=3)],
    )
    response = await service.infer(request)
    (out,) = response.outputs
    # Triton 2.51's answer for the same request
    assert (out.datatype, out.shape) == ("BYTES", (2, 3))
    assert out.data.reshape(-1).tolist() == [
        b"0.900000:1:dog",
        b"0.300000:2:bird",
        b"0.200000:3",
        b"7.000000:3",
        b"5.000000:0:cat",
        b"2.000000:2:bird",
    ]


async def test_classification_of_unsupported_type(service: InferenceService) -> None:
    request = InferRequest(
        "strin",
        inputs=[InputSpec("S", "BYTES", (1,), np.array([b"x"], dtype=object))],
        outputs=[RequestedOutput("S_OUT", classification=1)],
    )
    with pytest.raises(RepokitError) as error:
        await service.infer(request)
    assert error.value.message == (
        "class result not available for output due to unsupported type 'BYTES'"
    )
    stats = service.model_statistics("strin")["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] == 1


@pytest.fixture
def shm() -> Iterator[shared_memory.SharedMemory]:
    region = shared_memory.SharedMemory(create=True, size=256)
    try:
        yield region
    finally:
        region.close()
        region.unlink()


async def test_shared_memory_inputs_and_outputs(
    service: InferenceService, shm: shared_memory.SharedMemory
) -> None:
    np.ndarray((32,), np.float32, shm.buf)[:] = np.arange(32, dtype=np.float32)
    key = "/" + shm.name.lstrip("/")
    service.shm_register("in", key, 0, 128)
    service.shm_register("out", key, 128, 128)  # a non page-aligned offset works too
    assert service.shm_status() == [
        {"name": "in", "key": key, "offset": 0, "byte_size": 128},
        {"name": "out", "key": key, "offset": 128, "byte_size": 128},
    ]
    assert service.shm_status("out") == [service.shm_status()[1]]
    request = InferRequest(
        "add_sub",
        inputs=[
            InputSpec("INPUT0", "FP32", (1, 16), None, SharedMemoryRef("in", 0, 64)),
            InputSpec("INPUT1", "FP32", (1, 16), None, SharedMemoryRef("in", 64, 64)),
        ],
        outputs=[
            RequestedOutput("OUTPUT0", shm=SharedMemoryRef("out", 0, 64)),
            RequestedOutput("OUTPUT1"),
        ],
    )
    response = await service.infer(request)
    ref, datatype, shape = response.shm_outputs["OUTPUT0"]
    assert (ref.region, datatype, shape) == ("out", "FP32", (1, 16))
    written = np.ndarray((16,), np.float32, shm.buf, offset=128).copy()
    np.testing.assert_array_equal(written, np.arange(16) + np.arange(16, 32))
    assert [t.name for t in response.outputs] == ["OUTPUT1"]
    service.shm_unregister("in")
    service.shm_unregister("nope")  # unknown names are fine, as Triton
    assert [r["name"] for r in service.shm_status()] == ["out"]
    service.shm_unregister()
    assert service.shm_status() == []


def spec_in(region: str, offset: int, size: int) -> list[InputSpec]:
    return [
        InputSpec(n, "FP32", (1, 16), None, SharedMemoryRef(region, offset, size))
        for n in ("INPUT0", "INPUT1")
    ]


async def test_shared_memory_errors(
    service: InferenceService, shm: shared_memory.SharedMemory
) -> None:
    key = "/" + shm.name.lstrip("/")
    service.shm_register("r1", key, 0, 256)
    cases: list[tuple[object, Code, str]] = [
        (
            lambda: service.shm_register("r1", key, 0, 64),
            Code.ALREADY_EXISTS,
            "shared memory region 'r1' already in manager",
        ),
        (
            lambda: service.shm_register("r2", "/nonexist_repokit_zz", 0, 64),
            Code.INTERNAL,
            "Unable to open shared memory region: '/nonexist_repokit_zz'",
        ),
        (
            lambda: service.shm_register("r2", "../etc/passwd", 0, 64),
            Code.INTERNAL,
            "Unable to open shared memory region: '../etc/passwd'",
        ),
        (
            lambda: service.shm_register("r2", key, 0, 100000),
            Code.INVALID_ARG,
            "failed to register shared memory region 'r2': invalid args",
        ),
        (
            lambda: service.shm_register("r2", key, 300, 10),
            Code.INVALID_ARG,
            "failed to register shared memory region 'r2': invalid args",
        ),
        (
            lambda: service.shm_status("nope"),
            Code.NOT_FOUND,
            "Unable to find system shared memory region: 'nope'",
        ),
    ]
    for call, code, message in cases:
        with pytest.raises(RepokitError) as error:
            call()  # type: ignore[operator]
        assert (error.value.code, error.value.message) == (code, message)
    requests = [
        (
            InferRequest("add_sub", inputs=spec_in("zz", 0, 64)),
            Code.NOT_FOUND,
            "Unable to find shared memory region: 'zz'",
        ),
        (
            InferRequest("add_sub", inputs=spec_in("r1", 240, 64)),
            Code.INVALID_ARG,
            "Invalid offset + byte size for shared memory region: 'r1'",
        ),
        (  # an offset past the region's end (Triton's own message for it)
            InferRequest("add_sub", inputs=spec_in("r1", 256, 64)),
            Code.INVALID_ARG,
            "Invalid offset for shared memory region: 'r1'",
        ),
        (
            InferRequest("add_sub", inputs=spec_in("r1", -1, 64)),
            Code.INVALID_ARG,
            "Invalid offset for shared memory region: 'r1'",
        ),
        (
            InferRequest("add_sub", inputs=spec_in("r1", 0, 60)),
            Code.INVALID_ARG,
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model "
            "'add_sub'. Expected 64, got 60",
        ),
        (
            InferRequest(
                "add_sub",
                inputs=spec_in("r1", 0, 64),
                outputs=[RequestedOutput("OUTPUT0", shm=SharedMemoryRef("r1", 0, 32))],
            ),
            Code.INTERNAL,  # as Triton 2.51 (gRPC INTERNAL, HTTP 500)
            "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should "
            "be at least 64 bytes to hold the results",
        ),
        (
            InferRequest(
                "add_sub",
                inputs=spec_in("r1", 0, 64),
                outputs=[
                    RequestedOutput("OUTPUT0", classification=2, shm=SharedMemoryRef("r1", 0, 64))
                ],
            ),
            Code.INVALID_ARG,
            "Output can't set both 'shared_memory_region' and 'classification'",
        ),
    ]
    for request, code, message in requests:
        with pytest.raises(RepokitError) as error:
            await service.infer(request)
        assert (error.value.code, error.value.message) == (code, message)


async def test_shared_memory_is_off_by_default(tmp_path: Path, controls: Controls) -> None:
    from repokit.core.compose import build_service

    svc = build_service(ServerSettings(repositories=[tmp_path]), backend_factory(controls))
    await svc.start()
    try:
        for call in (
            lambda: svc.shm_register("r", "/x", 0, 1),
            lambda: svc.shm_status(),
            lambda: svc.shm_unregister(),
        ):
            with pytest.raises(RepokitError) as error:
                call()
            assert (error.value.code, error.value.message) == (Code.UNSUPPORTED, DISABLED_MESSAGE)
    finally:
        await svc.stop()


def test_log_settings(service: InferenceService) -> None:
    assert service.log_settings() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    updated = service.update_log_settings({"log_verbose_level": 1, "nope": 1, "log_info": None})
    assert updated["log_verbose_level"] == 1 and updated["log_info"] is True
    assert service.update_log_settings({"log_format": "ISO8601"})["log_format"] == "ISO8601"
    # codes and messages recorded from Triton 2.51's /v2/logging
    cases = [
        ({"log_format": "xx"}, Code.UNAVAILABLE, "invalid argument for --log_format, got: xx"),
        (
            {"log_file": "a"},
            Code.UNSUPPORTED,
            "log file location can not be updated through network protocol",
        ),
        (
            {"log_verbose_level": -1},
            Code.INTERNAL,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        ({"log_info": "yes"}, Code.INTERNAL, "attempt to access JSON non-boolean as boolean"),
        ({"log_format": 3}, Code.INTERNAL, "attempt to access JSON non-string as string"),
    ]
    for change, code, message in cases:
        with pytest.raises(RepokitError) as error:
            service.update_log_settings({"log_warning": False, **change})
        assert (error.value.code, error.value.message) == (code, message)
    assert service.log_settings()["log_warning"] is True  # nothing applied on error


async def test_sample_repository_on_the_real_backends(tmp_path: Path) -> None:
    """The sample python and ONNX models through the backend registry (no test backend)."""
    import shutil

    from repokit.core.compose import build_service
    from repokit.paths import default_sample_repository

    repo = tmp_path / "models"
    shutil.copytree(default_sample_repository(), repo)
    svc = build_service(ServerSettings(repositories=[repo]))
    await svc.start()
    try:
        assert all(e["state"] == "READY" for e in svc.repository_index())
        assert svc.server_ready() is True
        for model in ("add_sub", "add_sub_onnx"):
            request = add_sub_request(2)
            request.model_name = model
            response = await svc.infer(request)
            out = {t.name: t.data for t in response.outputs}
            np.testing.assert_allclose(out["OUTPUT0"], f32(2, 16) * 2 + 1)
            np.testing.assert_allclose(out["OUTPUT1"], np.full((2, 16), -1.0))
        data = np.arange(5, dtype=np.float32)
        identity = await svc.infer(
            InferRequest("identity", inputs=[InputSpec("INPUT0", "FP32", (5,), data)])
        )
        np.testing.assert_array_equal(identity.outputs[0].data, data)
        # the sequence model loads (its batcher comes with the batching issue)
        assert svc.model_ready("accumulate")
        assert svc.model_config_json("accumulate") == TRITON_CONFIGS["accumulate"]
    finally:
        await svc.stop()


async def test_shutdown_refuses_new_requests_but_lets_started_sequences_go_on(
    service: InferenceService, controls: Controls
) -> None:
    def step(value: int, start: bool = False, end: bool = False) -> InferRequest:
        data = np.array([[value]], np.int32)
        return InferRequest(
            "accumulate",
            inputs=[InputSpec("INPUT", "INT32", (1, 1), data)],
            sequence_id=77,
            sequence_start=start,
            sequence_end=end,
        )

    await service.infer(step(1, start=True))
    controls.gate, controls.started = asyncio.Event(), asyncio.Event()
    held = asyncio.create_task(service.infer(add_sub_request(1)))
    await controls.started.wait()
    stopping = asyncio.create_task(service.stop())
    while True:  # until the service says it is exiting
        try:
            service.server_live()
        except RepokitError:
            break
        await asyncio.sleep(0)
    with pytest.raises(RepokitError) as refused:
        await service.infer(add_sub_request(1))
    # Triton lets the request through to the model's scheduler, which refuses it
    assert (refused.value.code, refused.value.message) == (
        Code.UNAVAILABLE,
        f"[request id: <id_unknown>] {SCHEDULER_STOPPED}",
    )
    with pytest.raises(RepokitError, match=SCHEDULER_STOPPED):
        await service.infer(step(5, start=True))  # a new sequence does not start
    with pytest.raises(RepokitError) as ensemble:
        await service.infer(InferRequest("add_sub_ensemble", id="e1"))
    # Triton's ensemble scheduler takes it; its first step's scheduler refuses it
    assert ensemble.value.message == (
        f"in ensemble 'add_sub_ensemble', [request id: e1] {SCHEDULER_STOPPED}"
    )
    going_on = asyncio.create_task(service.infer(step(2)))
    await asyncio.sleep(0)
    assert not going_on.done()  # admitted: it waits for the model like the held request
    controls.gate.set()
    response = await going_on
    assert response.outputs[0].data.tolist() == [[2]]
    await held
    # the sequence is still open: Triton counts it as in flight, and the stop waits for its
    # end (or its idle timeout, 5 s for accumulate)
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert not stopping.done()
    assert service.manager.get("accumulate", "").shutdown_inflight() == 1
    ended = await service.infer(step(3, end=True))
    assert ended.outputs[0].data.tolist() == [[3]]
    assert await asyncio.wait_for(stopping, 10) is True


async def test_model_lookups_after_the_unload_say_the_server_is_exiting(
    service: InferenceService,
) -> None:
    """A request that arrives once the models are unloading gets "Server exiting", never the
    404 of a model that has no versions (the HTTP frontend asks is_decoupled before admit)."""
    assert service.is_decoupled("add_sub") is False
    await service.stop()
    for call in (
        lambda: service.is_decoupled("add_sub"),
        lambda: service.is_decoupled("no_such_model"),
    ):
        with pytest.raises(RepokitError) as refused:
            call()
        assert (refused.value.code, refused.value.message) == (Code.UNAVAILABLE, "Server exiting")


async def test_verbose_levels_say_what_requests_do(service: InferenceService) -> None:
    import io

    from repokit.core import server_log

    stream = io.StringIO()
    handler = server_log.install(service.settings.log, stream)
    try:
        service.update_log_settings({"log_verbose_level": 1})
        await service.infer(add_sub_request(1))
        with pytest.raises(RepokitError):
            await service.infer(InferRequest("add_sub", inputs=[]))
        level1 = stream.getvalue()
        service.update_log_settings({"log_verbose_level": 2})
        await service.infer(add_sub_request(1))
    finally:
        server_log.uninstall(handler)
    assert "prepared: model: add_sub, requested version: -1, actual version: 1" in level1
    assert "completed: model add_sub version 1" in level1
    tag = "[request id: <id_unknown>]"  # twice, as in Triton's line
    assert f"{tag} Infer failed: {tag} expected 2" in level1
    assert "add response output" not in level1
    detail = stream.getvalue()[len(level1) :]
    assert "add response output: output: OUTPUT0, type: FP32, shape: [1, 16]" in detail
