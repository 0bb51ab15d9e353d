"""Ensembles Triton 2.51 refuses once their step models have loaded (its dependency graph and
ValidateEnsembleConfig) load no version: the load answers 400 ``load failed for model 'E':
<Triton's message>``, the server logs ``Invalid argument: <message>``, the index shows the
ensemble UNAVAILABLE with the message (Triton lists its name only: README, Differences) and a
serving ensemble whose new config is refused is unloaded, as Triton unloads it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from repokit.core.compose import build_service
from repokit.core.service import InferenceService
from repokit.core.settings import ServerSettings
from repokit.errors import Code, RepokitError
from tests.core.conftest import Controls, backend_factory, write_model

STEP = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
BROKEN = STEP + 'parameters { key: "fail_load" value { string_value: "step broke" } }\n'


def _ensemble(step_model: str, version: int = -1, input_type: str = "TYPE_FP32") -> str:
    return f"""
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "E_IN" data_type: {input_type} dims: [ 4 ] }} ]
output [ {{ name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{
  model_name: "{step_model}" model_version: {version}
  input_map {{ key: "IN" value: "E_IN" }} output_map {{ key: "OUT" value: "E_OUT" }}
}} ] }}
"""


def _outer(step_model: str) -> str:
    return (
        _ensemble(step_model)
        .replace('key: "IN"', 'key: "E_IN"')
        .replace('key: "OUT"', 'key: "E_OUT"')
    )


DTYPE_MESSAGE = (
    "in ensemble ens_dtype, ensemble tensor E_IN: inconsistent data type: TYPE_INT32 is "
    "inferred from model ens_dtype while TYPE_FP32 is inferred from model add"
)


def _repository(root: Path) -> Path:
    repo = root / "models"
    write_model(repo, "add", STEP)
    write_model(repo, "broken", BROKEN)
    write_model(repo, "ens_ok", _ensemble("add"))
    write_model(repo, "ens_dtype", _ensemble("add", input_type="TYPE_INT32"))
    write_model(repo, "ens_broken", _ensemble("broken"))
    write_model(repo, "ens_v2", _ensemble("add", version=2))
    write_model(repo, "ens_outer", _outer("ens_dtype"))
    write_model(repo, "cyc_a", _outer("cyc_b"))
    write_model(repo, "cyc_b", _outer("cyc_a"))
    return repo


async def _service(repo: Path, mode: str) -> InferenceService:
    settings = ServerSettings(
        repositories=[repo],
        model_control_mode=mode,
        load_models=[] if mode == "explicit" else ["*"],
        exit_on_error=False,
    )
    service = build_service(settings, backend_factory(Controls()))
    await service.start()
    return service


@pytest.fixture
async def explicit(tmp_path: Path) -> AsyncIterator[InferenceService]:
    service = await _service(_repository(tmp_path), "explicit")
    yield service
    await service.stop()


async def _refusal(service: InferenceService, model: str) -> str:
    with pytest.raises(RepokitError) as error:
        await service.load_model(model)
    assert error.value.code is Code.INVALID_ARG
    prefix = f"load failed for model '{model}': "
    assert error.value.message.startswith(prefix) and error.value.message.endswith("\n")
    return error.value.message[len(prefix) : -1]


def _rows(service: InferenceService, model: str) -> list[dict[str, str]]:
    return [e for e in service.repository_index() if e["name"] == model]


async def test_a_datatype_mismatch_is_refused_with_tritons_text(
    explicit: InferenceService, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        assert await _refusal(explicit, "ens_dtype") == DTYPE_MESSAGE
    assert f"Invalid argument: {DTYPE_MESSAGE}" in caplog.messages
    assert _rows(explicit, "ens_dtype") == [
        {"name": "ens_dtype", "state": "UNAVAILABLE", "reason": DTYPE_MESSAGE}
    ]
    assert not explicit.model_ready("ens_dtype")
    assert [e["state"] for e in _rows(explicit, "add")] == ["READY"]  # the step loaded
    assert await _refusal(explicit, "ens_dtype") == DTYPE_MESSAGE  # a second load: the same


async def test_a_step_without_loaded_version_names_its_load_error(
    explicit: InferenceService,
) -> None:
    assert await _refusal(explicit, "ens_broken") == (
        "ensemble 'ens_broken' depends on 'broken' which has no loaded version. Model "
        "'broken' loading failed with error: version 1 is at UNAVAILABLE state: Internal: "
        "step broke;"
    )


async def test_a_required_version_that_is_not_loaded(explicit: InferenceService) -> None:
    assert await _refusal(explicit, "ens_v2") == (
        "ensemble 'ens_v2' depends on 'add' whose required version 2 is not loaded."
    )


async def test_an_ensemble_over_a_refused_ensemble_is_not_valid(
    explicit: InferenceService,
) -> None:
    assert await _refusal(explicit, "ens_outer") == (
        "ensemble 'ens_outer' depends on 'ens_dtype' which is not valid. Model 'ens_dtype' "
        f"failed with error: {DTYPE_MESSAGE}"
    )
    assert _rows(explicit, "ens_dtype")[0]["reason"] == DTYPE_MESSAGE


async def test_a_cycle_names_its_ends(explicit: InferenceService) -> None:
    assert await _refusal(explicit, "cyc_a") == (
        "circular dependency between ensembles: cyc_a -> ... -> cyc_b -> cyc_a"
    )


async def test_a_serving_ensemble_whose_new_config_is_refused_is_unloaded(
    explicit: InferenceService, tmp_path: Path
) -> None:
    config = tmp_path / "models" / "ens_ok" / "config.pbtxt"
    good = config.read_text()
    await explicit.load_model("ens_ok")
    assert explicit.model_ready("ens_ok")
    config.write_text(
        good.replace("TYPE_FP32 dims: [ 4 ] } ]\noutput", "TYPE_INT32 dims: [ 4 ] } ]\noutput")
    )
    message = await _refusal(explicit, "ens_ok")
    assert message.startswith("in ensemble ens_ok, ensemble tensor E_IN: inconsistent data type")
    assert _rows(explicit, "ens_ok") == [
        {"name": "ens_ok", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    config.write_text(good)
    await explicit.load_model("ens_ok")
    assert [e["state"] for e in _rows(explicit, "ens_ok")] == ["READY"]


async def test_at_startup_a_refused_ensemble_is_a_failed_model(tmp_path: Path) -> None:
    service = await _service(_repository(tmp_path), "none")
    try:
        assert service.model_ready("ens_ok")
        assert _rows(service, "ens_dtype") == [
            {"name": "ens_dtype", "state": "UNAVAILABLE", "reason": DTYPE_MESSAGE}
        ]
        failed = service.manager.failed_models()
        assert failed["ens_dtype"] == DTYPE_MESSAGE
        assert "which is not valid" in failed["ens_outer"]
    finally:
        await service.stop()


async def test_a_poll_that_finds_a_serving_ensemble_refused_unloads_it(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    service = await _service(repo, "poll")
    try:
        assert service.model_ready("ens_ok")
        config = repo / "ens_ok" / "config.pbtxt"
        config.write_text(config.read_text().replace("model_version: -1", "model_version: 5"))
        await service.manager.poll_once()
        assert _rows(service, "ens_ok") == [
            {"name": "ens_ok", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        ]
        assert service.model_ready("add")
    finally:
        await service.stop()
