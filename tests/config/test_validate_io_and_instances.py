"""IO (§4.3), instance groups (§4.5), strict mode and the missing-config cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.validate_helpers import IO, make_model, python_config, rules, validate_one

OUT = 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'


def _io(inputs: str, outputs: str = OUT, head: str = 'backend: "python"') -> str:
    return f"{head}\ninput [ {inputs} ]\n{outputs}"


@pytest.mark.parametrize(
    ("config", "expected", "path"),
    [
        (_io("{ data_type: TYPE_FP32 dims: [ 1 ] }"), "input-name-missing", "input[0].name"),
        (_io('{ name: "I" dims: [ 1 ] }'), "input-data-type-missing", "input[0].data_type"),
        (_io('{ name: "I" data_type: TYPE_FP32 }'), "input-dims-missing", "input[0].dims"),
        (
            _io('{ name: "I" data_type: TYPE_FP32 dims: [ 2, 0 ] }'),
            "input-dims-invalid",
            "input[0].dims[1]",
        ),
        (
            _io('{ name: "I" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ ] } }'),
            "input-reshape-empty",
            "input[0].reshape",
        ),
        (
            _io('{ name: "I" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ -3 ] } }'),
            "input-reshape-dims-invalid",
            "input[0].reshape.shape[0]",
        ),
        (
            _io(
                '{ name: "I" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ] reshape '
                "{ shape: [ 8, -1, 2, 6 ] } }"
            ),
            "input-reshape-size-mismatch",
            "input[0].reshape",
        ),
        (
            _io('{ name: "I" data_type: TYPE_FP32 dims: [ 2, -1 ] reshape { shape: [ -1, -1 ] } }'),
            "input-reshape-size-mismatch",
            "input[0].reshape",
        ),
        (
            _io('{ name: "I" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 2 ] }'),
            "input-format-dims",
            "input[0].format",
        ),
        (
            _io('{ name: "I" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true }'),
            "input-shape-tensor-platform",
            "input[0].is_shape_tensor",
        ),
        (
            _io(
                '{ name: "I" data_type: TYPE_FP32 dims: [ 2 ] is_non_linear_format_io: true }',
                head='platform: "tensorrt_plan"',
            ),
            "input-non-linear-io-dims",
            "input[0].dims",
        ),
        (
            _io(
                '{ name: "I" data_type: TYPE_FP32 dims: [ 2 ] }',
                'output [ { name: "O" data_type: TYPE_FP32 dims: [ 0 ] } ]',
            ),
            "output-dims-invalid",
            "output[0].dims[0]",
        ),
    ],
)
def test_io_rules(tmp_path: Path, config: str, expected: str, path: str) -> None:
    make_model(tmp_path, config=config, files={"1/model.plan": "x"})
    report = validate_one(tmp_path)
    found = [d for d in report.diagnostics if d.rule == expected]
    assert found and found[0].path == path
    assert rules(report, errors_only=True) == [expected]


@pytest.mark.parametrize(
    ("dims", "reshape"),
    [("[ 2, 4, -1, 6 ]", "[ 8, -1, 1, 6 ]"), ("[ 1 ]", "[ ]"), ("[ 4 ]", "[ 2, 2 ]")],
)
def test_valid_reshapes(tmp_path: Path, dims: str, reshape: str) -> None:
    make_model(
        tmp_path,
        config=_io(
            f'{{ name: "I" data_type: TYPE_FP32 dims: {dims} reshape {{ shape: {reshape} }} }}'
        )
        + "max_batch_size: 2\n",
    )
    assert validate_one(tmp_path).ok


BATCH = 'backend: "python"\nmax_batch_size: 4\n' + IO


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "T" data_type: TYPE_INT32 '
            'source_input: [ "IN", "IN" ] } ]',
            "batch-input-source-count",
        ),
        (
            'batch_input [ { target_name: "T" data_type: TYPE_FP16 source_input: "IN" } ]',
            "batch-input-data-type",
        ),
        ('batch_output [ { target_name: "OUT" source_input: "X" } ]', "batch-io-unknown-source"),
        ('batch_output [ { target_name: "OUT" } ]', "batch-output-source-count"),
        ('batch_output [ { target_name: "X" source_input: "IN" } ]', "batch-output-unknown-target"),
        (
            'batch_output [ { target_name: [ "OUT", "OUT" ] source_input: "IN" } ]',
            "batch-output-target-duplicated",
        ),
    ],
)
def test_batch_io_rules(tmp_path: Path, body: str, expected: str) -> None:
    make_model(tmp_path, config=BATCH + body)
    assert rules(validate_one(tmp_path), errors_only=True) == [expected]


def test_duplicate_tensor_names_warn(tmp_path: Path) -> None:
    make_model(
        tmp_path,
        config=_io(
            '{ name: "I" data_type: TYPE_FP32 dims: [ 1 ] }, '
            '{ name: "I" data_type: TYPE_FP32 dims: [ 1 ] }'
        ),
    )
    report = validate_one(tmp_path)
    assert report.ok and rules(report) == ["input-name-duplicated"]


@pytest.mark.parametrize(
    ("groups", "target", "expected"),
    [
        ("[ { kind: KIND_GPU } ]", "cpu", ["instance-group-gpu-unavailable"]),
        ("[ { kind: KIND_GPU } ]", "gpu", []),
        ("[ { kind: KIND_GPU gpus: [ -1 ] } ]", "gpu", ["instance-group-gpu-invalid"]),
        ("[ { gpus: [ 0 ] } ]", "cpu", ["instance-group-cpu-gpus"]),
        ("[ { gpus: [ 0 ] } ]", "gpu", []),
        ("[ { kind: KIND_CPU gpus: [ 1 ] } ]", "gpu", ["instance-group-cpu-gpus"]),
        ("[ { kind: KIND_MODEL gpus: [ 0 ] } ]", "cpu", ["instance-group-model-gpus"]),
        ("[ { kind: KIND_MODEL } ]", "cpu", []),
        ('[ { kind: KIND_CPU profile: [ "0" ] } ]', "cpu", ["instance-group-profile-platform"]),
        ("[ { count: -3 } ]", "cpu", []),
    ],
)
def test_instance_groups(tmp_path: Path, groups: str, target: str, expected: list[str]) -> None:
    make_model(tmp_path, config=python_config(f"instance_group {groups}"))
    assert rules(validate_one(tmp_path, target=target), errors_only=True) == expected


@pytest.mark.parametrize(
    ("gpus", "count", "listed"),
    [
        ("[ -1 ]", -1, "(not known without a server: give --gpus N)"),
        ("[ 0, 42 ]", 2, "0, 1"),  # Triton's qa L0_model_config invalid_gpu
        ("[ 0, 1 ]", 0, ""),
    ],
)
def test_gpu_ids_the_server_does_not_have(
    tmp_path: Path, gpus: str, count: int, listed: str
) -> None:
    make_model(
        tmp_path, config=python_config(f"instance_group [ {{ kind: KIND_GPU gpus: {gpus} }} ]")
    )
    report = validate_one(tmp_path, target="gpu", gpus=count)
    [finding] = [d for d in report.diagnostics if d.is_error]
    bad = gpus.strip("[ ]").split(", ")[-1] if count else "0"
    assert finding.rule == "instance-group-gpu-invalid"
    # Triton's text (model_config_utils.cc), with its default minimum compute capability
    assert finding.message == (
        f"instance group m_0 of model m specifies invalid or unsupported gpu id {bad}. GPUs "
        f"with at least the minimum required CUDA compute compatibility of 6.000000 are: {listed}"
    )


def test_gpu_ids_within_the_count_are_accepted(tmp_path: Path) -> None:
    make_model(tmp_path, config=python_config("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]"))
    assert validate_one(tmp_path, target="gpu", gpus=2).ok


@pytest.mark.parametrize(
    ("profile", "ok"), [('"0"', True), ('"-1"', False), ('"x"', False), ('""', False)]
)
def test_tensorrt_profiles(tmp_path: Path, profile: str, ok: bool) -> None:
    make_model(
        tmp_path,
        config=f'platform: "tensorrt_plan"\n{IO}instance_group [ {{ kind: '
        f"KIND_CPU profile: [ {profile} ] }} ]",
        files={"1/model.plan": "x"},
    )
    report = validate_one(tmp_path)
    assert report.ok is ok
    if not ok:
        assert rules(report, errors_only=True) == ["instance-group-profile-invalid"]


def test_strict_requires_config(tmp_path: Path) -> None:
    make_model(tmp_path, config=None)
    assert validate_one(tmp_path).ok  # Triton 2.51 autocompletes python models without config
    strict = validate_one(tmp_path, strict=True)
    assert rules(strict) == ["config-missing"]


def test_no_config_for_backend_without_autocomplete(tmp_path: Path) -> None:
    make_model(
        tmp_path, name="x.identity", config=None, versions=(), files={"1/model.identity": "x"}
    )
    assert rules(validate_one(tmp_path, "x.identity")) == ["config-not-autocompleted"]


def test_no_config_and_no_backend(tmp_path: Path) -> None:
    make_model(tmp_path, config=None, versions=(), files={"1/readme.txt": "x"})
    assert rules(validate_one(tmp_path)) == ["backend-undeterminable"]


def test_onnx_without_config_is_valid(tmp_path: Path) -> None:
    make_model(tmp_path, config=None, versions=(), files={"1/model.onnx": b"x"})
    report = validate_one(tmp_path)
    assert report.ok
    assert report.config is not None and report.config.backend == "onnxruntime"
    assert [g.count for g in report.config.instance_group] == [2]


@pytest.mark.parametrize(
    ("runtime", "files", "escapes"),
    [
        # Triton's qa L0_model_config special_cases/runtime_escape
        ("../dummy_runtime/libtriton_identity.so", ["dummy_runtime/libtriton_identity.so"], True),
        ("libtriton_identity.so", ["1/libtriton_identity.so"], False),
        ("libtriton_identity.so", ["libtriton_identity.so"], False),
        # not in the repository: the server's backend directory decides
        ("../dummy_runtime/libtriton_identity.so", [], False),
        ("__invalid_runtime__", [], False),
    ],
)
def test_a_runtime_library_outside_its_folder_is_refused(
    tmp_path: Path, runtime: str, files: list[str], escapes: bool
) -> None:
    make_model(
        tmp_path,
        config=f'backend: "identity"\nruntime: "{runtime}"\n{IO}',
        files=dict.fromkeys(files, ""),
    )
    report = validate_one(tmp_path)
    found = [d for d in report.diagnostics if d.rule == "runtime-escapes-backend-dir"]
    assert bool(found) is escapes, report.diagnostics
    if escapes:
        assert found[0].message == (
            f"backend library name '{runtime}' escapes backend directory "
            f"'{tmp_path / 'm' / '1'}', for model 'm', check model config runtime field"
        )
        assert found[0].path == "runtime"


@pytest.mark.parametrize(
    ("config", "installed", "message"),
    [
        ('backend: "identity"', ["identity/libtriton_identity.so"], ""),
        ('backend: "mine"', ["mine/model.py"], ""),  # a python-based backend
        (
            'backend: "identity"',  # Triton's qa autofill_noplatform/custom/unknown_backend
            [],
            "unable to find backend library for backend 'identity', try specifying runtime on "
            "the model configuration.",
        ),
        (
            'backend: "identity"\nruntime: "__invalid_runtime__"',  # qa special_cases
            ["identity/libtriton_identity.so"],
            "unable to find backend library '__invalid_runtime__' for model 'm', searched: "
            "'{model}/1' '{model}' '{backends}/identity'",
        ),
        ('backend: "mine"\nruntime: "model.py"', ["mine/model.py"], ""),
        (
            'backend: "mine"\nruntime: "model.py"',
            [],
            "unable to find Python backend based backend library 'model.py' for model 'm', "
            "searched: '{backends}/mine/model.py'",
        ),
    ],
)
def test_backend_directory_says_which_libraries_the_server_has(
    tmp_path: Path, config: str, installed: list[str], message: str
) -> None:
    backends = tmp_path / "backends"
    for rel in installed:
        (backends / rel).parent.mkdir(parents=True, exist_ok=True)
        (backends / rel).write_text("")
    backends.mkdir(exist_ok=True)
    repo = tmp_path / "repo"
    make_model(repo, config=f"{config}\n{IO}")
    report = validate_one(repo, backend_directory=str(backends))
    found = [d.message for d in report.diagnostics if d.rule == "backend-library-missing"]
    expected = message.format(model=repo / "m", backends=backends)
    assert found == ([expected] if message else []), report.diagnostics
    assert validate_one(repo).ok  # without the flag the server's directory is not known


@pytest.mark.parametrize(
    ("platform", "files", "strict", "severity"),
    [
        # Triton's qa autofill_noplatform_success/tensorflow_savedmodel/incomplete_input: the
        # tensorflow backend completes the tensor from the SavedModel, which repokit does not read
        ("tensorflow_savedmodel", {"1/model.savedmodel/saved_model.pb": "x"}, False, "warning"),
        ("tensorflow_savedmodel", {"1/model.savedmodel/saved_model.pb": "x"}, True, "error"),
        ("tensorrt_plan", {"1/model.plan": "x"}, False, "warning"),
        ("tensorflow_graphdef", {"1/model.graphdef": "x"}, False, "error"),  # no autofill
    ],
)
def test_a_tensor_the_backend_may_complete_is_a_warning(
    tmp_path: Path, platform: str, files: dict[str, str], strict: bool, severity: str
) -> None:
    config = (
        f'platform: "{platform}"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    make_model(tmp_path, config=config, versions=(), files=files)
    report = validate_one(tmp_path, strict=strict, read_sources=False)
    [finding] = [d for d in report.diagnostics if d.rule == "input-dims-missing"]
    assert finding.severity.value == severity
    assert ("unless the" in finding.message) is (severity == "warning")
