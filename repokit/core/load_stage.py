"""Which load errors Triton 2.51 finds only when it loads a version, and with which status.

Triton reads and checks a model's config when it polls the repository; a config it cannot
take there fails the load as ``failed to load 'm', failed to poll from model repository``.
The checks below run later, when the backend creates the version (its inputs and outputs,
batch inputs and outputs, states, label and warmup files, the python model itself): the
load fails with ``load failed for model 'm': version 1 is at UNAVAILABLE state: <status>:
<reason>;`` (400), and the repository index shows that version UNAVAILABLE with
``<status>: <reason>``. Measured by loading each case of ``sample_repos/invalid`` into
Triton 2.51 through the load API.
"""

from __future__ import annotations

INVALID_ARGUMENT = "Invalid argument"
INTERNAL = "Internal"
NOT_FOUND = "Not found"

_VERSION_STAGE: dict[str, str] = {
    **dict.fromkeys(
        (
            "batch-input-data-type",
            "batch-input-source-count",
            "batch-io-unknown-source",
            "batch-output-source-count",
            "batch-output-target-duplicated",
            "batch-output-unknown-target",
            "batch-strategy-with-sequence",
            "config-not-autocompleted",
            "response-cache-decoupled-step",
            "initial-state-count",
            "initial-state-data-missing",
            "initial-state-dims-mismatch",
            "initial-state-dims-rank",
            "initial-state-dims-variable",
            "initial-state-file-too-small",
            "initial-state-name-missing",
            "input-data-type-missing",
            "input-dims-invalid",
            "input-dims-missing",
            "input-format-dims",
            "input-name-missing",
            "input-non-linear-io-platform",
            "input-reshape-dims-invalid",
            "input-reshape-empty",
            "input-reshape-size-mismatch",
            "input-shape-tensor-platform",
            "output-data-type-missing",
            "output-dims-invalid",
            "output-dims-missing",
            "output-name-missing",
            "output-non-linear-io-platform",
            "output-reshape-dims-invalid",
            "output-reshape-empty",
            "output-reshape-size-mismatch",
            "output-shape-tensor-platform",
            "state-input-duplicated",
            "warmup-data-missing",
            "warmup-batch-size-too-large",
            "warmup-data-type-mismatch",
            "warmup-dims-variable",
            "warmup-file-too-small",
            "warmup-input-missing",
            "warmup-shape-mismatch",
            "warmup-string-data-invalid",
        ),
        INVALID_ARGUMENT,
    ),
    "batch-strategy-path-missing": NOT_FOUND,
    **dict.fromkeys(
        (
            "initial-state-file-missing",
            "label-file-missing",
            "label-file-outside-model-dir",
            "model-file-wrong-kind",
            "python-execution-env-missing",
            "python-model-class-missing",
            "python-model-filename-invalid",
            "python-model-syntax-error",
            "warmup-file-missing",
        ),
        INTERNAL,
    ),
}


def version_stage_status(rule: str) -> str | None:
    """Triton's status text for a rule it checks when it loads a version (None: it checks
    the rule when it polls the repository)."""
    if rule.startswith("instance-group-"):  # found when the instances are created
        return INVALID_ARGUMENT
    return _VERSION_STAGE.get(rule)
