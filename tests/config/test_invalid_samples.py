"""Every sample_repos/invalid case yields exactly its expected rule; the valid samples are clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repokit.config.report import ValidateOptions
from repokit.config.rules.catalog import RULES
from repokit.config.validate import validate_repository
from repokit.paths import default_sample_repository, sample_repos_dir

CASES = sorted(p for p in (sample_repos_dir() / "invalid").iterdir() if p.is_dir())
OWN_CASES = [p for p in CASES if json.loads((p / "expected.json").read_text())["rule"] in RULES]


@pytest.mark.parametrize("case", OWN_CASES, ids=[p.name for p in OWN_CASES])
def test_invalid_case_yields_exactly_its_rule(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    report = validate_repository(case, ValidateOptions())
    model = report.models[expected["model"]]
    found = [d.rule for d in model.diagnostics]
    assert expected["rule"] in found
    errors = [d.rule for d in report.all_diagnostics() if d.is_error]
    assert all(rule == expected["rule"] for rule in errors), errors
    assert model.ok is (RULES[expected["rule"]].severity.value != "error")


def test_there_are_many_cases() -> None:
    assert len(OWN_CASES) >= 50


def test_sample_repository_validates_clean() -> None:
    report = validate_repository(default_sample_repository(), ValidateOptions())
    assert report.models
    assert report.error_count == 0, [d.to_dict() for d in report.all_diagnostics()]
