"""What each rule means: one place that knows every rule id validate and lint can report.

Used by SARIF output (each rule's description, help text and help URI) and by
``repokit explain RULE``, which adds a worked example when ``sample_repos/invalid/<rule>/``
holds one: the config that breaks the rule and what repokit says about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repokit.config.ensemble_rules import ENSEMBLE_RULES
from repokit.config.lint import LINT_RULES
from repokit.config.rules.catalog import ADVISORY, BACKEND, IO, REPOSITORY, RULES

DOCS = "https://github.com/triton-inference-server/server/blob/v2.51.0/docs/"
CONFIG_DOC = DOCS + "user_guide/model_configuration.md"
REPOSITORY_DOC = DOCS + "user_guide/model_repository.md"
ARCHITECTURE_DOC = DOCS + "user_guide/architecture.md"
PYTHON_DOC = "https://github.com/triton-inference-server/python_backend/blob/r24.10/README.md"
MODEL_FILE, JSON_FORM, LINT = "model-file", "json", "lint"

_STAGES = {
    REPOSITORY: "Triton checks this while it reads the repository, before any backend is loaded.",
    BACKEND: "Triton checks this when the model's backend loads it.",
    IO: "Triton checks this while reading the repository with --disable-auto-complete-config "
    "(repokit --strict), otherwise when the backend loads the model.",
    ADVISORY: "Triton loads the model; this points at something that is likely not meant.",
    MODEL_FILE: "The backend checks this when it loads the model file (repokit reads the file "
    "unless --no-deep).",
    JSON_FORM: "Triton checks this when a config is given as JSON (the load API's 'config' "
    "parameter).",
    LINT: "Advice from repokit lint: Triton loads the model, but it may run worse than it could.",
}
_LEVELS = {
    "error": "error: Triton refuses to load the model.",
    "warning": "warning: Triton loads the model, but something is likely wrong.",
    "info": "info: a note, nothing is wrong.",
    "advice": "warning or info, depending on the finding.",
}
# rule id prefix -> documentation page (first match wins)
_HELP_PAGES: tuple[tuple[str, str], ...] = (
    ("max-batch-size", CONFIG_DOC + "#maximum-batch-size"),
    ("input-reshape", CONFIG_DOC + "#reshape"),
    ("output-reshape", CONFIG_DOC + "#reshape"),
    ("input-shape-tensor", CONFIG_DOC + "#shape-tensors"),
    ("output-shape-tensor", CONFIG_DOC + "#shape-tensors"),
    ("input-non-linear", CONFIG_DOC + "#non-linear-io-formats"),
    ("output-non-linear", CONFIG_DOC + "#non-linear-io-formats"),
    ("input-", CONFIG_DOC + "#inputs-and-outputs"),
    ("output-", CONFIG_DOC + "#inputs-and-outputs"),
    ("version-policy", CONFIG_DOC + "#version-policy"),
    ("version-", REPOSITORY_DOC + "#model-versions"),
    ("no-version", CONFIG_DOC + "#version-policy"),
    ("model-file", REPOSITORY_DOC + "#model-files"),
    ("model-dir", REPOSITORY_DOC + "#repository-layout"),
    ("model-not-found", REPOSITORY_DOC + "#repository-layout"),
    ("instance-group", CONFIG_DOC + "#instance-groups"),
    ("dynamic-batching", CONFIG_DOC + "#dynamic-batcher"),
    ("batch-strategy", CONFIG_DOC + "#custom-batching"),
    ("sequence-", CONFIG_DOC + "#sequence-batcher"),
    ("state-", ARCHITECTURE_DOC + "#implicit-state-management"),
    ("initial-state", ARCHITECTURE_DOC + "#state-initialization"),
    ("ensemble-", ARCHITECTURE_DOC + "#ensemble-models"),
    ("warmup-", CONFIG_DOC + "#model-warmup"),
    ("response-cache", CONFIG_DOC + "#response-cache"),
    ("python-", PYTHON_DOC),
    ("onnx-", REPOSITORY_DOC + "#onnx-models"),
    ("tensorflow-", REPOSITORY_DOC + "#model-files"),
    ("lint-no-dynamic-batching", CONFIG_DOC + "#dynamic-batcher"),
    ("lint-preferred", CONFIG_DOC + "#preferred-batch-sizes"),
    ("lint-cpu-instances", CONFIG_DOC + "#cpu-model-instance"),
    ("lint-tensorrt", DOCS + "user_guide/optimization.md"),
    ("lint-ensemble", ARCHITECTURE_DOC + "#ensemble-models"),
    ("lint-response-cache", CONFIG_DOC + "#response-cache"),
    ("lint-rate-limiter", CONFIG_DOC + "#rate-limiter-configuration"),
    ("lint-", DOCS + "user_guide/optimization.md"),
    ("config-", CONFIG_DOC),
    ("", CONFIG_DOC + "#name-platform-and-backend"),
)

# rules of the model-file checks (repokit.config.deep); {kind} is onnx or tensorflow
_MODEL_FILE_RULES = {
    "{kind}-model-unreadable": "the model file cannot be read as {format}",
    "{kind}-input-unknown": "a config input is not an input of the model file",
    "{kind}-output-unknown": "a config output is not an output of the model file",
    "{kind}-input-data-type-mismatch": "a config input's data_type differs from the model's",
    "{kind}-output-data-type-mismatch": "a config output's data_type differs from the model's",
    "{kind}-input-dims-mismatch": "a config input's dims differ from the model's shape",
    "{kind}-output-dims-mismatch": "a config output's dims differ from the model's shape",
    "{kind}-input-rank-mismatch": "a config input has another rank than the model's",
    "{kind}-output-rank-mismatch": "a config output has another rank than the model's",
    "{kind}-input-batch-unsupported": "max_batch_size > 0 but an input has a fixed first dim",
    "{kind}-output-batch-unsupported": "max_batch_size > 0 but an output has a fixed first dim",
    "{kind}-autofill-failed": "Triton's auto-completion of the config fails for this model",
}
_ONNX_ONLY_RULES = {
    "onnx-input-missing": "a model input the config does not feed",
}
_JSON_RULES = {
    "config-json-syntax": "the JSON config is not valid JSON",
    "config-json-schema": "the JSON config does not match the model configuration schema",
    "config-json-parse": "protobuf's JSON parser rejects the config",
}


@dataclass(frozen=True)
class RuleDoc:
    id: str
    level: str  # error | warning | info | advice
    summary: str
    stage: str
    help_uri: str

    @property
    def description(self) -> str:
        """The summary, the severity and when Triton checks it, as sentences."""
        first = self.summary.split(" ", 1)[0]
        summary = self.summary[:1].upper() + self.summary[1:] if first.isalpha() else self.summary
        return f"{summary}. Severity {_LEVELS[self.level]} {_STAGES[self.stage]}"

    @property
    def help_text(self) -> str:
        return f"{self.description} More: {self.help_uri} (or `repokit explain {self.id}`)."


def _help_uri(rule_id: str) -> str:
    return next(uri for prefix, uri in _HELP_PAGES if rule_id.startswith(prefix))


def rule_docs() -> dict[str, RuleDoc]:
    """Every rule id validate and lint can report, with what it means."""
    docs: dict[str, RuleDoc] = {}

    def add(rule_id: str, level: str, summary: str, stage: str) -> None:
        docs[rule_id] = RuleDoc(rule_id, level, summary, stage, _help_uri(rule_id))

    for info in RULES.values():
        add(info.id, info.severity.value, info.summary, info.stage)
    for rule_id, summary in ENSEMBLE_RULES.items():
        info_rule = rule_id == "ensemble-step-io-unknown"
        add(rule_id, "info" if info_rule else "error", summary, BACKEND)
    for kind, file_format in (("onnx", "ONNX"), ("tensorflow", "a TensorFlow GraphDef")):
        for template, summary in _MODEL_FILE_RULES.items():
            add(template.format(kind=kind), "error", summary.format(format=file_format), MODEL_FILE)
    for rule_id, summary in _ONNX_ONLY_RULES.items():
        add(rule_id, "error", summary, MODEL_FILE)
    for rule_id, summary in _JSON_RULES.items():
        add(rule_id, "error", summary, JSON_FORM)
    for rule_id, summary in LINT_RULES.items():
        add(rule_id, "advice", summary, LINT)
    return docs


@dataclass(frozen=True)
class Example:
    """A sample repository breaking a rule: its config and what repokit reports."""

    repository: Path
    config_file: Path | None
    config_text: str
    findings: list[str]


def example(rule_id: str, samples: Path) -> Example | None:
    """The worked example of ``rule_id`` under ``samples/invalid/<rule_id>/``, if there is one."""
    from repokit.config.report import ValidateOptions
    from repokit.config.validate import validate_repository

    repository = samples / "invalid" / rule_id
    if not repository.is_dir():
        return None
    report = validate_repository(repository, ValidateOptions())
    found = [d for d in report.all_diagnostics() if d.rule == rule_id]
    config_file = None
    if found and found[0].file.endswith(".pbtxt"):
        config_file = repository / found[0].file
    elif configs := sorted(repository.glob("*/config.pbtxt")):
        config_file = configs[0]
    text = ""
    if config_file is not None and config_file.is_file():
        text = config_file.read_text(encoding="utf-8", errors="replace")
    findings = [
        f"{d.file}{f':{d.line}:{d.column}' if d.line else ''} {d.message}".strip() for d in found
    ]
    return Example(repository, config_file, text, findings)
