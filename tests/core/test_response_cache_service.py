"""The response cache through InferenceService: which requests are answered from it, what the
statistics and metrics count, ensembles, and the models that cannot use it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from repokit.core.compose import build_service
from repokit.core.response_cache import CacheSettings
from repokit.core.service import InferenceService
from repokit.core.settings import MetricsSettings, ServerSettings
from repokit.errors import RepokitError
from repokit.protocol.types import InferRequest, InputSpec, RequestedOutput
from tests.core.conftest import Controls, backend_factory, write_model

IDENTITY = """
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }},
         {{ name: "Z" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""
CACHED = "response_cache { enable: true }"
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [ { model_name: "%s" model_version: -1
  input_map { key: "X" value: "X" } output_map { key: "Y" value: "OUT" } } ] }
%s
"""
MODELS = {
    "cached": IDENTITY.format(extra=CACHED),
    "plain": IDENTITY.format(extra=""),
    "failing": IDENTITY.format(
        extra=CACHED + ' parameters { key: "fail_execute" value: { string_value: "no" } }'
    ),
    "text": """
backend: "python"
max_batch_size: 0
input [ { name: "S" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "S_OUT" data_type: TYPE_STRING dims: [ -1 ] } ]
response_cache { enable: true }
""",
    "decoupled": IDENTITY.format(extra="model_transaction_policy { decoupled: true }"),
    "cached_decoupled": IDENTITY.format(
        extra=CACHED + " model_transaction_policy { decoupled: true }"
    ),
    "cached_sequence": IDENTITY.format(extra=CACHED + " sequence_batching { }"),
    "ens_cached": ENSEMBLE % ("plain", CACHED),
    "ens_of_cached": ENSEMBLE % ("cached", ""),
    "ens_decoupled": ENSEMBLE % ("decoupled", CACHED),
}
LOADABLE = ("cached", "plain", "failing", "text", "decoupled", "ens_cached", "ens_of_cached")


@pytest.fixture
def cache_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    for name, config in MODELS.items():
        write_model(repo, name, config)
    return repo


async def started(
    repo: Path, controls: Controls, cache_size: int | None = 1 << 20, **extra: object
) -> InferenceService:
    settings = ServerSettings(
        repositories=[repo],
        model_control_mode="explicit",
        load_models=list(LOADABLE),
        response_cache=CacheSettings(cache_size) if cache_size is not None else None,
        **extra,  # type: ignore[arg-type]
    )
    service = build_service(settings, backend_factory(controls))
    await service.start()
    return service


@pytest.fixture
async def service(cache_repository: Path, controls: Controls) -> AsyncIterator[InferenceService]:
    svc = await started(cache_repository, controls)
    yield svc
    await svc.stop()


def xreq(model: str, values: list[float], outputs: tuple[str, ...] = ()) -> InferRequest:
    data = np.array(values, dtype=np.float32)
    return InferRequest(
        model,
        inputs=[InputSpec("X", "FP32", data.shape, data)],
        outputs=[RequestedOutput(name) for name in outputs],
    )


def stats(service: InferenceService, model: str) -> dict[str, object]:
    (entry,) = service.model_statistics(model)["model_stats"]
    assert isinstance(entry, dict)
    return entry


def counts(service: InferenceService, model: str) -> dict[str, int]:
    entry = stats(service, model)
    inference = entry["inference_stats"]
    assert isinstance(inference, dict)
    found = {key: value["count"] for key, value in inference.items()}
    found["inference_count"] = int(entry["inference_count"])  # type: ignore[call-overload]
    found["execution_count"] = int(entry["execution_count"])  # type: ignore[call-overload]
    return found


def ran(controls: Controls, model_input: str = "X") -> int:
    return sum(1 for r in controls.seen if model_input in r.inputs)


async def test_an_identical_request_is_answered_without_running_the_model(
    service: InferenceService, controls: Controls
) -> None:
    first = await service.infer(xreq("cached", [1, 2, 3]))
    second = await service.infer(xreq("cached", [1, 2, 3]))
    assert ran(controls) == 1
    assert [(t.name, t.shape, t.data.tolist()) for t in second.outputs] == [
        (t.name, t.shape, t.data.tolist()) for t in first.outputs
    ]
    assert counts(service, "cached") == {
        "success": 2,
        "fail": 0,
        "queue": 2,
        "compute_input": 1,
        "compute_infer": 1,
        "compute_output": 1,
        "cache_hit": 1,
        "cache_miss": 1,
        "inference_count": 1,
        "execution_count": 1,
    }
    inference = stats(service, "cached")["inference_stats"]
    assert isinstance(inference, dict)
    assert inference["cache_hit"]["ns"] > 0 and inference["cache_miss"]["ns"] > 0


async def test_other_inputs_or_outputs_are_other_entries(
    service: InferenceService, controls: Controls
) -> None:
    await service.infer(xreq("cached", [1, 2]))
    other = await service.infer(xreq("cached", [1, 3]))
    assert other.outputs[0].data.tolist() == [1.0, 3.0]
    only_y = await service.infer(xreq("cached", [1, 2], ("Y",)))
    only_z = await service.infer(xreq("cached", [1, 2], ("Z",)))
    assert [t.name for t in only_y.outputs] == ["Y"]
    assert [t.name for t in only_z.outputs] == ["Z"]  # Triton 2.51 would answer Y here
    assert ran(controls) == 2  # the entry of [1, 2] holds every output: Y and Z are hits
    fresh = await service.infer(xreq("cached", [5, 6], ("Z",)))
    assert [t.name for t in fresh.outputs] == ["Z"] and ran(controls) == 3
    # this model produces every output whatever is asked: the entry holds Y and Z
    every = await service.infer(xreq("cached", [5, 6]))
    assert [t.name for t in every.outputs] == ["Y", "Z"] and ran(controls) == 3


async def test_a_hit_is_finished_per_request(service: InferenceService) -> None:
    await service.infer(xreq("cached", [0.1, 0.9, 0.5], ("Y",)))
    request = xreq("cached", [0.1, 0.9, 0.5])
    request.outputs = [RequestedOutput("Y", classification=2)]
    response = await service.infer(request)
    assert counts(service, "cached")["cache_hit"] == 1
    assert response.outputs[0].datatype == "BYTES"
    assert response.outputs[0].data.tolist() == [b"0.900000:1", b"0.500000:2"]


async def test_bytes_inputs_are_cached(service: InferenceService, controls: Controls) -> None:
    words = np.array([b"ab", b"c"], dtype=object)
    request = InferRequest("text", inputs=[InputSpec("S", "BYTES", (2,), words)])
    first = await service.infer(request)
    second = await service.infer(
        InferRequest("text", inputs=[InputSpec("S", "BYTES", (2,), words.copy())])
    )
    assert second.outputs[0].data.tolist() == first.outputs[0].data.tolist() == [b"ab", b"c"]
    split = np.array([b"a", b"bc"], dtype=object)
    third = await service.infer(InferRequest("text", inputs=[InputSpec("S", "BYTES", (2,), split)]))
    assert third.outputs[0].data.tolist() == [b"a", b"bc"]
    assert ran(controls, "S") == 2


async def test_failed_requests_are_not_cached(
    service: InferenceService, controls: Controls
) -> None:
    for _ in range(2):
        with pytest.raises(RepokitError, match="no"):
            await service.infer(xreq("failing", [1]))
    assert ran(controls) == 2
    found = counts(service, "failing")
    assert (found["fail"], found["cache_hit"], found["cache_miss"]) == (2, 0, 2)
    assert service.manager.response_cache is not None
    assert service.manager.response_cache.num_entries == 0


async def test_models_without_response_cache_are_not_looked_up(
    service: InferenceService, controls: Controls
) -> None:
    for _ in range(2):
        await service.infer(xreq("plain", [1]))
    assert ran(controls) == 2
    found = counts(service, "plain")
    assert (found["cache_hit"], found["cache_miss"]) == (0, 0)
    assert service.manager.get("plain").response_cache is None
    assert 'nv_cache_num_hits_per_model{model="plain"' not in service.metrics_text()


async def test_without_a_server_cache_nothing_is_cached(
    cache_repository: Path, controls: Controls
) -> None:
    service = await started(cache_repository, controls, cache_size=None)
    try:
        for _ in range(2):
            await service.infer(xreq("cached", [1]))
        assert ran(controls) == 2
        assert counts(service, "cached")["cache_hit"] == 0
        assert "nv_cache" not in service.metrics_text()
    finally:
        await service.stop()


async def test_ensemble_top_level_caching_skips_its_steps(
    service: InferenceService, controls: Controls
) -> None:
    for _ in range(2):
        response = await service.infer(xreq("ens_cached", [4, 5]))
        assert response.outputs[0].data.tolist() == [4.0, 5.0]
    assert ran(controls) == 1
    ensemble = counts(service, "ens_cached")
    assert (ensemble["success"], ensemble["cache_hit"], ensemble["cache_miss"]) == (2, 1, 1)
    assert (ensemble["execution_count"], ensemble["inference_count"]) == (1, 1)
    assert counts(service, "plain")["success"] == 1


async def test_a_composing_model_with_the_cache_hits_inside_an_ensemble(
    service: InferenceService, controls: Controls
) -> None:
    await service.infer(xreq("cached", [7]))  # a client request fills the cache
    response = await service.infer(xreq("ens_of_cached", [7]))
    assert response.outputs[0].data.tolist() == [7.0]
    assert ran(controls) == 1
    composing = counts(service, "cached")
    assert (composing["success"], composing["cache_hit"]) == (2, 1)
    ensemble = counts(service, "ens_of_cached")
    assert (ensemble["success"], ensemble["cache_hit"], ensemble["cache_miss"]) == (1, 0, 0)


async def test_models_that_cannot_use_the_cache_fail_to_load(
    service: InferenceService,
) -> None:
    reasons = {
        "cached_decoupled": "Response Cache does not currently support model cached_decoupled "
        "with 'decoupled' transaction policy. Please disable the response cache.",
        "cached_sequence": "Response Cache does not currently support model cached_sequence "
        "with sequence batching scheduler. Please disable the response cache.",
        "ens_decoupled": "Invalid argument: Response Cache does not currently support model "
        "ens_decoupled with 'decoupled' transaction policy. Please disable the response cache.",
    }
    for name, reason in reasons.items():
        with pytest.raises(RepokitError) as caught:
            await service.load_model(name)
        assert reason in caught.value.message


async def test_concurrent_identical_requests_all_get_the_answer(
    service: InferenceService, controls: Controls
) -> None:
    controls.gate = asyncio.Event()
    tasks = [asyncio.ensure_future(service.infer(xreq("cached", [3, 1]))) for _ in range(5)]
    await asyncio.sleep(0)
    controls.gate.set()
    responses = await asyncio.gather(*tasks)
    assert all(r.outputs[0].data.tolist() == [3.0, 1.0] for r in responses)
    cache = service.manager.response_cache
    assert cache is not None and cache.num_entries == 1
    found = counts(service, "cached")
    assert found["cache_hit"] + found["cache_miss"] == 5 == found["success"]
    executed = ran(controls)
    await service.infer(xreq("cached", [3, 1]))
    assert ran(controls) == executed  # now it is a hit


async def test_least_recently_used_entries_make_room(
    cache_repository: Path, controls: Controls
) -> None:
    service = await started(cache_repository, controls, cache_size=1200)
    try:
        for value in range(20):
            await service.infer(xreq("cached", [float(value)] * 4))
        cache = service.manager.response_cache
        assert cache is not None
        assert cache.evictions > 0 and cache.used_bytes <= 1200
        before = ran(controls)
        await service.infer(xreq("cached", [19.0] * 4))  # the newest is still there
        assert ran(controls) == before
        await service.infer(xreq("cached", [0.0] * 4))  # the oldest went
        assert ran(controls) == before + 1
        assert f"nv_cache_num_evictions {cache.evictions}" in service.metrics_text()
    finally:
        await service.stop()


async def test_metrics_of_the_cache(cache_repository: Path, controls: Controls) -> None:
    service = await started(
        cache_repository, controls, metrics=MetricsSettings(summary_latencies=True)
    )
    try:
        for _ in range(3):
            await service.infer(xreq("cached", [1]))
        await service.infer(xreq("plain", [1]))
        text = service.metrics_text()
    finally:
        await service.stop()
    labels = '{model="cached",version="1"}'
    for line in (
        f"nv_cache_num_hits_per_model{labels} 2",
        f"nv_cache_num_misses_per_model{labels} 1",
        "nv_cache_num_entries 1",
        "nv_cache_num_hits 2",
        "nv_cache_num_misses 1",
        "nv_cache_num_lookups 3",
        "nv_cache_num_evictions 0",
        f"nv_cache_hit_summary_per_model_count{labels} 2",
        f"nv_cache_miss_summary_per_model_count{labels} 1",
        "# TYPE nv_cache_util gauge",
        "# TYPE nv_cache_hit_duration_per_model counter",
        "# TYPE nv_cache_miss_duration_per_model counter",
        "# TYPE nv_cache_lookup_duration gauge",
        "# TYPE nv_cache_insertion_duration gauge",
    ):
        assert line in text.splitlines(), line
    # as Triton: no request summary for a model with the cache, the others keep theirs
    assert f"nv_inference_request_summary_us_count{labels}" not in text
    assert 'nv_inference_request_summary_us_count{model="plain",version="1"} 1' in text
    assert f"nv_inference_queue_summary_us_count{labels} 3" in text
    assert f"nv_inference_compute_infer_summary_us_count{labels} 1" in text  # the miss ran
    order = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert order.index("nv_cache_num_hits_per_model") < order.index(
        "nv_inference_pending_request_count"
    )


async def test_a_reloaded_model_does_not_answer_from_its_previous_load(
    service: InferenceService, controls: Controls, cache_repository: Path
) -> None:
    await service.infer(xreq("cached", [2, 2]))
    await service.infer(xreq("cached", [2, 2]))
    assert ran(controls) == 1
    config = cache_repository / "cached" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "changed" value: { string_value: "1" } }\n'
    )
    await service.load_model("cached")
    await service.infer(xreq("cached", [2, 2]))
    assert ran(controls) == 2
    assert counts(service, "cached")["cache_miss"] == 1  # the new load's statistics
