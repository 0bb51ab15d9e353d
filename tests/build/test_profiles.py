"""Profiles: batch splits, opt rules, --shape, sample data, coverage, polygraphy objects."""

from __future__ import annotations

import base64
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from repokit.build.profiles import (
    EngineInput,
    OptimizationProfile,
    ProfileError,
    ProfileRequest,
    TensorProfile,
    batch_ranges,
    check_profiles,
    derive_profiles,
    engine_inputs,
    parse_shape_option,
)
from repokit.build.sample_data import SampleDataError, load_sample_document, sample_shapes
from repokit.config.onnx_io import read_onnx_signature
from repokit.config.parse import parse_text
from repokit.protocol.generated import model_config_pb2 as mc
from tests.build import models


@pytest.mark.parametrize(
    ("max_batch", "preferred", "count", "split", "expected"),
    [
        (8, [], 1, False, [(1, 8, 8)]),
        (8, [4], 1, False, [(1, 4, 8)]),
        (8, [2, 4], 1, False, [(1, 4, 8)]),
        (8, [], 3, False, [(1, 2, 2), (3, 4, 4), (5, 8, 8)]),
        (16, [4], 2, False, [(1, 4, 4), (5, 16, 16)]),
        (4, [], 4, False, [(1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4)]),
        (8, [2, 4], 1, True, [(1, 2, 2), (3, 4, 4), (5, 8, 8)]),
        (8, [8, 2], 1, True, [(1, 2, 2), (3, 8, 8)]),
    ],
)
def test_batch_ranges_are_contiguous_and_gap_free(
    max_batch: int, preferred: list[int], count: int, split: bool, expected: list[tuple[int, ...]]
) -> None:
    ranges = batch_ranges(max_batch, preferred, count, split)
    assert ranges == expected
    assert ranges[0][0] == 1 and ranges[-1][2] == max_batch
    for (_, _, high), (low, _, _) in itertools.pairwise(ranges):
        assert low == high + 1


@pytest.mark.parametrize("count", [2, 3, 5, 7, 16])
def test_geometric_split_always_covers_every_batch_size(count: int) -> None:
    ranges = batch_ranges(16, [], count, False)
    covered = [b for low, _, high in ranges for b in range(low, high + 1)]
    assert covered == list(range(1, 17))
    assert all(low <= opt <= high for low, opt, high in ranges)


def test_batch_range_errors() -> None:
    with pytest.raises(ProfileError, match="preferred_batch_size"):
        batch_ranges(8, [], 1, True)
    with pytest.raises(ProfileError, match="more batch ranges"):
        batch_ranges(4, [], 5, False)
    with pytest.raises(ProfileError, match="does not batch"):
        batch_ranges(0, [], 1, False)


def test_parse_shape_option() -> None:
    spec = parse_shape_option("x:1,64,256")
    assert (spec.name, spec.min, spec.opt, spec.max) == ("x", (1,), (64,), (256,))
    spec = parse_shape_option("image:0:3x224x224,3x224x224,3x512x512")
    assert spec.name == "image:0" and spec.max == (3, 512, 512)
    for bad, message in [
        ("x", "expected NAME:MIN,OPT,MAX"),
        ("x:1,2", "three comma-separated parts"),
        ("x:1,a,3", "OPT 'a' is not an integer"),
        ("x:1,-2,3", "negative"),
    ]:
        with pytest.raises(ProfileError, match=message):
            parse_shape_option(bad)


def _seq_config() -> mc.ModelConfig:
    return parse_text(
        'name: "seq" max_batch_size: 8 '
        'input [{ name: "x" data_type: TYPE_FP32 dims: [ -1, 8 ] },'
        '       { name: "bias" data_type: TYPE_FP32 dims: [ 8 ] }]'
    )


SEQ_INPUTS = [
    EngineInput("x", mc.TYPE_FP32, (-1, 8)),
    EngineInput("bias", mc.TYPE_FP32, (8,)),
]


def test_every_input_is_in_every_profile_with_fixed_dims_pinned() -> None:
    request = ProfileRequest(count=2, shapes={"x": parse_shape_option("x:1,32,128")})
    profiles = derive_profiles(_seq_config(), SEQ_INPUTS, request, preferred=[4])
    assert [p.batch for p in profiles] == [(1, 3, 3), (4, 4, 8)]
    for profile in profiles:
        assert [t.name for t in profile.tensors] == ["x", "bias"]
    x0, bias1 = profiles[0].tensor("x"), profiles[1].tensor("bias")
    assert (x0.min, x0.opt, x0.max) == ((1, 1, 8), (3, 32, 8), (3, 128, 8))
    assert (bias1.min, bias1.opt, bias1.max) == ((4, 8), (4, 8), (8, 8))
    assert check_profiles(profiles, SEQ_INPUTS, 8) == []


def test_dynamic_dims_without_a_range_are_an_error() -> None:
    with pytest.raises(ProfileError, match=r"input 'x' has dynamic dimension\(s\) 0 .*--shape x:"):
        derive_profiles(_seq_config(), SEQ_INPUTS, ProfileRequest())


def test_shape_option_errors_name_the_problem() -> None:
    config = _seq_config()
    for text, message in [
        ("x:4x8,2x8,8x8", r"MIN \[4, 8\] <= OPT \[2, 8\]"),
        ("x:1x9,2x9,4x9", "fixed at 8"),
        ("x:1x1x8,2x2x8,4x4x8", "has 3 dims but input 'x' has 2"),
    ]:
        request = ProfileRequest(shapes={"x": parse_shape_option(text)})
        with pytest.raises(ProfileError, match=message):
            derive_profiles(config, SEQ_INPUTS, request)
    request = ProfileRequest(shapes={"nope": parse_shape_option("nope:1,2,3")})
    with pytest.raises(ProfileError, match="unknown input"):
        derive_profiles(config, SEQ_INPUTS, request)


def test_coverage_check_finds_gaps_missing_inputs_and_bad_order() -> None:
    def profile(index: int, batch: tuple[int, int, int], x_dim: int = 8) -> OptimizationProfile:
        low, opt, high = batch
        return OptimizationProfile(index, batch, (
            TensorProfile("x", (low, 1, x_dim), (opt, 2, x_dim), (high, 4, x_dim)),
            TensorProfile("bias", (low, 8), (opt, 8), (high, 8)),
        ))  # fmt: skip

    gap = [profile(0, (1, 2, 2)), profile(1, (4, 4, 8))]
    assert check_profiles(gap, SEQ_INPUTS, 8) == ["batch sizes 3..3 are in no profile"]
    short = [profile(0, (1, 2, 4))]
    assert "batch sizes 5..8 are in no profile" in check_profiles(short, SEQ_INPUTS, 8)[0]
    pinned = [profile(0, (1, 2, 8), x_dim=9)]
    assert "dimension 2 is fixed at 8" in check_profiles(pinned, SEQ_INPUTS, 8)[0]
    missing = [OptimizationProfile(0, (1, 8, 8), (TensorProfile("x", (1, 1, 8), (8, 2, 8),
                                                                (8, 4, 8)),))]  # fmt: skip
    assert check_profiles(missing, SEQ_INPUTS, 8) == ["profile 0 does not list input 'bias'"]
    disorder = [OptimizationProfile(0, (1, 8, 8), (
        TensorProfile("x", (1, 4, 8), (8, 2, 8), (8, 4, 8)),
        TensorProfile("bias", (1, 8), (8, 8), (8, 8)),
    ))]  # fmt: skip
    assert "does not hold" in check_profiles(disorder, SEQ_INPUTS, 8)[0]


def test_engine_inputs_take_fixed_onnx_dims_and_shape_operands(tmp_path: Path) -> None:
    signature = read_onnx_signature(models.reshape_by_input(tmp_path / "m.onnx"))
    config = parse_text(
        'name: "r" input [{ name: "data" data_type: TYPE_FP32 dims: [ -1 ] },'
        '                 { name: "new_shape" data_type: TYPE_INT64 dims: [ -1 ] }]'
    )
    inputs = engine_inputs(config, signature)
    assert inputs[0] == EngineInput("data", mc.TYPE_FP32, (-1,), False)
    assert inputs[1] == EngineInput("new_shape", mc.TYPE_INT64, (2,), True)


def test_shape_tensor_values_come_from_shape_option() -> None:
    config = parse_text('name: "r"')
    inputs = [
        EngineInput("data", mc.TYPE_FP32, (-1,)),
        EngineInput("new_shape", mc.TYPE_INT64, (2,), shape_tensor=True),
    ]
    with pytest.raises(ProfileError, match="'new_shape' is a shape tensor"):
        derive_profiles(config, inputs, ProfileRequest(shapes={"data": parse_shape_option(
            "data:1,16,64")}))  # fmt: skip
    request = ProfileRequest(shapes={
        "data": parse_shape_option("data:1,16,64"),
        "new_shape": parse_shape_option("new_shape:1x1,4x4,8x8"),
    })  # fmt: skip
    [profile] = derive_profiles(config, inputs, request)
    assert profile.batch is None
    values = profile.tensor("new_shape")
    assert values.shape_tensor and (values.min, values.opt, values.max) == ((1, 1), (4, 4), (8, 8))


def test_polygraphy_profile_objects_are_real_and_need_no_tensorrt() -> None:
    from polygraphy.backend.trt import Profile

    request = ProfileRequest(shapes={"x": parse_shape_option("x:1,32,128")})
    [profile] = derive_profiles(_seq_config(), SEQ_INPUTS, request, preferred=[4])
    converted = profile.to_polygraphy()
    assert isinstance(converted, Profile)
    assert list(converted.keys()) == ["x", "bias"]
    assert converted["x"].min == (1, 1, 8) and converted["x"].opt == (4, 32, 8)
    assert converted["bias"].max == (8, 8)
    assert "tensorrt" not in sys.modules


# --- sample data ------------------------------------------------------------------------------


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "samples.json"
    path.write_text(json.dumps(document))
    return path


def test_sample_data_shapes_give_min_median_max(tmp_path: Path) -> None:
    rows = [3, 10, 7]
    document = {"data": [
        {"x": {"content": [0.0] * (n * 8), "shape": [n, 8]}, "bias": [0.5] * 8} for n in rows
    ]}  # fmt: skip
    loaded = load_sample_document(_write(tmp_path, document))
    seen = sample_shapes(loaded, SEQ_INPUTS, "samples.json").shapes
    assert seen["x"] == [(3, 8), (10, 8), (7, 8)] and seen["bias"] == [(8,)] * 3
    [profile] = derive_profiles(_seq_config(), SEQ_INPUTS, ProfileRequest(sample_shapes=seen))
    x = profile.tensor("x")
    assert (x.min, x.opt, x.max) == ((1, 3, 8), (8, 7, 8), (8, 10, 8))


def test_sample_data_infers_one_variable_dim_from_count_and_b64(tmp_path: Path) -> None:
    raw = base64.b64encode(np.zeros(5 * 8, dtype=np.float32).tobytes()).decode()
    document = {"data": [[{"x": [1.0] * 16, "bias": [0.0] * 8}], [{"x": {"b64": raw}}]]}
    loaded = load_sample_document(_write(tmp_path, document))
    assert sample_shapes(loaded, SEQ_INPUTS, "s").shapes["x"] == [(2, 8), (5, 8)]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"dat": []}, "'data' is a required property"),
        ({"data": [{"x": {"shape": [1, 8]}}]}, r"\$.data\[0\].x"),
        ({"data": []}, "should be non-empty"),
    ],
)
def test_sample_data_schema_errors_are_clear(
    tmp_path: Path, document: object, message: str
) -> None:
    with pytest.raises(SampleDataError, match=message) as caught:
        load_sample_document(_write(tmp_path, document))
    assert "perf_analyzer's input-data format" in str(caught.value)


def test_sample_data_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SampleDataError, match="does not exist"):
        load_sample_document(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  oops")
    with pytest.raises(SampleDataError, match=r"bad.json:2:3: not valid JSON"):
        load_sample_document(bad)


def test_sample_data_that_does_not_fit_the_model(tmp_path: Path) -> None:
    cases = [
        ({"data": [{"x": [1.0] * 7}]}, 'give "shape"'),
        ({"data": [{"x": {"content": [1.0] * 8, "shape": [8]}}]}, "has 1 dims but input 'x'"),
        ({"data": [{"zzz": [1]}]}, "unknown input 'zzz'"),
    ]
    for document, message in cases:
        loaded = load_sample_document(_write(tmp_path, document))
        with pytest.raises(SampleDataError, match=message):
            sample_shapes(loaded, SEQ_INPUTS, "s")
    shape_inputs = [EngineInput("new_shape", mc.TYPE_INT64, (2,), shape_tensor=True)]
    loaded = load_sample_document(_write(tmp_path, {"data": [{"new_shape": [1.5, 2]}]}))
    with pytest.raises(SampleDataError, match="shape tensor; give its values"):
        sample_shapes(loaded, shape_inputs, "s")
    loaded = load_sample_document(_write(tmp_path, {"data": [{"new_shape": [4, 2]}]}))
    assert sample_shapes(loaded, shape_inputs, "s").shapes["new_shape"] == [(4, 2)]


def test_coverage_needs_profiles_with_batch_ranges() -> None:
    assert check_profiles([], SEQ_INPUTS, 8) == ["there is no optimization profile"]
    unbatched = [OptimizationProfile(0, None, (
        TensorProfile("x", (1, 1, 8), (1, 2, 8), (1, 4, 8)),
        TensorProfile("bias", (1, 8), (1, 8), (1, 8)),
    ))]  # fmt: skip
    assert check_profiles(unbatched, SEQ_INPUTS, 8) == [
        "a batching model needs a batch range in every profile"
    ]
    late = [OptimizationProfile(0, (2, 8, 8), (
        TensorProfile("x", (2, 1, 8), (8, 2, 8), (8, 4, 8)),
        TensorProfile("bias", (2, 8), (8, 8), (8, 8)),
    ))]  # fmt: skip
    assert check_profiles(late, SEQ_INPUTS, 8) == ["batch sizes 1..1 are in no profile"]


def test_sample_data_b64_and_file_edge_cases(tmp_path: Path) -> None:
    loaded = load_sample_document(_write(tmp_path, {"data": [{"x": {"b64": "***"}}]}))
    with pytest.raises(SampleDataError, match="not valid base64"):
        sample_shapes(loaded, SEQ_INPUTS, "s")
    text_inputs = [EngineInput("t", mc.TYPE_STRING, (-1,))]
    loaded = load_sample_document(_write(tmp_path, {"data": [{"t": {"b64": "AAAAAA=="}}]}))
    with pytest.raises(SampleDataError, match='give "shape" for b64 data'):
        sample_shapes(loaded, text_inputs, "s")
    shape_inputs = [EngineInput("new_shape", mc.TYPE_INT64, (2,), shape_tensor=True)]
    loaded = load_sample_document(_write(tmp_path, {"data": [{"new_shape": [1, 2, 3]}]}))
    with pytest.raises(SampleDataError, match="needs 2 values, got 3"):
        sample_shapes(loaded, shape_inputs, "s")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SampleDataError, match="cannot be read"):
        load_sample_document(binary)
