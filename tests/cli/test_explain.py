"""`repokit explain`, and rule descriptions and help in SARIF."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.config.lint import lint_repository
from repokit.config.report import ValidateOptions
from repokit.config.rule_docs import rule_docs
from repokit.paths import sample_repos_dir
from tests.config.validate_helpers import make_model, python_config

PIPED = {"COLUMNS": "80", "TTY_COMPATIBLE": None, "FORCE_COLOR": None}
TERMINAL = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "FORCE_COLOR": None, "TERM": "xterm"}


def _invoke(*args: str, env: dict[str, str | None] = PIPED) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(), list(args), env=env)
    return result.exit_code, result.output


def test_explain_a_rule_with_its_worked_example() -> None:
    code, output = _invoke("explain", "input-dims-invalid")
    assert code == 0 and "\x1b" not in output
    lines = output.splitlines()
    assert lines[0] == "input-dims-invalid (error)"
    assert lines[1].startswith("Dims must be >= 1 or -1. Severity error: Triton refuses")
    assert lines[2].startswith("Documentation: https://") and "#inputs-and-outputs" in lines[2]
    assert "Example (input-dims-invalid/config.pbtxt):" in lines
    assert '  input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4, 0 ] } ]' in lines
    said = lines[lines.index("repokit validate says:") + 1]
    assert re.match(r"  input-dims-invalid/config\.pbtxt:\d+:\d+ model input 'IN' dimension", said)


def test_explain_a_rule_without_an_example() -> None:
    code, output = _invoke("explain", "onnx-input-dims-mismatch")
    assert code == 0
    assert output.splitlines()[0] == "onnx-input-dims-mismatch (error)"
    assert "reads the file unless --no-deep" in output and "Example" not in output


def test_explain_an_unknown_rule_suggests_one() -> None:
    code, output = _invoke("explain", "input-dims-invalidd")
    assert code == 2
    assert output == (
        "error: no rule 'input-dims-invalidd' (did you mean 'input-dims-invalid'?); "
        "`repokit explain` lists every rule\n"
    )


def test_explain_lists_every_rule_as_plain_rows() -> None:
    code, output = _invoke("explain")
    assert code == 0
    lines = output.splitlines()
    assert lines[0].split() == ["rule", "severity", "summary"]
    ids = [line.split()[0] for line in lines[1:]]
    assert ids == sorted(rule_docs())
    for family in ("lint-", "onnx-", "tensorflow-", "config-json-", "ensemble-", "input-"):
        assert any(i.startswith(family) for i in ids), family


def test_explain_on_a_terminal_is_styled() -> None:
    code, output = _invoke("explain", "input-dims-invalid", env=TERMINAL)
    assert code == 0 and "\x1b[" in output
    assert "input-dims-invalid" in re.sub(r"\x1b\[[0-9;]*m", "", output)


def test_every_rule_the_samples_raise_is_documented() -> None:
    docs = rule_docs()
    seen: set[str] = set()
    for case in sorted((sample_repos_dir() / "invalid").iterdir()):
        report = lint_repository(case, ValidateOptions(deep=True))
        seen |= {d.rule for d in report.all_diagnostics()}
    assert len(seen) > 80
    assert sorted(seen - set(docs)) == []
    for doc in docs.values():
        assert doc.help_uri.startswith("https://") and doc.summary and doc.description


def test_sarif_rules_carry_descriptions_help_and_help_uris(tmp_path: Path) -> None:
    make_model(tmp_path, "bad", config=python_config("max_batch_size: -1"))
    for command in ("validate", "lint"):
        code, output = _invoke(command, str(tmp_path), "--format", "sarif")
        assert code == 1
        run = json.loads(output)["runs"][0]
        rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
        assert set(rule_docs()) <= set(rules)
        [result] = [r for r in run["results"] if r["ruleId"] == "max-batch-size-negative"]
        rule = rules[result["ruleId"]]
        assert rule["shortDescription"]["text"] == "max_batch_size must be >= 0"
        assert rule["fullDescription"]["text"].startswith(
            "max_batch_size must be >= 0. Severity error: Triton refuses to load the model."
        )
        assert rule["helpUri"].endswith("model_configuration.md#maximum-batch-size")
        assert "repokit explain max-batch-size-negative" in rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] == "error"
        assert run["tool"]["driver"]["version"]
