""" "Did you mean" for unknown fields, misspelled enum values and unknown names in ensembles."""

from __future__ import annotations

import json
from pathlib import Path

from repokit.config.json_schema import validate_config_json
from repokit.config.parse import ConfigParseError, parse_json, parse_text
from repokit.config.report import ValidateOptions
from repokit.config.suggest import closest, did_you_mean
from repokit.config.validate import validate_repository
from tests.config.ensemble_helpers import ensemble_config, python_config, step, write_model


def test_closest_prefers_case_then_similarity_and_gives_up_on_strangers() -> None:
    assert closest("input1", ["INPUT1", "input_1"]) == "INPUT1"
    assert closest("max_batch_szie", ["max_batch_size", "name"]) == "max_batch_size"
    assert closest("zzz", ["max_batch_size", "name"]) is None
    assert did_you_mean("TYPE_FP3", ["TYPE_FP32", "TYPE_FP16"]) == " (did you mean 'TYPE_FP32'?)"
    assert did_you_mean("same", ["same"]) == ""


def _text_error(text: str) -> str:
    try:
        parse_text(text)
    except ConfigParseError as exc:
        return exc.message
    raise AssertionError("parsed")


def test_text_format_unknown_fields_at_any_depth() -> None:
    assert _text_error("max_batch_szie: 1").endswith('(did you mean "max_batch_size"?)')
    message = _text_error("dynamic_batching { preferred_batch: 1 }")
    assert 'has no field named "preferred_batch"' in message
    assert message.endswith('(did you mean "preferred_batch_size"?)')
    assert "did you mean" not in _text_error("completely_unrelated_thing: 1")


def test_text_format_misspelled_enum_values() -> None:
    message = _text_error('input [ { name: "I" data_type: TYPE_FP3 dims: [ 1 ] } ]')
    assert message.endswith("(did you mean 'TYPE_FP32'?)")
    message = _text_error("instance_group [ { kind: KIND_GUP } ]")
    assert message.endswith("(did you mean 'KIND_GPU'?)")


def test_json_form_unknown_fields_and_enum_values() -> None:
    findings = validate_config_json(
        json.dumps(
            {
                "max_batch_szie": 1,
                "input": [{"name": "I", "data_type": "TYPE_FP3", "dims": [1]}],
            }
        )
    )
    messages = {d.path: d.message for d in findings}
    assert "(did you mean 'max_batch_size'?)" in messages["max_batch_szie"]
    assert "(did you mean 'TYPE_FP32'?)" in messages["input[0].data_type"]
    try:  # protobuf's own JSON parser (behind the schema) suggests too
        parse_json('{"input": [{"format": "FORMAT_NCWH"}]}')
    except ConfigParseError as exc:
        assert exc.message.endswith("(did you mean 'FORMAT_NCHW'?)")
    else:
        raise AssertionError("parsed")


def _messages(root: Path, model: str) -> dict[str, str]:
    report = validate_repository(root, ValidateOptions())
    return {d.rule: d.message for d in report.models[model].diagnostics}


def test_ensemble_unknown_input_and_output_names(tmp_path: Path) -> None:
    write_model(tmp_path, "add", python_config("add"))
    steps = step("add", {"INN": "E_IN"}, {"OUTT": "E_OUT"})
    write_model(tmp_path, "ens", ensemble_config("ens", steps))
    messages = _messages(tmp_path, "ens")
    assert (
        "non-existing input INN in model add (did you mean 'IN'?)"
        in (messages["ensemble-step-unknown-input"])
    )
    assert (
        "non-existing output OUTT in model add (did you mean 'OUT'?)"
        in (messages["ensemble-step-unknown-output"])
    )


def test_ensemble_unknown_model_and_tensor_names(tmp_path: Path) -> None:
    write_model(tmp_path, "add_sub", python_config("add_sub"))
    write_model(tmp_path, "ens", ensemble_config("ens", step("addsub", {"IN": "E_IN"}, {})))
    message = _messages(tmp_path, "ens")["ensemble-step-model-missing"]
    assert "did you mean 'add_sub' for 'addsub'?" in message

    other = tmp_path / "other"
    write_model(other, "add", python_config("add"))
    write_model(
        other, "ens", ensemble_config("ens", step("add", {"IN": "E_INN"}, {"OUT": "E_OUT"}))
    )
    messages = _messages(other, "ens")
    assert messages["ensemble-input-unused"].endswith(
        "(a step reads 'E_INN': did you mean 'E_IN' there?)"
    )
    assert (
        "'E_INN', is not connected (did you mean 'E_IN'?)"
        in (messages["ensemble-output-not-written"])
    )


def test_ensemble_tensor_read_but_never_written(tmp_path: Path) -> None:
    write_model(tmp_path, "add", python_config("add"))
    steps = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}) + step(
        "add", {"IN": "E_INN"}, {"OUT": "Y"}
    )
    write_model(tmp_path, "ens", ensemble_config("ens", steps))
    unused = [
        d.message
        for d in validate_repository(tmp_path, ValidateOptions()).models["ens"].diagnostics
        if d.rule == "ensemble-tensor-unused" and "'E_INN'" in d.message
    ]
    assert unused == [
        "ensemble tensor 'E_INN' is unused in ensemble 'ens': it is consumed but never produced "
        "from the ensemble inputs (did you mean 'E_IN'?)"
    ]
