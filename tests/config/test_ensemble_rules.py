"""Ensemble rules: static schedule checks, dependencies, and checks against composing configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.ensemble_rules import ENSEMBLE_RULES, check_ensembles
from repokit.config.report import RepositoryReport, ValidateOptions
from repokit.config.validate import validate_repository
from repokit.paths import sample_repos_dir
from tests.config.ensemble_helpers import ensemble_config, manual_report, python_config, step

ADD = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"})


def build(
    root: Path,
    models: dict[str, str | None],
    versions: dict[str, list[int]] | None = None,
    broken: dict[str, str] | None = None,
) -> RepositoryReport:
    report = manual_report(root, models, versions, broken)
    check_ensembles(report, ValidateOptions())
    return report


def rules(
    report: RepositoryReport, model: str, severity: Severity | None = Severity.ERROR
) -> list[str]:
    return [
        d.rule
        for d in report.models[model].diagnostics
        if severity is None or d.severity is severity
    ]


def only(report: RepositoryReport, model: str) -> Diagnostic:
    errors = [d for d in report.models[model].diagnostics if d.severity is Severity.ERROR]
    assert len(errors) == 1, errors
    return errors[0]


def test_valid_ensemble_has_no_findings(tmp_path: Path) -> None:
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", ADD)})
    assert report.models["ens"].diagnostics == []
    assert report.models["add"].diagnostics == []


def test_two_step_chain_with_intermediate_tensor_is_valid(tmp_path: Path) -> None:
    steps = step("add", {"IN": "E_IN"}, {"OUT": "MID"}) + step(
        "add", {"IN": "MID"}, {"OUT": "E_OUT"}
    )
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", steps)})
    assert report.models["ens"].diagnostics == []


@pytest.mark.parametrize(
    ("extra", "rule", "path"),
    [
        ("instance_group [ { kind: KIND_CPU } ]", "ensemble-instance-group", "instance_group"),
        ("optimization { }", "ensemble-optimization", "optimization"),
        (
            'model_warmup [ { name: "w" batch_size: 1 inputs { key: "E_IN" value: '
            "{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]",
            "ensemble-model-warmup",
            "model_warmup",
        ),
    ],
)
def test_fields_an_ensemble_must_not_have(tmp_path: Path, extra: str, rule: str, path: str) -> None:
    report = build(
        tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", ADD, extra=extra)}
    )
    finding = only(report, "ens")
    assert (finding.rule, finding.path, finding.file) == (rule, path, "ens/config.pbtxt")
    assert "ens" in finding.message


def test_no_steps(tmp_path: Path) -> None:
    report = build(tmp_path, {"ens": ensemble_config("ens", "")})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-no-steps"
    assert finding.message == "must specify 'step' for ensemble 'ens'"


@pytest.mark.parametrize(
    ("text", "rule", "path"),
    [
        (
            'step { model_name: "" model_version: -1 input_map { key: "IN" value: "E_IN" } '
            'output_map { key: "OUT" value: "E_OUT" } }',
            "ensemble-step-model-name-missing",
            "ensemble_scheduling.step[0].model_name",
        ),
        (
            'step { model_name: "add" model_version: -1 output_map { key: "OUT" value: "E_OUT" } }',
            "ensemble-step-input-map-missing",
            "ensemble_scheduling.step[0].input_map",
        ),
        (
            'step { model_name: "add" model_version: -1 input_map { key: "IN" value: "E_IN" } }',
            "ensemble-step-output-map-missing",
            "ensemble_scheduling.step[0].output_map",
        ),
    ],
)
def test_step_fields_required(tmp_path: Path, text: str, rule: str, path: str) -> None:
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", text)})
    finding = only(report, "ens")
    assert (finding.rule, finding.path) == (rule, path)
    assert finding.message.startswith("must specify '")


def test_tensor_produced_twice(tmp_path: Path) -> None:
    steps = ADD + step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"})
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-tensor-produced-twice"
    assert finding.path == 'ensemble_scheduling.step[1].output_map["OUT"]'
    assert (
        "ensemble tensor 'E_OUT' can appear in an output map only once for ensemble 'ens' step 1"
        in (finding.message)
    )


def test_unused_ensemble_input(tmp_path: Path) -> None:
    inputs = (
        'input [ { name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "SPARE" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    )
    report = build(
        tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", ADD, inputs=inputs)}
    )
    finding = only(report, "ens")
    assert (finding.rule, finding.path) == ("ensemble-input-unused", "input[1]")
    assert "ensemble input 'SPARE' for ensemble ens' is not used" in finding.message


def test_ensemble_output_never_produced(tmp_path: Path) -> None:
    outputs = (
        'output [ { name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "NEVER" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    )
    report = build(
        tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", ADD, outputs=outputs)}
    )
    finding = only(report, "ens")
    assert (finding.rule, finding.path) == ("ensemble-output-not-produced", "output[1]")
    assert "ensemble output 'NEVER' for ensemble ens' is not used" in finding.message


def test_output_not_written_names_the_unconnected_tensor(tmp_path: Path) -> None:
    steps = step("add", {"IN": "E_IN"}, {"OUT": "MID"}) + step(
        "add", {"IN": "TYPO"}, {"OUT": "E_OUT"}
    )
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", steps)})
    errors = {d.rule: d for d in report.models["ens"].diagnostics}
    finding = errors["ensemble-output-not-written"]
    assert finding.message.startswith(
        "output 'E_OUT' for ensemble 'ens' is not written: at least one of its depending "
        "tensors, 'TYPO', is not connected"
    )
    # MID is produced and never consumed: a dangling tensor, reported on its own
    assert errors["ensemble-tensor-unused"].message.startswith(
        "ensemble tensor 'MID' is unused in ensemble 'ens'"
    )
    assert len(report.models["ens"].diagnostics) == 2


def test_dangling_intermediate_tensor(tmp_path: Path) -> None:
    two = python_config(
        "two",
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "AUX" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    steps = step("two", {"IN": "E_IN"}, {"OUT": "E_OUT", "AUX": "EXTRA"})
    report = build(tmp_path, {"two": two, "ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-tensor-unused"
    assert "'EXTRA'" in finding.message


def test_scheduling_on_non_ensemble_platform_is_left_to_model_config_rules(tmp_path: Path) -> None:
    # ValidateModelConfig's rule (ensemble-scheduling-platform) reports it; no second finding
    text = python_config("add", extra="ensemble_scheduling { " + ADD + " }")
    report = build(tmp_path, {"add": text})
    assert report.models["add"].diagnostics == []


def test_missing_step_models_are_listed(tmp_path: Path) -> None:
    steps = step("nosuch", {"IN": "E_IN"}, {"OUT": "MID"}) + step(
        "other", {"IN": "MID"}, {"OUT": "E_OUT"}
    )
    report = build(tmp_path, {"ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-step-model-missing"
    assert finding.message.startswith(
        "ensemble ens contains models that are not available or ambiguous: nosuch, other"
    )
    assert finding.path == "ensemble_scheduling.step[0].model_name"


def test_invalid_step_model_makes_the_ensemble_invalid(tmp_path: Path) -> None:
    report = build(
        tmp_path,
        {"add": python_config("add"), "ens": ensemble_config("ens", ADD)},
        broken={"add": "model input 'IN' must specify 'dims' for add"},
    )
    finding = only(report, "ens")
    assert finding.rule == "ensemble-step-model-invalid"
    assert finding.message == (
        "ensemble 'ens' depends on 'add' which is not valid. Model 'add' failed with error: "
        "model input 'IN' must specify 'dims' for add"
    )


def test_step_model_without_loadable_version(tmp_path: Path) -> None:
    report = build(
        tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", ADD)}, {"add": []}
    )
    assert (
        only(report, "ens").message
        == "ensemble 'ens' depends on 'add' which has no loaded version."
    )


@pytest.mark.parametrize(("version", "hint"), [(2, False), (0, True)])
def test_required_version_not_loaded(tmp_path: Path, version: int, hint: bool) -> None:
    steps = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}, version=version)
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-step-version-not-loaded"
    assert finding.message.startswith(
        f"ensemble 'ens' depends on 'add' whose required version {version} is not loaded."
    )
    assert ("defaults to 0" in finding.message) is hint
    assert finding.path == "ensemble_scheduling.step[0].model_version"


def test_required_version_loaded_by_policy(tmp_path: Path) -> None:
    steps = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}, version=2)
    report = build(
        tmp_path,
        {"add": python_config("add"), "ens": ensemble_config("ens", steps)},
        {"add": [1, 2]},
    )
    assert report.models["ens"].diagnostics == []


def test_cycle_between_ensembles(tmp_path: Path) -> None:
    to_b = step("ens_b", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})
    to_a = step("ens_a", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})
    report = build(
        tmp_path, {"ens_a": ensemble_config("ens_a", to_b), "ens_b": ensemble_config("ens_b", to_a)}
    )
    a = only(report, "ens_a")
    assert a.rule == "ensemble-circular-dependency"
    assert a.message.startswith(
        "circular dependency between ensembles: ens_a -> ... -> ens_b -> ens_a"
    )
    assert only(report, "ens_b").rule == "ensemble-circular-dependency"


def test_ensemble_containing_itself(tmp_path: Path) -> None:
    me = step("ens", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})
    report = build(tmp_path, {"ens": ensemble_config("ens", me)})
    assert only(report, "ens").message.startswith(
        "circular dependency between ensembles: ens -> ... -> ens -> ens"
    )


def test_ensemble_of_ensembles_inherits_invalidity(tmp_path: Path) -> None:
    inner_bad = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}, version=5)
    outer = step("inner", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})
    report = build(
        tmp_path,
        {
            "outer": ensemble_config("outer", outer),  # listed first: order must not matter
            "inner": ensemble_config("inner", inner_bad),
            "add": python_config("add"),
        },
    )
    assert rules(report, "inner") == ["ensemble-step-version-not-loaded"]
    finding = only(report, "outer")
    assert finding.rule == "ensemble-step-model-invalid"
    assert "whose required version 5 is not loaded" in finding.message


def test_ensemble_of_valid_ensembles(tmp_path: Path) -> None:
    outer = step("inner", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})
    report = build(
        tmp_path,
        {
            "outer": ensemble_config("outer", outer),
            "inner": ensemble_config("inner", ADD),
            "add": python_config("add"),
        },
    )
    assert report.models["outer"].diagnostics == []


def test_ensemble_depending_on_a_cycle(tmp_path: Path) -> None:
    report = build(
        tmp_path,
        {
            "outer": ensemble_config("outer", step("ens", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})),
            "ens": ensemble_config("ens", step("ens", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})),
        },
    )
    assert rules(report, "outer") == ["ensemble-step-model-invalid"]
    # real Triton 2.51 overflows its stack in CircularDependencyCheck on this repository
    assert "crashes" in only(report, "outer").message


# --- checks against the composing models' configs (ValidateEnsembleConfig) ---


def test_step_model_with_smaller_max_batch_size(tmp_path: Path) -> None:
    report = build(
        tmp_path,
        {"add": python_config("add", max_batch_size=4), "ens": ensemble_config("ens", ADD)},
    )
    finding = only(report, "ens")
    assert finding.rule == "ensemble-max-batch-size"
    assert finding.message == (
        "ensemble ens allows maximum batch size 8, but it contains model add which only allows "
        "maximum batch size to be 4"
    )


def test_non_batching_step_in_batching_ensemble_with_batch_dim(tmp_path: Path) -> None:
    # a non-batching [-1,4] step matches the batching ensemble's [4] with the batch dim prepended
    add = python_config(
        "add",
        max_batch_size=0,
        inputs='input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]',
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]',
    )
    report = build(tmp_path, {"add": add, "ens": ensemble_config("ens", ADD)})
    assert report.models["ens"].diagnostics == []


def test_non_batching_step_without_batch_dim_mismatches(tmp_path: Path) -> None:
    add = python_config(
        "add",
        max_batch_size=0,
        inputs='input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 5 ] } ]',
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]',
    )
    report = build(tmp_path, {"add": add, "ens": ensemble_config("ens", ADD)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-tensor-shape-mismatch"
    assert finding.message.startswith(
        "in ensemble ens, ensemble tensor E_IN: inconsistent shape: [-1,4] is inferred from "
        "model ens while [-1,5] is inferred from model add"
    )
    assert finding.path == 'ensemble_scheduling.step[0].input_map["IN"]'


def test_wildcard_dims_match(tmp_path: Path) -> None:
    add = python_config(
        "add",
        inputs='input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]',
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]',
    )
    report = build(tmp_path, {"add": add, "ens": ensemble_config("ens", ADD)})
    assert report.models["ens"].diagnostics == []


def test_datatype_mismatch_between_steps(tmp_path: Path) -> None:
    ints = python_config(
        "ints",
        inputs='input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] } ]',
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    steps = step("add", {"IN": "E_IN"}, {"OUT": "MID"}) + step(
        "ints", {"IN": "MID"}, {"OUT": "E_OUT"}
    )
    report = build(
        tmp_path, {"add": python_config("add"), "ints": ints, "ens": ensemble_config("ens", steps)}
    )
    finding = only(report, "ens")
    assert finding.rule == "ensemble-tensor-datatype-mismatch"
    assert finding.message == (
        "in ensemble ens, ensemble tensor MID: inconsistent data type: TYPE_FP32 is inferred "
        "from model add while TYPE_INT32 is inferred from model ints"
    )
    assert finding.path == 'ensemble_scheduling.step[1].input_map["IN"]'


def test_ensemble_io_reshape_is_used_for_comparison(tmp_path: Path) -> None:
    add = python_config(
        "add",
        inputs='input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]',
        outputs='output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    inputs = (
        'input [ { name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]'
    )
    report = build(tmp_path, {"add": add, "ens": ensemble_config("ens", ADD, inputs=inputs)})
    assert report.models["ens"].diagnostics == []
    plain = build(tmp_path / "plain", {"add": add, "ens": ensemble_config("ens", ADD)})
    assert only(plain, "ens").rule == "ensemble-tensor-shape-mismatch"


def test_input_map_key_is_not_a_model_input(tmp_path: Path) -> None:
    steps = step("add", {"IN": "E_IN", "NOPE": "E_IN"}, {"OUT": "E_OUT"})
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-step-unknown-input"
    assert finding.message.startswith(
        "in ensemble ens, ensemble tensor E_IN is mapping to non-existing input NOPE in model add"
    )
    assert finding.path == 'ensemble_scheduling.step[0].input_map["NOPE"]'


def test_model_input_not_mapped(tmp_path: Path) -> None:
    two = python_config(
        "two",
        inputs='input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    steps = step("two", {"IN": "E_IN"}, {"OUT": "E_OUT"})
    report = build(tmp_path, {"two": two, "ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-step-input-not-mapped"
    assert finding.message.startswith(
        "in ensemble ens, input B in model two is not mapped to any ensemble tensors"
    )


def test_optional_input_may_stay_unmapped(tmp_path: Path) -> None:
    two = python_config(
        "two",
        inputs='input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "B" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]',
    )
    steps = step("two", {"IN": "E_IN"}, {"OUT": "E_OUT"})
    report = build(tmp_path, {"two": two, "ens": ensemble_config("ens", steps)})
    assert report.models["ens"].diagnostics == []


def test_output_map_key_is_not_a_model_output(tmp_path: Path) -> None:
    steps = step("add", {"IN": "E_IN"}, {"OUTPUT": "E_OUT"})
    report = build(tmp_path, {"add": python_config("add"), "ens": ensemble_config("ens", steps)})
    finding = only(report, "ens")
    assert finding.rule == "ensemble-step-unknown-output"
    assert finding.message.startswith(
        "in ensemble ens, ensemble tensor E_OUT is mapped from non-existing output OUTPUT in "
        "model add (did you mean 'OUT'?) (its outputs: OUT)"
    )


def test_step_inputs_from_different_decoupled_branches(tmp_path: Path) -> None:
    decoupled = python_config("dec", extra="model_transaction_policy { decoupled: true }")
    both = python_config(
        "both",
        inputs='input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    steps = (
        step("dec", {"IN": "E_IN"}, {"OUT": "X"})
        + step("add", {"IN": "E_IN"}, {"OUT": "Y"})
        + step("both", {"A": "X", "B": "Y"}, {"OUT": "E_OUT"})
    )
    models = {
        "dec": decoupled,
        "add": python_config("add"),
        "both": both,
        "ens": ensemble_config("ens", steps),
    }
    report = build(tmp_path, models)
    finding = only(report, "ens")
    assert finding.rule == "ensemble-decoupled-mixed-inputs"
    # Triton names the model E_OUT's type is first inferred from: the ensemble (its output)
    assert finding.message == (
        "in ensemble ens, step of model 'ens' receives inputs originated from different "
        "decoupled models (the step of model 'both' is the one that does)"
    )


def test_decoupled_chain_is_valid(tmp_path: Path) -> None:
    decoupled = python_config("dec", extra="model_transaction_policy { decoupled: true }")
    steps = step("dec", {"IN": "E_IN"}, {"OUT": "X"}) + step("add", {"IN": "X"}, {"OUT": "E_OUT"})
    report = build(
        tmp_path,
        {"dec": decoupled, "add": python_config("add"), "ens": ensemble_config("ens", steps)},
    )
    assert report.models["ens"].diagnostics == []


def test_step_without_known_io_is_skipped_with_info(tmp_path: Path) -> None:
    report = build(tmp_path, {"add": 'backend: "onnxruntime"', "ens": ensemble_config("ens", ADD)})
    assert rules(report, "ens") == []
    infos = [d for d in report.models["ens"].diagnostics if d.severity is Severity.INFO]
    assert [d.rule for d in infos] == ["ensemble-step-io-unknown"]
    assert "auto-completes" in infos[0].message


def test_step_model_without_config_is_skipped_with_info(tmp_path: Path) -> None:
    report = build(tmp_path, {"add": None, "ens": ensemble_config("ens", ADD)})
    assert rules(report, "ens", None) == ["ensemble-step-io-unknown"]


def test_composing_checks_wait_for_static_checks(tmp_path: Path) -> None:
    # the unknown output would be reported by the composing checks; Triton never gets there
    steps = step("add", {"IN": "E_IN"}, {"NOPE": "E_OUT"})
    report = build(
        tmp_path,
        {
            "add": python_config("add"),
            "ens": ensemble_config("ens", steps, extra="optimization { }"),
        },
    )
    assert rules(report, "ens") == ["ensemble-optimization"]


ENSEMBLE_CASES = sorted(
    p
    for p in (sample_repos_dir() / "invalid").glob("ensemble-*/expected.json")
    if json.loads(p.read_text())["rule"] in ENSEMBLE_RULES
)


def test_there_is_an_invalid_case_per_ensemble_error_rule() -> None:
    covered = {json.loads(p.read_text())["rule"] for p in ENSEMBLE_CASES}
    errors = set(ENSEMBLE_RULES) - {"ensemble-step-io-unknown"}
    assert covered == errors


def test_every_reported_rule_is_listed(tmp_path: Path) -> None:
    source = "".join(
        (Path(__file__).parents[2] / "repokit" / "config" / name).read_text()
        for name in ("ensemble_rules.py", "ensemble_graph.py", "ensemble_composing.py")
    )
    for rule in ENSEMBLE_RULES:
        assert source.count(f'"{rule}"') >= 2, rule  # listed and reported


@pytest.mark.parametrize("expected", ENSEMBLE_CASES, ids=lambda p: p.parent.name)
def test_invalid_sample_yields_exactly_its_rule(expected: Path) -> None:
    case = json.loads(expected.read_text())
    report = validate_repository(expected.parent, ValidateOptions())
    errors = [d.rule for d in report.models[case["model"]].diagnostics if d.is_error]
    assert errors == [case["rule"]]


CACHE = "response_cache { enable: true }"
DECOUPLED = "model_transaction_policy { decoupled: true }"


def test_response_cache_on_an_ensemble_with_a_decoupled_step(tmp_path: Path) -> None:
    models = {
        "add": python_config("add", extra=DECOUPLED),
        "ens": ensemble_config("ens", ADD, extra=CACHE),
    }
    finding = only(build(tmp_path, models), "ens")
    assert finding.rule == "response-cache-decoupled-step"
    assert finding.path == "response_cache.enable"
    assert finding.message.startswith(
        "Response Cache does not currently support model ens with 'decoupled' transaction "
        "policy. Please disable the response cache."
    )
    assert "'add'" in finding.message


def test_response_cache_on_an_ensemble_over_a_decoupled_nested_ensemble(tmp_path: Path) -> None:
    inner = step("inner", {"E_IN": "E_IN"}, {"E_OUT": "E_OUT"})
    models = {
        "add": python_config("add", extra=DECOUPLED),
        "inner": ensemble_config("inner", ADD),
        "outer": ensemble_config("outer", inner, extra=CACHE),
    }
    report = build(tmp_path, models)
    assert rules(report, "outer") == ["response-cache-decoupled-step"]
    assert rules(report, "inner") == []


def test_response_cache_on_an_ensemble_of_plain_steps_is_valid(tmp_path: Path) -> None:
    models = {
        "add": python_config("add", extra=CACHE),
        "ens": ensemble_config("ens", ADD, extra=CACHE),
    }
    assert rules(build(tmp_path, models), "ens", None) == []
