"""Engine builds through polygraphy: the real loader objects, version-gated precision, the
missing-TensorRT message, verification with polygraphy's Comparator, and (where TensorRT and a
GPU exist) a real build."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from repokit.build.engine import (
    EngineLoaders,
    EngineRecipe,
    build_engine,
    engine_loaders,
    precision_flags,
    probe_tensorrt,
    skipped_message,
    verify_engine,
)
from repokit.build.profiles import EngineInput, ProfileRequest, derive_profiles, parse_shape_option
from repokit.config.parse import parse_text
from repokit.protocol.generated import model_config_pb2 as mc
from tests.build import models

FAKE_TRT = SimpleNamespace(MemoryPoolType=SimpleNamespace(WORKSPACE="WORKSPACE"))


def _recipe(tmp_path: Path, count: int = 2, fp16: bool = False) -> EngineRecipe:
    onnx_path = models.add_sub(tmp_path / "1" / "model.onnx")
    config = parse_text('name: "a" max_batch_size: 8')
    inputs = [EngineInput(n, mc.TYPE_FP32, (16,)) for n in ("INPUT0", "INPUT1")]
    profiles = derive_profiles(config, inputs, ProfileRequest(count=count), preferred=[4])
    return EngineRecipe(
        onnx_path=onnx_path,
        plan_path=tmp_path / "1" / "model.plan",
        timing_cache=tmp_path / "repokit.timing.cache",
        profiles=tuple(profiles),
        workspace_bytes=256 << 20,
        fp16=fp16,
    )


def test_missing_tensorrt_message_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` fail
    status = probe_tensorrt()
    assert not status.available
    assert "the Python module 'tensorrt' is not installed" in status.reason
    assert "pip install repokit[tensorrt]" in status.reason
    message = skipped_message(status)
    assert message.startswith("engine build skipped: the Python module 'tensorrt'")
    assert "stays ONNX (runs with ONNX Runtime)" in message


def test_build_modules_never_import_tensorrt() -> None:
    import importlib

    for name in ("engine", "builder", "model_build", "profiles", "warmup"):
        importlib.import_module(f"repokit.build.{name}")
    importlib.import_module("repokit.config.onnx_io")
    if probe_tensorrt().version == "":
        assert "tensorrt" not in sys.modules


def test_precision_flags_are_gated_on_the_tensorrt_version() -> None:
    assert precision_flags("10.13.3", True) == ({"fp16": True}, [])
    flags, notes = precision_flags("11.4.0.106", True)
    assert flags == {} and "TensorRT 11.4.0.106 has no FP16 builder flag" in notes[0]
    assert precision_flags("11.0", False) == ({}, [])


def test_loaders_hand_polygraphy_the_profiles_workspace_and_timing_cache(tmp_path: Path) -> None:
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineFromNetwork,
        NetworkFromOnnxPath,
        Profile,
        SaveEngine,
    )

    recipe = _recipe(tmp_path)
    loaders = engine_loaders(recipe, "WORKSPACE", "10.13.0")
    assert isinstance(loaders.network, NetworkFromOnnxPath)
    assert loaders.network.path == str(recipe.onnx_path)
    assert isinstance(loaders.config, CreateConfig)
    assert all(isinstance(p, Profile) for p in loaders.config.profiles)
    assert [dict(p)["INPUT0"].max for p in loaders.config.profiles] == [(3, 16), (8, 16)]
    assert [dict(p)["INPUT1"].opt for p in loaders.config.profiles] == [(3, 16), (4, 16)]
    assert loaders.config.memory_pool_limits == {"WORKSPACE": 256 << 20}
    assert loaders.config.timing_cache_path == str(recipe.timing_cache)
    assert not loaders.config.fp16
    assert isinstance(loaders.engine, EngineFromNetwork)
    assert loaders.engine.timing_cache_path == str(recipe.timing_cache)
    assert isinstance(loaders.save, SaveEngine) and loaders.save.path == str(recipe.plan_path)
    fp16 = engine_loaders(_recipe(tmp_path / "b", fp16=True), "WORKSPACE", "10.13.0")
    assert fp16.config.fp16 and fp16.notes == []
    gated = engine_loaders(_recipe(tmp_path / "c", fp16=True), "WORKSPACE", "11.1.0")
    assert not gated.config.fp16 and gated.notes


def test_build_engine_runs_the_chain_and_records_the_plan(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    seen: list[EngineLoaders] = []

    def fake_tensorrt_build(loaders: EngineLoaders) -> None:  # only the GPU step is replaced
        seen.append(loaders)
        Path(loaders.save.path).write_bytes(b"plan-bytes")

    result = build_engine(recipe, FAKE_TRT, "10.13.0", fake_tensorrt_build)
    assert result.plan_bytes == len(b"plan-bytes") and len(result.plan_sha256) == 64
    assert seen[0].config.memory_pool_limits == {"WORKSPACE": recipe.workspace_bytes}


def test_build_engine_failures_say_why(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)

    def failing(loaders: EngineLoaders) -> None:
        raise RuntimeError("Network validation failed.")

    with pytest.raises(RuntimeError, match="engine build failed: RuntimeError: Network validation"):
        build_engine(recipe, FAKE_TRT, "10.13.0", failing)
    with pytest.raises(RuntimeError, match="wrote no plan"):
        build_engine(recipe, FAKE_TRT, "10.13.0", lambda loaders: None)


def _onnxrt_stand_in(model: Path) -> Any:
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    def factory(plan_path: Path, profile_index: int) -> Any:
        assert profile_index in (0, 1)
        return OnnxrtRunner(SessionFromOnnx(str(model), providers=["cpu"]), name="stand-in")

    return factory


def test_verify_compares_runners_with_polygraphy(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    types = {"INPUT0": mc.TYPE_FP32, "INPUT1": mc.TYPE_FP32}
    same = verify_engine(recipe, types, _onnxrt_stand_in(recipe.onnx_path))
    assert same.passed and same.detail == "2 profile(s) match ONNX Runtime"
    other = tmp_path / "other.onnx"
    models.add_sub(other)
    import onnx

    swapped = onnx.load(str(other))
    swapped.graph.node[0].op_type, swapped.graph.node[1].op_type = "Sub", "Add"
    onnx.save(swapped, str(other))
    different = verify_engine(recipe, types, _onnxrt_stand_in(other))
    assert not different.passed and "outputs differ" in different.detail


def test_shape_tensor_profiles_reach_create_config(tmp_path: Path) -> None:
    config = parse_text('name: "r"')
    inputs = [
        EngineInput("data", mc.TYPE_FP32, (-1,)),
        EngineInput("new_shape", mc.TYPE_INT64, (2,), shape_tensor=True),
    ]
    request = ProfileRequest(shapes={
        "data": parse_shape_option("data:1,16,64"),
        "new_shape": parse_shape_option("new_shape:1x1,4x4,8x8"),
    })  # fmt: skip
    profiles = derive_profiles(config, inputs, request)
    recipe = EngineRecipe(models.reshape_by_input(tmp_path / "m.onnx"), tmp_path / "m.plan",
                          tmp_path / "tc", tuple(profiles), 1 << 20)  # fmt: skip
    loaders = engine_loaders(recipe, "WORKSPACE", "10.0")
    [profile] = loaders.config.profiles
    assert dict(profile)["new_shape"].opt == (4, 4)
    assert dict(profile)["data"].max == (64,)


@pytest.mark.skipif(
    not probe_tensorrt().available,
    reason=f"TensorRT engine build needs tensorrt and a GPU: {probe_tensorrt().reason}",
)
def test_real_engine_build_and_verify(tmp_path: Path) -> None:  # pragma: no cover - GPU only
    import tensorrt

    recipe = _recipe(tmp_path)
    result = build_engine(recipe, tensorrt, tensorrt.__version__)
    assert result.plan_bytes > 0 and recipe.timing_cache.is_file()
    outcome = verify_engine(recipe, {"INPUT0": mc.TYPE_FP32, "INPUT1": mc.TYPE_FP32})
    assert outcome.passed, outcome.detail
