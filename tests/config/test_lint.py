"""Lint rules: advice on valid configs, never errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.lint import LintOptions, lint_report
from repokit.config.report import RepositoryReport
from tests.config.ensemble_helpers import ensemble_config, manual_report, python_config, step

DYNAMIC = "dynamic_batching { }"


def lint(
    root: Path,
    models: dict[str, str | None],
    versions: dict[str, list[int]] | None = None,
    cores: int = 4,
) -> RepositoryReport:
    report = manual_report(root, models, versions)
    lint_report(report, LintOptions(cores=cores))
    return report


def found(report: RepositoryReport, model: str) -> list[Diagnostic]:
    diagnostics = report.models[model].diagnostics
    assert all(d.severity in (Severity.WARNING, Severity.INFO) for d in diagnostics)
    assert all(d.rule.startswith("lint-") for d in diagnostics)
    return diagnostics


def rule_ids(report: RepositoryReport, model: str) -> list[str]:
    return [d.rule for d in found(report, model)]


def test_well_configured_model_gets_no_advice(tmp_path: Path) -> None:
    text = python_config(
        "m",
        extra="dynamic_batching { preferred_batch_size: [ 2, 4 ] "
        "max_queue_delay_microseconds: 100 }",
    )
    assert rule_ids(lint(tmp_path, {"m": text}), "m") == []


def test_batching_model_without_dynamic_batching(tmp_path: Path) -> None:
    report = lint(tmp_path, {"m": python_config("m")})
    (finding,) = found(report, "m")
    assert finding.rule == "lint-no-dynamic-batching"
    assert finding.severity is Severity.WARNING
    assert (finding.path, finding.file) == ("dynamic_batching", "m/config.pbtxt")
    assert "max_batch_size is 8" in finding.message and ";" in finding.message


@pytest.mark.parametrize(
    "text",
    [
        python_config("m", max_batch_size=0),
        python_config("m", extra="sequence_batching { }"),
        ensemble_config("m", step("x", {"IN": "E_IN"}, {"OUT": "E_OUT"})),
    ],
    ids=["non-batching", "sequence", "ensemble"],
)
def test_no_dynamic_batching_advice_when_not_applicable(tmp_path: Path, text: str) -> None:
    assert "lint-no-dynamic-batching" not in rule_ids(lint(tmp_path, {"m": text}), "m")


def test_preferred_sizes_unsorted_and_duplicated(tmp_path: Path) -> None:
    text = python_config(
        "m",
        extra="dynamic_batching { preferred_batch_size: [ 4, 2, 4 ] "
        "max_queue_delay_microseconds: 50 }",
    )
    report = lint(tmp_path, {"m": text})
    by_rule = {d.rule: d for d in found(report, "m")}
    assert set(by_rule) == {
        "lint-preferred-batch-size-unsorted",
        "lint-preferred-batch-size-duplicate",
    }
    assert by_rule["lint-preferred-batch-size-duplicate"].message.startswith(
        "preferred_batch_size lists [4] more than once"
    )
    assert (
        by_rule["lint-preferred-batch-size-unsorted"].path
        == "dynamic_batching.preferred_batch_size"
    )


def test_preferred_sizes_of_the_oldest_sequence_strategy(tmp_path: Path) -> None:
    text = python_config(
        "m", extra="sequence_batching { oldest { preferred_batch_size: [ 8, 2 ] } }"
    )
    report = lint(tmp_path, {"m": text})
    (finding,) = found(report, "m")
    assert finding.rule == "lint-preferred-batch-size-unsorted"
    assert finding.path == "sequence_batching.oldest.preferred_batch_size"


def test_preferred_size_above_max_batch_size(tmp_path: Path) -> None:
    text = python_config(
        "m",
        max_batch_size=4,
        extra="dynamic_batching { preferred_batch_size: [ 2, 16 ] "
        "max_queue_delay_microseconds: 50 }",
    )
    report = lint(tmp_path, {"m": text})
    (finding,) = found(report, "m")
    assert finding.rule == "lint-preferred-batch-size-above-max"
    assert "[16] exceeds max_batch_size 4" in finding.message


def test_preferred_sizes_with_zero_queue_delay(tmp_path: Path) -> None:
    text = python_config("m", extra="dynamic_batching { preferred_batch_size: [ 4, 8 ] }")
    (finding,) = found(lint(tmp_path, {"m": text}), "m")
    assert finding.rule == "lint-preferred-batch-size-zero-delay"
    assert finding.path == "dynamic_batching.max_queue_delay_microseconds"


def test_empty_dynamic_batching_is_fine(tmp_path: Path) -> None:
    assert rule_ids(lint(tmp_path, {"m": python_config("m", extra=DYNAMIC)}), "m") == []


@pytest.mark.parametrize(("cores", "expected"), [(2, True), (3, False)])
def test_cpu_instances_above_cores(tmp_path: Path, cores: int, expected: bool) -> None:
    text = python_config(
        "m",
        extra=DYNAMIC
        + " instance_group [ { kind: KIND_CPU count: 2 }, { kind: KIND_CPU count: 1 } ]",
    )
    report = lint(tmp_path, {"m": text}, cores=cores)
    ids = rule_ids(report, "m")
    assert ("lint-cpu-instances-above-cores" in ids) is expected
    if expected:
        assert found(report, "m")[0].message.startswith("3 CPU instances on 2 cores")


def test_default_core_count_is_the_machine_s() -> None:
    assert LintOptions().core_count() >= 1
    assert LintOptions(cores=7).core_count() == 7


def tensorrt_config(extra: str = "", dims: str = "[ 4 ]") -> str:
    return (
        'name: "trt"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
        f'input [ {{ name: "IN" data_type: TYPE_FP32 dims: {dims} }} ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"{DYNAMIC}\n{extra}\n"
    )


def test_tensorrt_without_warmup(tmp_path: Path) -> None:
    (finding,) = found(lint(tmp_path, {"trt": tensorrt_config()}), "trt")
    assert (finding.rule, finding.severity) == ("lint-tensorrt-no-warmup", Severity.INFO)


def test_tensorrt_dynamic_dims_without_profiles(tmp_path: Path) -> None:
    warmup = (
        'model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: '
        "{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]"
    )
    report = lint(tmp_path, {"trt": tensorrt_config(warmup, dims="[ -1 ]")})
    (finding,) = found(report, "trt")
    assert finding.rule == "lint-tensorrt-dynamic-dims-no-profiles"
    with_profile = tensorrt_config(
        warmup + ' instance_group [ { kind: KIND_GPU profile: [ "0" ] } ]', "[ -1 ]"
    )
    assert rule_ids(lint(tmp_path / "p", {"trt": with_profile}), "trt") == []


def test_labels_count_mismatch(tmp_path: Path) -> None:
    text = python_config(
        "m",
        extra=DYNAMIC,
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] '
        'label_filename: "labels.txt" } ]',
    )
    report = manual_report(tmp_path, {"m": text})
    (tmp_path / "m" / "labels.txt").write_text("a\nb\nc\n")
    lint_report(report, LintOptions(cores=4))
    (finding,) = found(report, "m")
    assert finding.rule == "lint-labels-count-mismatch"
    assert finding.path == "output[0].label_filename"
    assert "has 3 lines but output 'OUT' has 4 elements" in finding.message
    (tmp_path / "m" / "labels.txt").write_text("a\nb\nc\nd\n")
    report.models["m"].diagnostics.clear()
    lint_report(report, LintOptions(cores=4))
    assert found(report, "m") == []


def test_ensemble_step_pinned_to_a_version_under_latest_policy(tmp_path: Path) -> None:
    pinned = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}, version=2)
    models = {"add": python_config("add", extra=DYNAMIC), "ens": ensemble_config("ens", pinned)}
    report = lint(tmp_path, models, versions={"add": [2]})
    (finding,) = found(report, "ens")
    assert finding.rule == "lint-ensemble-step-pinned-version"
    assert finding.path == "ensemble_scheduling.step[0].model_version"


def test_ensemble_step_pinned_under_specific_policy_is_fine(tmp_path: Path) -> None:
    pinned = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}, version=1)
    add = python_config("add", extra=DYNAMIC + " version_policy { specific { versions: [ 1 ] } }")
    report = lint(tmp_path, {"add": add, "ens": ensemble_config("ens", pinned)})
    assert rule_ids(report, "ens") == []


def test_unused_version_dirs_and_stray_files(tmp_path: Path) -> None:
    report = manual_report(tmp_path, {"m": python_config("m", extra=DYNAMIC)})
    model_dir = tmp_path / "m"
    (model_dir / "2").mkdir()
    (model_dir / "model.py").write_text("")
    (model_dir / "README.md").write_text("docs")
    (model_dir / ".hidden").write_text("")
    lint_report(report, LintOptions(cores=4))
    messages = [d.message for d in found(report, "m")]
    assert rule_ids(report, "m") == ["lint-unused-model-files", "lint-unused-model-files"]
    assert messages[0].startswith("version directory '2' is not loaded by the version policy")
    assert messages[1].startswith("file 'model.py' in the model directory is not used")


def test_models_without_config_are_skipped(tmp_path: Path) -> None:
    report = lint(tmp_path, {"m": None})
    assert found(report, "m") == []


CACHE = "response_cache { enable: true }"


def test_response_cache_reminds_of_the_server_flag(tmp_path: Path) -> None:
    report = lint(tmp_path, {"m": python_config("m", extra=DYNAMIC + " " + CACHE)})
    (finding,) = found(report, "m")
    assert finding.rule == "lint-response-cache-server-flag"
    assert finding.severity is Severity.INFO
    assert "--cache-config local,size=" in finding.message


def test_cached_ensemble_over_a_sequence_model(tmp_path: Path) -> None:
    add = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"})
    sequence = python_config("add", extra="sequence_batching { }")
    report = lint(tmp_path, {"add": sequence, "ens": ensemble_config("ens", add, extra=CACHE)})
    warnings = [d for d in found(report, "ens") if d.severity is Severity.WARNING]
    assert [d.rule for d in warnings] == ["lint-response-cache-sequence-step"]
    assert "'add' uses the sequence batcher" in warnings[0].message
    plain = lint(
        tmp_path / "plain",
        {
            "add": python_config("add", extra=DYNAMIC),
            "ens": ensemble_config("ens", add, extra=CACHE),
        },
    )
    assert "lint-response-cache-sequence-step" not in rule_ids(plain, "ens")
