"""Lint advice on instance_group.rate_limiter (what Triton 2.51 loads but ignores or
misreads, and the conflict that fails a load once --rate-limit execution_count is on)."""

from __future__ import annotations

from pathlib import Path

from repokit.config.diagnostics import Severity
from repokit.config.lint import LINT_RULES, LintOptions, lint_report
from repokit.config.report import RepositoryReport
from repokit.config.rule_docs import rule_docs
from tests.config.ensemble_helpers import manual_report, python_config

DYNAMIC = "dynamic_batching { max_queue_delay_microseconds: 100 }"


def _config(name: str, limiter: str) -> str:
    return python_config(
        name, extra=f"{DYNAMIC}\ninstance_group [ {{ kind: KIND_CPU count: 1 {limiter} }} ]"
    )


def lint(root: Path, models: dict[str, str | None]) -> RepositoryReport:
    report = manual_report(root, models, None)
    lint_report(report, LintOptions(cores=4))
    return report


def findings(report: RepositoryReport, model: str) -> dict[str, tuple[Severity, str, str]]:
    return {
        d.rule: (d.severity, d.message, d.path)
        for d in report.models[model].diagnostics
        if d.rule.startswith("lint-rate-limiter")
    }


def test_a_plain_rate_limiter_only_reminds_of_the_server_flag(tmp_path: Path) -> None:
    report = lint(
        tmp_path,
        {"m": _config("m", 'rate_limiter { resources [ { name: "R" count: 2 } ] priority: 1 }')},
    )
    found = findings(report, "m")
    assert list(found) == ["lint-rate-limiter-server-flag"]
    severity, message, _ = found["lint-rate-limiter-server-flag"]
    assert severity is Severity.INFO and "--rate-limit execution_count" in message
    # without rate_limiter there is nothing to say
    assert findings(lint(tmp_path / "b", {"m": _config("m", "")}), "m") == {}


def test_fields_triton_loads_but_that_do_not_limit(tmp_path: Path) -> None:
    limiter = (
        'rate_limiter { resources [ { name: "R" count: 1 }, { name: "R" count: 2 }, '
        '{ name: "Z" count: 0 }, { name: "" count: 1 } ] }'
    )
    found = findings(lint(tmp_path, {"m": _config("m", limiter)}), "m")
    severity, message, path = found["lint-rate-limiter-duplicate-resource"]
    assert severity is Severity.WARNING
    assert message == (
        "resource 'R' is listed twice in instance_group[0]; Triton loads it and counts only the "
        "last entry"
    )
    assert path == "instance_group[0].rate_limiter.resources[1].name"
    assert found["lint-rate-limiter-zero-count"][2].endswith("resources[2].count")
    assert "count 0" in found["lint-rate-limiter-zero-count"][1]
    assert found["lint-rate-limiter-empty-name"][2].endswith("resources[3].name")


def test_a_priority_without_resources(tmp_path: Path) -> None:
    found = findings(lint(tmp_path, {"m": _config("m", "rate_limiter { priority: 2 }")}), "m")
    assert list(found) == ["lint-rate-limiter-priority-only"]
    assert "never limited" in found["lint-rate-limiter-priority-only"][1]


def test_a_resource_both_global_and_per_device(tmp_path: Path) -> None:
    report = lint(
        tmp_path,
        {
            "a": _config("a", 'rate_limiter { resources [ { name: "R" global: true count: 1 } ] }'),
            "b": _config("b", 'rate_limiter { resources [ { name: "R" count: 1 } ] }'),
            "c": _config("c", 'rate_limiter { resources [ { name: "Q" count: 1 } ] }'),
        },
    )
    severity, message, _ = findings(report, "a")["lint-rate-limiter-global-conflict"]
    assert severity is Severity.WARNING
    assert "(model 'b')" in message
    assert 'Resource "R" is present as both global and device-specific resource' in message
    assert "(model 'a')" in findings(report, "b")["lint-rate-limiter-global-conflict"][1]
    assert "lint-rate-limiter-global-conflict" not in findings(report, "c")
    # within one model, across its groups
    two_groups = python_config(
        "m",
        extra=f"{DYNAMIC}\ninstance_group [ "
        '{ count: 1 rate_limiter { resources [ { name: "R" global: true count: 1 } ] } }, '
        '{ count: 1 rate_limiter { resources [ { name: "R" count: 1 } ] } } ]',
    )
    found = findings(lint(tmp_path / "one", {"m": two_groups}), "m")
    assert "(this model)" in found["lint-rate-limiter-global-conflict"][1]


def test_every_rate_limiter_rule_is_listed_and_documented() -> None:
    rules = [r for r in LINT_RULES if r.startswith("lint-rate-limiter")]
    assert len(rules) == 6
    docs = rule_docs()
    assert all(docs[r].help_uri.endswith("#rate-limiter-configuration") for r in rules)
