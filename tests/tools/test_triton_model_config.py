"""tools/triton_model_config.py: how it reads test.sh's expected texts and lays out a case (the
run against Triton's own cases needs its sources: see the tool's docstring)."""

from __future__ import annotations

from pathlib import Path

from tools.triton_model_config import matches, run_case


def test_expected_texts_are_basic_regular_expressions() -> None:
    errors = ["m: default priority level must be in range [1, 3] for m (got 0)"]
    assert matches(r"default priority level must be in range \[1, 3\] for m", errors)
    assert matches("priority level must be .* for m (got 0)", errors)  # ( ) are literal in BRE
    assert not matches(r"must be in range \[1, 4\]", errors)


def test_a_case_gets_the_trial_platform_and_fails_without_the_expected_error(
    tmp_path: Path,
) -> None:
    case = tmp_path / "cases" / "negative_batch"
    case.mkdir(parents=True)
    (case / "config.pbtxt").write_text('platform: "x"\nmax_batch_size: -1\n')
    (case / "expected").write_text("'max_batch_size' must be non-negative value for negative_batch")
    passed = run_case("c", case, tmp_path / "work", strict=True, platform="onnxruntime_onnx")
    assert passed.result == "PASS", passed.errors
    config = (tmp_path / "work" / "models" / "negative_batch" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config and 'platform: "x"' not in config
    (case / "expected").write_text("an error repokit does not give")
    failed = run_case("c", case, tmp_path / "work", strict=True, platform="onnxruntime_onnx")
    assert failed.result == "FAIL" and failed.errors
