"""line:column for every finding whose field appears in its config file (text, JSON, SARIF)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.config.positions import field_positions
from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from repokit.paths import sample_repos_dir
from tests.config.validate_helpers import make_model, python_config

PBTXT = """# a comment with input [ { name: "X" } ]
name: "m"  # trailing comment
backend: "python"
max_batch_size: 8
input [
  {
    name: "IN#0"
    data_type: TYPE_FP32
    dims: [ 4, -1 ]
  },
  { name: 'I\\'1' data_type: TYPE_FP32 dims: 1 dims: 2 }
]
input { name: "third" dims [3] }
parameters { key: "EXECUTION_ENV_PATH" value { string_value: "a" "b" } }
parameters: [ { key: "OTHER", value: { string_value: "c" } } ]
dynamic_batching < preferred_batch_size: [ 2, 4 ] priority_queue_policy { key: 1 value { } } >
"""


def _at(line: int, needle: str, occurrence: int = 1) -> tuple[int, int]:
    """(line, column) of the ``occurrence``-th ``needle`` on 1-based ``line`` of PBTXT."""
    text = PBTXT.splitlines()[line - 1]
    column = -1
    for _ in range(occurrence):
        column = text.index(needle, column + 1)
    return line, column + 1


def test_text_format_positions() -> None:
    found = field_positions(PBTXT)
    expected = {
        "name": (2, 1),
        "max_batch_size": (4, 1),
        "input": (5, 1),
        "input[0]": (6, 3),
        "input[0].name": (7, 5),
        "input[0].dims[1]": _at(9, "-1"),
        "input[1]": (11, 3),
        "input[1].dims[0]": _at(11, "1 dims"),
        "input[1].dims[1]": _at(11, "2 }"),
        "input[2]": _at(13, "{"),
        "input[2].dims[0]": _at(13, "3"),
        "parameters[EXECUTION_ENV_PATH]": _at(14, '"EXEC'),
        "parameters[EXECUTION_ENV_PATH].string_value": _at(14, "string_value"),
        "parameters[OTHER]": _at(15, '"OTHER'),
        "dynamic_batching.preferred_batch_size[1]": _at(16, "4"),
        "dynamic_batching.priority_queue_policy[1]": _at(16, "1 value"),
    }
    assert {path: found.find(path) for path in expected} == expected
    assert _at(11, "1 dims") == (11, 45) and _at(16, "1 value") == (16, 80)  # spot checks


def test_missing_paths_fall_back_to_the_enclosing_field_but_not_the_list() -> None:
    found = field_positions(PBTXT)
    assert found.find("input[0].reshape.shape[0]") == (6, 3)  # input[0]
    assert found.find("input[2].data_type") == (13, 7)
    assert found.find("input[3].name") is None  # not input[0], not input
    assert found.find("parameters[NOPE]") is None
    assert found.find('parameters["EXECUTION_ENV_PATH"]') == (14, 19)  # quoted keys
    assert found.find("output[0]") is None and found.find("sequence_batching") is None


def test_json_form_positions() -> None:
    text = (
        '{\n  "name": "m",\n  "maxBatchSize": 8,\n  "input": [\n'
        '    {"name": "X", "dims": [4, 0]}\n  ],\n'
        '  "parameters": {"KEY": {"string_value": "v"}}\n}\n'
    )
    found = field_positions(text, json_form=True)
    assert found.find("max_batch_size") == (3, 3)
    assert found.find("input[0]") == (5, 5)
    assert found.find("input[0].dims[1]") == (5, 31)
    assert found.find("parameters[KEY]") == (7, 18)
    assert found.find("parameters[KEY].string_value") == (7, 26)


def test_unparseable_structure_keeps_what_was_found() -> None:
    found = field_positions('name: "m"\n[ext.field]: 1\nmax_batch_size: 2\n')
    assert found.find("name") == (1, 1) and found.find("max_batch_size") is None


def _sample_cases() -> list[Path]:
    return sorted((sample_repos_dir() / "invalid").iterdir())


def test_every_sample_finding_whose_field_is_in_the_file_has_a_position() -> None:
    located = 0
    for case in _sample_cases():
        report = validate_repository(case, ValidateOptions())
        for diagnostic in report.all_diagnostics():
            if not diagnostic.path or not diagnostic.file.endswith(".pbtxt"):
                continue
            text = (case / diagnostic.file).read_text(errors="replace")
            top = re.match(r"[^.\[]+", diagnostic.path)
            assert top is not None
            if re.search(rf"(^|[\s{{]){top.group(0)}\s*[:{{\[<]", text, re.M):
                assert diagnostic.line > 0 and diagnostic.column > 0, (case.name, diagnostic)
                located += 1
    assert located > 50


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(), list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.output


@pytest.fixture
def bad_dims(tmp_path: Path) -> Path:
    config = python_config("").replace("dims: [ 4 ]", "dims: [ 4, 0 ]", 1)
    assert "dims: [ 4, 0 ]" in config
    make_model(tmp_path, "m", config=config)
    return tmp_path


def _dims_position(repo: Path) -> tuple[int, int]:
    lines = (repo / "m" / "config.pbtxt").read_text().splitlines()
    [(line, text)] = [(n, t) for n, t in enumerate(lines, 1) if "dims: [ 4, 0 ]" in t]
    return line, text.index("0 ]") + 1


def test_text_output_shows_file_line_column(bad_dims: Path) -> None:
    line, column = _dims_position(bad_dims)
    code, output = _invoke("validate", str(bad_dims))
    assert code == 1
    assert f"m/config.pbtxt:{line}:{column} input[0].dims[1]" in output


def test_json_and_sarif_carry_the_position(bad_dims: Path) -> None:
    line, column = _dims_position(bad_dims)
    code, output = _invoke("validate", str(bad_dims), "--format", "json")
    assert code == 1
    [finding] = json.loads(output)["models"]["m"]["diagnostics"]
    assert (finding["line"], finding["column"]) == (line, column)
    code, output = _invoke("lint", str(bad_dims), "--format", "sarif")
    assert code == 1
    results = json.loads(output)["runs"][0]["results"]
    [result] = [r for r in results if r["ruleId"] == "input-dims-invalid"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": line, "startColumn": column}
