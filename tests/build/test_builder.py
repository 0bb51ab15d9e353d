"""build_repository end to end on disk: completed configs, failures, the lock file, incremental
rebuilds, --check, --to tensorrt with and without TensorRT, --in-place, usage errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from repokit.build.builder import BuildUsageError, build_repository
from repokit.build.engine import EngineLoaders, TensorRTStatus
from repokit.build.manifest import LOCK_FILE, hash_tree, lock_problems
from repokit.build.profiles import parse_shape_option
from repokit.build.report import BuildOptions, BuildReport
from repokit.config.parse import parse_file
from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from tests.build import models

SHAPES = (
    parse_shape_option("x:1,16,64"),
    parse_shape_option("data:1,16,64"),
    parse_shape_option("new_shape:1x1,4x4,16x16"),
)
BROKEN_CONFIG = """
name: "broken"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
NO_TRT = TensorRTStatus(False, "", "the Python module 'tensorrt' is not installed")


def make_source(root: Path) -> Path:
    root.mkdir(parents=True)
    models.copy_sample(root, "add_sub", "add_sub_onnx", "add_sub_ensemble")
    models.write_model(root, "seq", models.SEQUENCE_BIAS_CONFIG, models.sequence_bias)
    models.write_model(root, "fixed", None, models.fixed_scale)
    models.write_model(root, "reshape", None, models.reshape_by_input)
    models.write_model(root, "strings", None, models.strings)
    models.write_model(root, "broken", BROKEN_CONFIG, models.add_sub)
    return root


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return make_source(tmp_path / "src")


def _build(source: Path, output: Path, **overrides: object) -> BuildReport:
    fields: dict[str, object] = {"profile": True, "shapes": SHAPES}
    fields.update(overrides)
    tensorrt = fields.pop("tensorrt", NO_TRT)
    runner = fields.pop("engine_runner", None)
    kwargs = {"engine_runner": runner} if runner is not None else {}
    if "warmup_runner" in fields:
        kwargs["warmup_runner"] = fields.pop("warmup_runner")
    return build_repository(
        source,
        output,
        BuildOptions(**fields),
        tensorrt=tensorrt,
        **kwargs,  # type: ignore[arg-type]
    )


def _status(report: BuildReport) -> dict[str, str]:
    return {m.name: m.status for m in report.models}


def test_full_build(source: Path, tmp_path: Path) -> None:
    before = hash_tree(source)
    out = tmp_path / "out"
    report = _build(source, out)
    assert _status(report) == {
        "add_sub": "built",  # a python model: warmup samples, run in its instance process
        "add_sub_ensemble": "copied",
        "add_sub_onnx": "built",
        "broken": "failed",
        "fixed": "built",
        "reshape": "built",
        "seq": "built",
        "strings": "built",
    }
    assert report.exit_code == 1 and report.failed == ["broken"]
    assert hash_tree(source) == before  # the source is never modified
    broken = next(m for m in report.models if m.name == "broken")
    assert [d.rule for d in broken.diagnostics] == ["onnx-input-data-type-mismatch"]
    assert (
        "version 1: unable to load model 'broken', configuration expects datatype TYPE_INT32"
        in broken.diagnostics[0].message
    )
    assert not (out / "broken").exists()

    seq = parse_file(out / "seq" / "config.pbtxt")
    assert seq.max_batch_size == 8
    assert [(i.name, list(i.dims)) for i in seq.input] == [("x", [-1, 8]), ("bias", [8])]
    assert [w.name for w in seq.model_warmup] == [
        "profile_0_opt", "batch_1", "batch_8"
    ]  # fmt: skip
    assert seq.model_warmup[0].batch_size == 4  # the largest preferred size
    assert all(not g.profile for g in seq.instance_group)  # ONNX keeps no TensorRT profiles
    assert not (out / "seq" / "profiles.json").exists()
    seq_report = next(m for m in report.models if m.name == "seq")
    assert seq_report.completed == ["input", "output"]

    fixed = parse_file(out / "fixed" / "config.pbtxt")
    assert fixed.max_batch_size == 0 and [w.batch_size for w in fixed.model_warmup] == [1]
    strings = parse_file(out / "strings" / "config.pbtxt")
    assert strings.max_batch_size == 4 and strings.HasField("dynamic_batching")
    reshape = next(m for m in report.models if m.name == "reshape")
    assert reshape.profiles[0]["inputs"]["new_shape"]["shape_tensor"]

    checked = validate_repository(out, ValidateOptions())
    assert checked.error_count == 0, [d.message for d in checked.all_diagnostics()]

    lock = json.loads((out / LOCK_FILE).read_text())
    assert lock_problems(lock) == []
    assert set(lock["models"]) == set(_status(report)) - {"broken"}
    assert lock["tools"]["onnx"] and lock["tools"]["tensorrt"] is None
    assert lock["models"]["seq"]["output_hash"] == hash_tree(out / "seq")
    assert lock["models"]["seq"]["source_hash"] == hash_tree(source / "seq")
    warm = lock["models"]["seq"]["warmup"]
    for record in warm:
        assert (out / "seq" / "warmup" / record["file"]).stat().st_size == record["bytes"]


def test_incremental_rebuild_and_check(source: Path, tmp_path: Path) -> None:
    shutil.rmtree(source / "broken")
    out = tmp_path / "out"
    assert _build(source, out).exit_code == 0
    again = _build(source, out)
    assert set(_status(again).values()) == {"up-to-date"}
    assert _build(source, out, check=True).exit_code == 0

    config = source / "seq" / "config.pbtxt"
    config.write_text(config.read_text().replace("[ 2, 4 ]", "[ 2 ]"))
    check = _build(source, out, check=True)
    assert check.exit_code == 1 and check.out_of_date == ["seq"]
    [stale] = [m for m in check.models if m.status == "out-of-date"]
    assert stale.reason == "source files changed: modified config.pbtxt"
    rebuilt = _build(source, out)
    assert [n for n, s in _status(rebuilt).items() if s == "built"] == ["seq"]
    assert parse_file(out / "seq" / "config.pbtxt").model_warmup[0].batch_size == 2

    (out / "fixed" / "warmup" / next((out / "fixed" / "warmup").iterdir()).name).write_bytes(b"")
    assert _build(source, out, check=True).out_of_date == ["fixed"]
    assert _status(_build(source, out))["fixed"] == "built"

    assert _build(source, out, check=True, profiles=2).exit_code == 1  # options changed

    shutil.rmtree(source / "strings")
    assert _build(source, out, check=True).out_of_date == ["strings"]
    removed = _build(source, out)
    assert removed.removed == ["strings"] and not (out / "strings").exists()
    assert "strings" not in json.loads((out / LOCK_FILE).read_text())["models"]


def test_model_selection_keeps_other_lock_entries(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _build(source, out)
    only = _build(source, out, models=("seq",))
    assert _status(only) == {"seq": "up-to-date"}
    lock = json.loads((out / LOCK_FILE).read_text())
    assert {"seq", "fixed", "add_sub_onnx"} <= set(lock["models"])
    missing = _build(source, out, models=("nope",))
    assert missing.exit_code == 1 and missing.diagnostics[0].rule == "model-not-found"


def test_to_tensorrt_without_tensorrt_keeps_onnx_and_writes_profiles(
    source: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    report = _build(source, out, to="tensorrt", profiles=2, models=("seq",))
    [seq] = report.models
    assert seq.status == "built" and seq.target == "onnxruntime"
    assert seq.engine.requested and not seq.engine.built
    assert seq.engine.skipped_reason.startswith("engine build skipped: the Python module")
    assert seq.engine.skipped_reason in seq.notes
    config = parse_file(out / "seq" / "config.pbtxt")
    assert config.platform == "onnxruntime_onnx"
    assert all(not g.profile for g in config.instance_group)
    document = json.loads((out / "seq" / "profiles.json").read_text())
    assert [p["batch"] for p in document["profiles"]] == [[1, 2, 3], [4, 4, 8]]
    assert document["profiles"][1]["inputs"]["x"]["max"] == [8, 64, 8]
    assert [w.name for w in config.model_warmup] == [
        "profile_0_opt", "profile_1_opt", "batch_1", "batch_8"
    ]  # fmt: skip
    assert validate_repository(out, ValidateOptions(models=("seq",))).error_count == 0

    required = _build(source, tmp_path / "out2", to="tensorrt", engine="require", models=("seq",))
    assert required.exit_code == 1
    assert required.models[0].reason.startswith("--engine require: engine build skipped")


def test_to_tensorrt_with_tensorrt_builds_plans_and_lists_profiles(
    source: Path, tmp_path: Path
) -> None:
    fake_trt = TensorRTStatus(True, "10.13.3", "")
    built: list[EngineLoaders] = []

    def gpu_step(loaders: EngineLoaders) -> None:
        built.append(loaders)
        Path(loaders.save.path).write_bytes(b"serialized-engine")

    out = tmp_path / "out"
    import repokit.build.builder as builder

    original = builder._tensorrt
    builder._tensorrt = lambda options, status: (fake_trt, SimpleNamespace(  # type: ignore[assignment]
        MemoryPoolType=SimpleNamespace(WORKSPACE="WORKSPACE")))  # fmt: skip
    warmed: list[tuple[str, list[int]]] = []

    def engine_warmup(config: object, directory: Path, versions: object) -> None:
        # no GPU here: the warmup the build runs goes to the TensorRT engine it wrote
        warmed.append((config.platform, sorted(versions)))  # type: ignore[attr-defined, call-overload]

    try:
        report = _build(source, out, to="tensorrt", split_at_preferred=True, models=("seq",),
                        engine_runner=gpu_step, workspace_mb=64,
                        warmup_runner=engine_warmup)  # fmt: skip
    finally:
        builder._tensorrt = original
    assert warmed == [("tensorrt_plan", [1])]
    [seq] = report.models
    assert seq.status == "built" and seq.target == "tensorrt", seq.diagnostics
    assert seq.engine.built and seq.engine.plan_files == ["1/model.plan"]
    assert [list(dict(p)["x"].max) for p in built[0].config.profiles] == [
        [2, 64, 8], [4, 64, 8], [8, 64, 8]
    ]  # fmt: skip
    assert built[0].config.memory_pool_limits == {"WORKSPACE": 64 << 20}
    assert built[0].engine.timing_cache_path == str(out / "repokit.timing.cache")
    config = parse_file(out / "seq" / "config.pbtxt")
    assert (config.platform, config.backend, config.default_model_filename) == (
        "tensorrt_plan", "tensorrt", "model.plan"
    )  # fmt: skip
    assert [list(g.profile) for g in config.instance_group] == [["0", "1", "2"]]
    assert (out / "seq" / "1" / "model.plan").read_bytes() == b"serialized-engine"
    assert not (out / "seq" / "1" / "model.onnx").exists()
    lock = json.loads((out / LOCK_FILE).read_text())
    assert lock_problems(lock) == []
    assert lock["models"]["seq"]["engine"]["tensorrt_version"] == "10.13.3"
    assert lock["models"]["seq"]["engine"]["plan_sha256"][0].startswith("sha256:")


def test_in_place_build_rewrites_the_source_once(source: Path) -> None:
    shutil.rmtree(source / "broken")
    report = _build(source, source, in_place=True, models=("seq", "fixed"))
    assert _status(report) == {"fixed": "built", "seq": "built"}
    assert (source / LOCK_FILE).is_file()
    assert parse_file(source / "seq" / "config.pbtxt").model_warmup
    again = _build(source, source, in_place=True, models=("seq", "fixed"))
    assert set(_status(again).values()) == {"up-to-date"}


def test_failed_rebuild_removes_the_stale_compiled_copy(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _build(source, out, models=("seq",))
    (source / "seq" / "config.pbtxt").write_text(
        models.SEQUENCE_BIAS_CONFIG.replace("max_batch_size: 8", "max_batch_size: -1")
    )
    report = _build(source, out, models=("seq",))
    assert report.models[0].status == "failed" and not (out / "seq").exists()
    assert "does not pass validation" in report.models[0].reason


def test_profile_problems_fail_tensorrt_targets_only(source: Path, tmp_path: Path) -> None:
    onnx_only = _build(source, tmp_path / "a", shapes=(), models=("seq", "fixed"))
    assert _status(onnx_only) == {"fixed": "built", "seq": "built"}
    seq = next(m for m in onnx_only.models if m.name == "seq")
    assert seq.profiles == [] and seq.warmup == []
    assert "no profiles or warmup samples: input 'x' has dynamic dimension" in seq.notes[0]
    assert not parse_file(tmp_path / "a" / "seq" / "config.pbtxt").model_warmup

    report = _build(source, tmp_path / "b", shapes=(), models=("seq", "fixed"), to="tensorrt")
    assert _status(report) == {"fixed": "built", "seq": "failed"}
    [diagnostic] = next(m for m in report.models if m.name == "seq").diagnostics
    assert diagnostic.rule == "profile-underspecified"
    assert "--shape x:MIN,OPT,MAX" in diagnostic.message


PLAN_CONFIG = """
name: "plan"
platform: "tensorrt_plan"
max_batch_size: 16
input [ { name: "tokens" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "dims" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
dynamic_batching { preferred_batch_size: [ 4, 16 ] }
"""


def test_tensorrt_plan_models_get_profiles_from_the_config(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "plan" / "1").mkdir(parents=True)
    (source / "plan" / "1" / "model.plan").write_bytes(b"an engine built elsewhere")
    (source / "plan" / "config.pbtxt").write_text(PLAN_CONFIG)
    shapes = (parse_shape_option("tokens:1,64,256"), parse_shape_option("dims:1x1,2x8,4x16"))
    report = _build(source, tmp_path / "out", shapes=shapes, split_at_preferred=True)
    [plan] = report.models
    assert plan.status == "built" and plan.target == "tensorrt", plan.diagnostics
    assert any("engine's own profiles were not read" in n for n in plan.notes)
    assert [p["batch"] for p in plan.profiles] == [[1, 4, 4], [5, 16, 16]]
    dims = plan.profiles[1]["inputs"]["dims"]
    assert dims["shape_tensor"] and (dims["min"], dims["opt"], dims["max"]) == (
        [5, 1, 1], [16, 2, 8], [16, 4, 16]
    )  # fmt: skip
    config = parse_file(tmp_path / "out" / "plan" / "config.pbtxt")
    assert [list(g.profile) for g in config.instance_group] == [["0", "1"]]
    assert [w.name for w in config.model_warmup] == ["profile_0_opt", "profile_1_opt", "batch_1"]
    assert (tmp_path / "out" / "plan" / "profiles.json").is_file()
    assert (tmp_path / "out" / "plan" / "1" / "model.plan").read_bytes() == (
        b"an engine built elsewhere"
    )


def test_sample_data_gives_dynamic_ranges(source: Path, tmp_path: Path) -> None:
    samples = tmp_path / "samples.json"
    samples.write_text(json.dumps({"data": [
        {"x": {"content": [0.0] * (n * 8), "shape": [n, 8]}, "bias": [0.0] * 8} for n in (5, 9, 7)
    ]}))  # fmt: skip
    report = _build(source, tmp_path / "out", shapes=(), sample_data=samples, models=("seq",))
    [seq] = report.models
    assert seq.status == "built"
    x = seq.profiles[0]["inputs"]["x"]
    assert (x["min"], x["opt"], x["max"]) == ([1, 5, 8], [4, 7, 8], [8, 9, 8])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("missing", "out"), "does not exist"),
        (("src", "src/compiled"), "inside the source repository"),
        (("src", "src"), "use --in-place"),
        (("src", "."), "contains the source repository"),
    ],
)
def test_usage_errors(source: Path, tmp_path: Path, args: tuple[str, str], message: str) -> None:
    with pytest.raises(BuildUsageError, match=message):
        _build(tmp_path / args[0], tmp_path / args[1])


def test_bad_sample_data_and_broken_lock_are_usage_errors(source: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": 3}')
    with pytest.raises(BuildUsageError, match=r"\$.data: 3 is not of type 'array'"):
        _build(source, tmp_path / "out", sample_data=bad)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text('{"format": "other"}')
    with pytest.raises(BuildUsageError, match=r"does not match compiled_manifest\.schema\.json"):
        _build(source, out, check=True)
    assert _build(source, out, models=("fixed",)).exit_code == 0  # a build replaces it


@pytest.mark.parametrize("name", ["compiled_manifest.schema.json", "perf_input_data.schema.json"])
def test_schemas_are_valid_json_schemas(name: str) -> None:
    import jsonschema

    from repokit.paths import schemas_dir

    schema = json.loads((schemas_dir() / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)


def _with_fake_tensorrt(
    source: Path, out: Path, runner: object, factory: object = None, **overrides: object
) -> BuildReport:
    import repokit.build.builder as builder

    fake = SimpleNamespace(MemoryPoolType=SimpleNamespace(WORKSPACE="WORKSPACE"))
    original = builder._tensorrt
    builder._tensorrt = lambda options, status: (  # type: ignore[assignment]
        TensorRTStatus(True, "10.13.3", ""),
        fake,
    )
    try:
        options = BuildOptions(profile=True, shapes=SHAPES, to="tensorrt", **overrides)  # type: ignore[arg-type]
        return build_repository(source, out, options, engine_runner=runner,  # type: ignore[arg-type]
                                trt_runner_factory=factory,  # type: ignore[arg-type]
                                warmup_runner=lambda config, directory, versions: None,
                                )  # fmt: skip
    finally:
        builder._tensorrt = original


def test_engine_build_and_verify_failures_fail_the_model(source: Path, tmp_path: Path) -> None:
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    def no_gpu(loaders: EngineLoaders) -> None:
        raise RuntimeError("CUDA initialization failure with error: 35")

    report = _with_fake_tensorrt(source, tmp_path / "a", no_gpu, models=("add_sub_onnx",))
    [model] = report.models
    assert model.status == "failed" and model.diagnostics[0].rule == "engine-build-failed"
    assert "CUDA initialization failure" in model.reason

    def writes_plan(loaders: EngineLoaders) -> None:
        Path(loaders.save.path).write_bytes(b"plan")

    other = models.add_sub(tmp_path / "other.onnx")
    import onnx

    swapped = onnx.load(str(other))
    swapped.graph.node[0].op_type = "Mul"  # a wrong "engine"
    onnx.save(swapped, str(other))

    def wrong_engine(plan: Path, index: int) -> object:
        return OnnxrtRunner(SessionFromOnnx(str(other), providers=["cpu"]))

    def right_engine(plan: Path, index: int) -> object:
        return OnnxrtRunner(SessionFromOnnx(str(source / "add_sub_onnx" / "1" / "model.onnx"),
                                            providers=["cpu"]))  # fmt: skip

    bad = _with_fake_tensorrt(source, tmp_path / "b", writes_plan, wrong_engine, verify=True,
                              models=("add_sub_onnx",))  # fmt: skip
    assert bad.models[0].diagnostics[0].rule == "engine-verify-failed"
    good = _with_fake_tensorrt(source, tmp_path / "c", writes_plan, right_engine, verify=True,
                               models=("add_sub_onnx",))  # fmt: skip
    assert good.models[0].engine.verified is True, good.models[0].reason
    lock = json.loads((tmp_path / "c" / LOCK_FILE).read_text())
    assert lock["models"]["add_sub_onnx"]["engine"]["verified"] is True


def test_lock_read_and_write_errors(tmp_path: Path) -> None:
    from repokit.build.manifest import LockError, read_lock, write_lock

    (tmp_path / LOCK_FILE).write_text("{ not json")
    with pytest.raises(LockError, match="cannot be read"):
        read_lock(tmp_path)
    with pytest.raises(ValueError, match="refusing to write an invalid lock file"):
        write_lock(tmp_path, {"format": "repokit-lock/1"})


def test_output_that_is_a_file_is_a_usage_error(source: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(BuildUsageError, match="is not a directory"):
        _build(source, tmp_path / "file")
