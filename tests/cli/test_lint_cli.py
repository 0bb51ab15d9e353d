"""``repokit lint``: exit codes, formats, usage errors, through the real typer app."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from repokit.cli.lint import FailOn, exit_code
from repokit.cli.main import make_app
from repokit.cli.render import render_text
from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.lint import LINT_RULES
from repokit.config.report import ModelReport, RepositoryReport
from tests.config.ensemble_helpers import ensemble_config, python_config, step, write_model

RUNNER = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = RUNNER.invoke(make_app(), ["lint", *args])
    return result.exit_code, result.output


def advice_repo(root: Path) -> Path:
    """A valid repository whose only finding is advice: batching without dynamic_batching."""
    write_model(root, "plain", python_config("plain"))
    return root


def test_missing_repository_is_a_usage_error(tmp_path: Path) -> None:
    code, output = run(str(tmp_path / "nope"))
    assert code == 2
    assert "does not exist" in output


def test_file_instead_of_repository_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    code, output = run(str(tmp_path / "f"))
    assert code == 2
    assert "is not a directory" in output


def test_unknown_fail_on_value_is_a_usage_error(tmp_path: Path) -> None:
    code, _ = run(str(tmp_path), "--fail-on", "sometimes")
    assert code == 2


def test_advice_does_not_fail_by_default(tmp_path: Path) -> None:
    code, output = run(str(advice_repo(tmp_path)), "--cores", "4")
    assert code == 0
    assert "lint-no-dynamic-batching" in output
    assert "1 model checked, 0 would fail to load: 0 errors, 1 warning" in output


def test_fail_on_warning(tmp_path: Path) -> None:
    code, _ = run(str(advice_repo(tmp_path)), "--fail-on", "warning", "--cores", "4")
    assert code == 1


def test_json_format(tmp_path: Path) -> None:
    code, output = run(str(advice_repo(tmp_path)), "--format", "json", "--cores", "4")
    assert code == 0
    data = json.loads(output)
    rules = [d["rule"] for d in data["models"]["plain"]["diagnostics"]]
    assert rules == ["lint-no-dynamic-batching"]
    assert data["errors"] == 0


def test_sarif_format(tmp_path: Path) -> None:
    code, output = run(str(advice_repo(tmp_path)), "--format", "sarif", "--cores", "4")
    assert code == 0
    sarif = json.loads(output)
    assert sarif["version"] == "2.1.0"
    (result,) = sarif["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("lint-no-dynamic-batching", "warning")
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "plain/config.pbtxt"
    )


def test_errors_fail_unless_never(tmp_path: Path) -> None:
    write_model(tmp_path, "add", python_config("add", extra="dynamic_batching { }"))
    bad_step = step("add", {"IN": "E_IN"}, {"OUT": "E_OUT"}, version=3)
    write_model(tmp_path, "ens", ensemble_config("ens", bad_step))
    code, output = run(str(tmp_path), "--cores", "4")
    assert code == 1
    assert "ensemble-step-version-not-loaded" in output
    assert run(str(tmp_path), "--fail-on", "never")[0] == 0


def _report(*severities: Severity) -> RepositoryReport:
    report = RepositoryReport(root=Path("/r"))
    model = ModelReport("m", Path("/r/m"), None, None)
    model.diagnostics = [Diagnostic(f"rule-{s.value}", s, "m", "msg") for s in severities]
    report.models["m"] = model
    return report


def test_exit_code_levels() -> None:
    assert exit_code(_report(Severity.INFO), FailOn.warning) == 0
    assert exit_code(_report(Severity.WARNING), FailOn.error) == 0
    assert exit_code(_report(Severity.WARNING), FailOn.warning) == 1
    assert exit_code(_report(Severity.ERROR), FailOn.error) == 1
    assert exit_code(_report(Severity.ERROR), FailOn.never) == 0


def test_text_is_quiet_for_a_clean_repository() -> None:
    console = Console(record=True, width=200)
    render_text(_report(), console)
    assert console.export_text().strip() == (
        "1 model checked, 0 would fail to load: 0 errors, 0 warnings"
    )


def test_every_lint_rule_has_a_summary() -> None:
    from repokit.config.lint import RULES

    assert len(LINT_RULES) >= len(RULES)
    assert all(rule.startswith("lint-") for rule in LINT_RULES)


def test_lint_knows_the_server_as_validate_does(tmp_path: Path) -> None:
    from tests.config.validate_helpers import make_model
    from tests.config.validate_helpers import python_config as config_with

    make_model(tmp_path, config=config_with("instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]"))

    def lint(*flags: str) -> tuple[int, str]:
        result = RUNNER.invoke(make_app(), ["lint", str(tmp_path), "--format", "json", *flags])
        return result.exit_code, result.output

    assert lint()[0] == 1  # a CPU server by default: KIND_GPU cannot load
    assert lint("--target", "gpu")[0] == 0
    code, output = lint("--target", "gpu", "--gpus", "2")
    assert code == 1 and "invalid or unsupported gpu id 3" in output
