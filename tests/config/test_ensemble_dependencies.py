"""first_problem: the first reason Triton 2.51 refuses an ensemble once its step models have
loaded, with Triton's text (each error path of config/ensemble_dependencies.py and of
ValidateEnsembleConfig as ``repokit serve`` uses it). The texts were read from Triton 2.51's
answers to loads of sample_repos/invalid (tests/differential/test_ensemble_load_vs_triton.py)."""

from __future__ import annotations

from google.protobuf import text_format

from repokit.config.ensemble_dependencies import StepModelState, first_problem
from repokit.config.ensemble_graph import Finding
from repokit.protocol.generated import model_config_pb2 as mc


def _config(text: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    text_format.Parse(text, config)
    return config


def _step_model(
    input_type: str = "TYPE_FP32",
    dims: str = "4",
    mbs: int = 8,
    extra: str = "",
    inputs: str = "",
) -> mc.ModelConfig:
    inputs = inputs or f'input {{ name: "IN" data_type: {input_type} dims: [ {dims} ] }}'
    return _config(
        f'backend: "python" max_batch_size: {mbs} {inputs} '
        f'output {{ name: "OUT" data_type: TYPE_FP32 dims: [ {dims} ] }} {extra}'
    )


def _ensemble(steps: str, mbs: int = 8, in_dims: str = "4") -> mc.ModelConfig:
    return _config(
        f'name: "ens" platform: "ensemble" max_batch_size: {mbs} '
        f'input {{ name: "E_IN" data_type: TYPE_FP32 dims: [ {in_dims} ] }} '
        'output { name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] } '
        f"ensemble_scheduling {{ {steps} }}"
    )


def _step(
    model: str, inputs: str = '"IN": "E_IN"', outputs: str = '"OUT": "E_OUT"', v: int = -1
) -> str:
    maps = "".join(
        f"{kind} {{ key: {pair.split(':')[0]} value: {pair.split(':')[1]} }} "
        for kind, group in (("input_map", inputs), ("output_map", outputs))
        for pair in group.split(",")
        if pair
    )
    return f'step {{ model_name: "{model}" model_version: {v} {maps}}}'


ONE_STEP = _ensemble(_step("add"))


def _ready(config: mc.ModelConfig, versions: tuple[int, ...] = (1,)) -> StepModelState:
    return StepModelState(available=True, versions=versions, config=config)


def test_a_valid_ensemble_has_no_problem() -> None:
    assert first_problem("ens", ONE_STEP, {"add": _ready(_step_model())}) == ""


def test_step_models_not_available_are_listed_sorted() -> None:
    config = _ensemble(_step("zeta", outputs='"OUT": "T"') + _step("alpha", inputs='"IN": "T"'))
    steps = {"zeta": StepModelState(available=False), "alpha": StepModelState(available=False)}
    assert first_problem("ens", config, steps) == (
        "ensemble ens contains models that are not available or ambiguous: alpha, zeta"
    )


def test_a_step_ensemble_refused_itself_is_not_valid() -> None:
    state = StepModelState(available=True, graph_error="in ensemble inner, it broke")
    assert first_problem("ens", ONE_STEP, {"add": state}) == (
        "ensemble 'ens' depends on 'add' which is not valid. Model 'add' failed with error: "
        "in ensemble inner, it broke"
    )


def test_a_step_without_ready_version_names_its_load_error() -> None:
    failed = StepModelState(available=True, load_error="version 1 is at UNAVAILABLE state: x;")
    assert first_problem("ens", ONE_STEP, {"add": failed}) == (
        "ensemble 'ens' depends on 'add' which has no loaded version. Model 'add' loading "
        "failed with error: version 1 is at UNAVAILABLE state: x;"
    )
    assert first_problem("ens", ONE_STEP, {"add": StepModelState(available=True)}) == (
        "ensemble 'ens' depends on 'add' which has no loaded version."
    )


def test_a_required_version_that_is_not_loaded() -> None:
    config = _ensemble(_step("add", v=2))
    assert first_problem("ens", config, {"add": _ready(_step_model())}) == (
        "ensemble 'ens' depends on 'add' whose required version 2 is not loaded."
    )
    assert first_problem("ens", config, {"add": _ready(_step_model(), (1, 2))}) == ""


def test_of_several_missing_versions_triton_names_the_last() -> None:
    config = _ensemble(
        _step("add", outputs='"OUT": "T"', v=3) + _step("add", inputs='"IN": "T"', v=2)
    )
    assert first_problem("ens", config, {"add": _ready(_step_model())}).endswith(
        "whose required version 3 is not loaded."
    )


def test_max_batch_size_of_a_step_below_the_ensembles() -> None:
    assert first_problem("ens", ONE_STEP, {"add": _ready(_step_model(mbs=4))}) == (
        "ensemble ens allows maximum batch size 8, but it contains model add which only "
        "allows maximum batch size to be 4"
    )


def test_unknown_input_and_output_keys() -> None:
    unknown_in = _ensemble(_step("add", inputs='"NOPE": "E_IN"'))
    assert first_problem("ens", unknown_in, {"add": _ready(_step_model())}) == (
        "in ensemble ens, ensemble tensor E_IN is mapping to non-existing input NOPE in model add"
    )
    unknown_out = _ensemble(_step("add", outputs='"OUTPUT": "E_OUT"'))
    assert first_problem("ens", unknown_out, {"add": _ready(_step_model())}) == (
        "in ensemble ens, ensemble tensor E_OUT is mapped from non-existing output OUTPUT in "
        "model add"
    )


def test_an_input_of_the_step_model_left_unmapped() -> None:
    two = _step_model(
        inputs='input { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } '
        'input { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }'
    )
    assert first_problem("ens", ONE_STEP, {"add": _ready(two)}) == (
        "in ensemble ens, input B in model add is not mapped to any ensemble tensors"
    )


def test_datatype_and_shape_mismatches() -> None:
    assert first_problem("ens", ONE_STEP, {"add": _ready(_step_model("TYPE_INT32"))}) == (
        "in ensemble ens, ensemble tensor E_IN: inconsistent data type: TYPE_FP32 is inferred "
        "from model ens while TYPE_INT32 is inferred from model add"
    )
    wide = _ensemble(_step("add"), in_dims="5")
    assert first_problem("ens", wide, {"add": _ready(_step_model())}) == (
        "in ensemble ens, ensemble tensor E_IN: inconsistent shape: [-1,5] is inferred from "
        "model ens while [-1,4] is inferred from model add"
    )


def test_mixed_decoupled_branches_name_the_tensors_first_model() -> None:
    config = _config(
        'name: "ens" platform: "ensemble" max_batch_size: 8 '
        'input { name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] } '
        'output { name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] } '
        "ensemble_scheduling { "
        + _step("dec", outputs='"OUT": "X"')
        + _step("add", outputs='"OUT": "Y"')
        + _step("both", inputs='"A": "X","B": "Y"')
        + " }"
    )
    both = _step_model(
        inputs='input { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } '
        'input { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }'
    )
    decoupled = _step_model(extra="model_transaction_policy { decoupled: true }")
    steps = {"dec": _ready(decoupled), "add": _ready(_step_model()), "both": _ready(both)}
    assert first_problem("ens", config, steps) == (
        "in ensemble ens, step of model 'ens' receives inputs originated from different "
        "decoupled models"
    )


def test_the_first_step_in_order_decides() -> None:
    config = _ensemble(
        _step("b", inputs='"NOPE": "E_IN"', outputs='"OUT": "T"') + _step("a", inputs='"IN": "T"')
    )
    steps = {"b": _ready(_step_model()), "a": _ready(_step_model(mbs=2))}
    assert "non-existing input NOPE in model b" in first_problem("ens", config, steps)


def test_validate_shows_the_hint_after_tritons_text() -> None:
    finding = Finding("rule", "Triton's text", "path", hint=" (repokit's advice)")
    assert finding.bind("m", "m/config.pbtxt").message == "Triton's text (repokit's advice)"
