"""The JSON Schema generated from the descriptors, and validation of configs given as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from jsonschema import Draft202012Validator

from repokit.config.json_schema import (
    SCHEMA_FILE,
    ConfigJsonValidator,
    load_config_json,
    model_config_schema,
    validate_config_json,
    write_schemas,
)
from repokit.config.parse import parse_file
from repokit.paths import sample_repos_dir, schemas_dir

SAMPLE_CONFIGS = sorted((sample_repos_dir() / "models").glob("*/config.pbtxt"))


def test_committed_schema_matches_the_descriptors() -> None:
    committed = json.loads((schemas_dir() / SCHEMA_FILE).read_text())
    assert committed == model_config_schema(), "schema drifted: run `nox -s generate`"


def test_write_schemas_writes_the_generated_schema(tmp_path: Path) -> None:
    (path,) = write_schemas(tmp_path)
    assert path == tmp_path / SCHEMA_FILE
    assert json.loads(path.read_text()) == model_config_schema()


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = model_config_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert "inference.ModelInput" in schema["$defs"]
    # both the proto name and the JSON name of a field
    assert {"max_batch_size", "maxBatchSize"} <= set(schema["properties"])


@pytest.mark.parametrize("path", SAMPLE_CONFIGS, ids=lambda p: str(p.parent.name))
@pytest.mark.parametrize("proto_names", [True, False], ids=["proto_names", "json_names"])
def test_sample_configs_as_json_pass(path: Path, proto_names: bool) -> None:
    config = parse_file(path)
    data = json_format.MessageToDict(config, preserving_proto_field_name=proto_names)
    text = json.dumps(data)
    assert validate_config_json(text) == []
    parsed, findings = load_config_json(text)
    assert findings == []
    assert parsed == config


def test_sample_configs_exist() -> None:
    assert len(SAMPLE_CONFIGS) >= 5


def test_enum_names_in_any_case_and_numbers_pass() -> None:
    text = json.dumps(
        {
            "name": "m",
            "backend": "python",
            "max_batch_size": "8",
            "input": [{"name": "A", "data_type": "type_fp32", "dims": ["4", -1]}],
            "output": [{"name": "B", "data_type": 11, "dims": [4]}],
            "instance_group": [{"kind": "Kind_Cpu", "count": 2}],
            "dynamic_batching": {"priority_levels": 2, "priority_queue_policy": {"1": {}}},
            "parameters": {"k": {"string_value": "v"}},
        }
    )
    assert validate_config_json(text) == []
    parsed, _ = load_config_json(text)
    assert parsed is not None and parsed.input[0].data_type == parsed.output[0].data_type


def _single(text: str) -> tuple[str, str, str]:
    findings = validate_config_json(text, model="m", file="m.json")
    assert len(findings) == 1, findings
    (finding,) = findings
    assert (finding.model, finding.file, finding.severity.value) == ("m", "m.json", "error")
    return finding.rule, finding.path, finding.message


def test_unknown_field_names_the_field() -> None:
    rule, path, message = _single('{"name": "m", "input": [{"name": "A", "dimz": [4]}]}')
    assert (rule, path) == ("config-json-schema", "input[0].dimz")
    assert "'dimz' was unexpected" in message and "dims" in message


def test_wrong_enum_lists_the_allowed_names() -> None:
    rule, path, message = _single('{"input": [{"name": "A", "data_type": "TYPE_FLOAT"}]}')
    assert (rule, path) == ("config-json-schema", "input[0].data_type")
    assert "'TYPE_FLOAT' is not a inference.DataType value" in message
    assert "TYPE_FP32" in message


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"max_batch_size": "eight"}, "max_batch_size"),
        ({"max_batch_size": 2**31}, "max_batch_size"),
        ({"input": [{"dims": [1.5]}]}, "input[0].dims[0]"),
        ({"input": {"name": "A"}}, "input"),
        ({"input": [{"optional": "yes"}]}, "input[0].optional"),
        ({"name": 7}, "name"),
        (
            {"dynamic_batching": {"priority_queue_policy": {"high": {}}}},
            "dynamic_batching.priority_queue_policy",
        ),
        ({"parameters": {"k": "v"}}, "parameters.k"),
        (
            {"version_policy": {"specific": {"versions": [-1, "x"]}}},
            "version_policy.specific.versions[1]",
        ),
    ],
)
def test_wrong_types_fail_with_their_path(config: dict[str, object], path: str) -> None:
    rule, found_path, _ = _single(json.dumps(config))
    assert (rule, found_path) == ("config-json-schema", path)


def test_oneof_members_are_exclusive() -> None:
    rule, path, message = _single('{"version_policy": {"latest": {}, "all": {}}}')
    assert rule == "config-json-schema"
    assert path == "version_policy.latest"
    assert "'all' and 'latest' cannot be given together" in message


def test_one_field_under_both_names_is_rejected() -> None:
    rule, _, message = _single('{"max_batch_size": 1, "maxBatchSize": 2}')
    assert rule == "config-json-schema"
    assert "'maxBatchSize' and 'max_batch_size'" in message


def test_invalid_json_reports_line_and_column() -> None:
    (finding,) = validate_config_json('{\n  "name": "m",\n  "input": [\n}')
    assert finding.rule == "config-json-syntax"
    assert (finding.line, finding.column) == (4, 1)


def test_not_an_object() -> None:
    rule, path, message = _single("[1, 2]")
    assert (rule, path) == ("config-json-schema", "")
    assert "is not of type 'object'" in message


def test_validator_is_reusable() -> None:
    validator = ConfigJsonValidator()
    assert validator.check('{"name": "a"}') == []
    assert [d.rule for d in validator.check('{"nam": "a"}')] == ["config-json-schema"]
    assert validator.check('{"name": "b"}') == []
