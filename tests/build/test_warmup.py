"""Warmup samples: one per profile opt plus batch 1 and max, files with exact sizes that the
server's own warmup loader accepts."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from repokit.build.profiles import EngineInput, ProfileRequest, derive_profiles, parse_shape_option
from repokit.build.warmup import plan_warmup, write_warmup
from repokit.config.parse import parse_text
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.warmup import build_warmup_samples, parse_length_prefixed

SEQ = parse_text(
    'name: "seq" max_batch_size: 8 '
    'input [{ name: "x" data_type: TYPE_FP32 dims: [ -1, 8 ] },'
    '       { name: "bias" data_type: TYPE_FP32 dims: [ 8 ] }]'
)
SEQ_INPUTS = [EngineInput("x", mc.TYPE_FP32, (-1, 8)), EngineInput("bias", mc.TYPE_FP32, (8,))]


def _profiles(count: int = 2) -> list:  # type: ignore[type-arg]
    request = ProfileRequest(count=count, shapes={"x": parse_shape_option("x:1,32,128")})
    return derive_profiles(SEQ, SEQ_INPUTS, request, preferred=[4])


def test_plan_covers_each_profile_opt_then_batch_1_and_max() -> None:
    plans = plan_warmup(_profiles(), SEQ_INPUTS, 8)
    assert [(p.name, p.batch_size) for p in plans] == [
        ("profile_0_opt", 3),
        ("profile_1_opt", 4),
        ("batch_1", 1),
        ("batch_8", 8),
    ]
    assert plans[0].dims == {"x": (32, 8), "bias": (8,)}


def test_plan_drops_duplicates() -> None:
    request = ProfileRequest(shapes={"x": parse_shape_option("x:4,4,4")})
    profiles = derive_profiles(SEQ, SEQ_INPUTS, request)  # opt batch = 8 = max
    assert [p.name for p in plan_warmup(profiles, SEQ_INPUTS, 8)] == ["profile_0_opt", "batch_1"]


def test_files_have_exact_sizes_and_the_server_loader_accepts_them(tmp_path: Path) -> None:
    config = mc.ModelConfig()
    config.CopyFrom(SEQ)
    plans = plan_warmup(_profiles(), SEQ_INPUTS, 8)
    written = write_warmup(config, tmp_path, plans, SEQ_INPUTS, "random", seed=7)
    assert len(config.model_warmup) == 4
    for record in written:
        path = tmp_path / "warmup" / record.file
        assert path.stat().st_size == record.bytes
    x_file = next(w for w in written if w.sample == "profile_0_opt" and w.input == "x")
    assert x_file.bytes == 32 * 8 * 4
    data = np.frombuffer((tmp_path / "warmup" / x_file.file).read_bytes(), dtype="<f4")
    assert data.min() >= -1 and data.max() < 1 and np.any(data != 0)
    samples = build_warmup_samples(config, tmp_path)
    assert [(s.name, len(s.requests)) for s in samples] == [
        ("profile_0_opt", 3), ("profile_1_opt", 4), ("batch_1", 1), ("batch_8", 8)
    ]  # fmt: skip
    assert samples[0].requests[0].inputs["x"].shape == (1, 32, 8)


def test_random_data_is_seeded(tmp_path: Path) -> None:
    contents = []
    for run in ("a", "b"):
        config = mc.ModelConfig()
        config.CopyFrom(SEQ)
        written = write_warmup(config, tmp_path / run, plan_warmup(_profiles(1), SEQ_INPUTS, 8),
                               SEQ_INPUTS, "random", seed=3)  # fmt: skip
        contents.append([(tmp_path / run / "warmup" / w.file).read_bytes() for w in written])
    assert contents[0] == contents[1]


def test_zero_data_bytes_and_shape_tensor_values(tmp_path: Path) -> None:
    config = parse_text(
        'name: "mixed" max_batch_size: 0 '
        'input [{ name: "text" data_type: TYPE_STRING dims: [ 3 ] },'
        '       { name: "new_shape" data_type: TYPE_INT64 dims: [ 2 ] },'
        '       { name: "flags" data_type: TYPE_BOOL dims: [ 2, 2 ] }]'
    )
    inputs = [
        EngineInput("text", mc.TYPE_STRING, (3,)),
        EngineInput("new_shape", mc.TYPE_INT64, (2,), shape_tensor=True),
        EngineInput("flags", mc.TYPE_BOOL, (2, 2)),
    ]
    request = ProfileRequest(shapes={"new_shape": parse_shape_option("new_shape:1x1,4x6,8x8")})
    profiles = derive_profiles(config, inputs, request)
    written = write_warmup(config, tmp_path, plan_warmup(profiles, inputs, 0), inputs, "zero")
    by_input = {w.input: (tmp_path / "warmup" / w.file).read_bytes() for w in written}
    # "0", not Triton's empty strings: models that parse their text as numbers accept it
    assert by_input["text"] == (struct.pack("<I", 1) + b"0") * 3
    assert np.frombuffer(by_input["new_shape"], dtype="<i8").tolist() == [4, 6]
    assert by_input["flags"] == bytes(4)
    [sample] = build_warmup_samples(config, tmp_path)
    assert sample.requests[0].inputs["text"].shape == (3,)
    random = write_warmup(
        config, tmp_path / "r", plan_warmup(profiles, inputs, 0), inputs, "random"
    )
    text = next(w for w in random if w.input == "text")
    raw = (tmp_path / "r" / "warmup" / text.file).read_bytes()
    elements = parse_length_prefixed(raw, 3, text.file)
    assert len(raw) == 3 * 5 and set(elements) <= {b"0", b"1", b"2", b"3"}


def test_rewriting_replaces_old_files_and_never_warms_an_ensemble(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "stale.bin").write_bytes(b"x")
    config = mc.ModelConfig()
    config.CopyFrom(SEQ)
    write_warmup(config, tmp_path, plan_warmup(_profiles(1), SEQ_INPUTS, 8), SEQ_INPUTS)
    assert not (tmp_path / "warmup" / "stale.bin").exists()
    ensemble = parse_text('name: "e" platform: "ensemble"')
    with pytest.raises(ValueError, match="can not be specified for ensemble 'e'"):
        write_warmup(ensemble, tmp_path, [], [])


def test_reshape_inputs_use_the_request_dims(tmp_path: Path) -> None:
    inputs = [EngineInput("x", mc.TYPE_FP32, (2, 3), request_dims=(6,))]
    config = parse_text(
        'name: "r" input [{ name: "x" data_type: TYPE_FP32 dims: [6] reshape { shape: [2,3] } }]'
    )
    profiles = derive_profiles(config, inputs, ProfileRequest())
    [plan] = plan_warmup(profiles, inputs, 0)
    assert plan.dims == {"x": (6,)}
    variable = [EngineInput("x", mc.TYPE_FP32, (2, 3), request_dims=(-1,))]
    with pytest.raises(ValueError, match="warmup needs fixed request dims"):
        plan_warmup(profiles, variable, 0)
