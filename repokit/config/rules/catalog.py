"""Every rule repokit validate reports: id -> severity, load stage, one-line summary.

Stages say WHEN Triton checks a rule, which matters when Triton cannot load a backend:
- ``repository``: while reading the repository, before any backend library is loaded (parse,
  AutoCompleteBackendFields, ValidateModelConfig, the name check, VersionsToLoad);
- ``backend``: after the backend library is found (instance groups, Model::Init with its IO and
  label checks, scheduler creation, instances, warmup);
- ``io``: IO rules, ``repository`` with --strict (autofill off), ``backend`` otherwise;
- ``advisory``: warnings; Triton loads the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from repokit.config.diagnostics import Severity

REPOSITORY, BACKEND, IO, ADVISORY = "repository", "backend", "io", "advisory"
E, W = Severity.ERROR, Severity.WARNING


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: Severity
    stage: str
    summary: str

    def stage_for(self, strict: bool) -> str:
        if self.stage == IO:
            return REPOSITORY if strict else BACKEND
        return self.stage


def _io_rules() -> list[tuple[str, Severity, str, str]]:
    rows: list[tuple[str, Severity, str, str]] = []
    for side in ("input", "output"):
        rows += [
            (f"{side}-name-missing", E, IO, f"a model {side} must have a name"),
            (f"{side}-data-type-missing", E, IO, f"a model {side} must set data_type"),
            (f"{side}-dims-missing", E, IO, f"a model {side} must set dims (rank >= 1)"),
            (f"{side}-dims-invalid", E, IO, "dims must be >= 1 or -1"),
            (f"{side}-reshape-empty", E, IO, "empty reshape needs max_batch_size > 0"),
            (f"{side}-reshape-dims-invalid", E, IO, "reshape dims must be >= 1 or -1"),
            (f"{side}-reshape-size-mismatch", E, IO, "dims and reshape differ in size"),
            (f"{side}-shape-tensor-platform", E, IO, "shape tensors need tensorrt_plan"),
            (f"{side}-non-linear-io-platform", E, IO, "non-linear IO needs tensorrt_plan"),
            (f"{side}-non-linear-io-dims", E, IO, "non-linear IO needs 3 dims"),
            (f"{side}-name-duplicated", W, ADVISORY, "two tensors share a name"),
        ]
    return rows


_ROWS: list[tuple[str, Severity, str, str]] = [
    # parsing and layout (§3.3, §5)
    ("config-parse-error", E, REPOSITORY, "config.pbtxt is not a valid ModelConfig text proto"),
    ("config-not-utf8", W, ADVISORY, "config.pbtxt is not valid UTF-8"),
    ("config-unreadable", E, REPOSITORY, "the config file cannot be read"),
    ("config-field-unsupported", E, REPOSITORY, "a field Triton 2.51's schema does not know"),
    ("config-missing", E, REPOSITORY, "strict mode requires config.pbtxt"),
    ("config-not-autocompleted", E, BACKEND, "no config and the backend cannot autocomplete"),
    ("model-name-mismatch", E, REPOSITORY, "config name must equal the directory name"),
    ("backend-undeterminable", E, REPOSITORY, "no backend can be deduced for the model"),
    ("model-not-found", E, REPOSITORY, "a model named on the command line does not exist"),
    ("model-dir-unreadable", E, REPOSITORY, "the model directory cannot be listed"),
    ("model-dir-stray", W, ADVISORY, "a directory with no config and no version folder"),
    ("model-dir-hidden", W, ADVISORY, "a hidden directory at the root is loaded as a model"),
    ("version-dir-leading-zeros", W, ADVISORY, "version folders with leading zeros are ignored"),
    ("version-dir-not-numeric", W, ADVISORY, "non-numeric version folders are ignored"),
    ("version-dir-prefix-parsed", W, ADVISORY, "Triton reads only the numeric prefix"),
    ("version-dir-out-of-range", E, REPOSITORY, "a version number outside int64"),
    ("version-not-present", W, ADVISORY, "a specific version has no folder"),
    ("no-version-available", E, REPOSITORY, "no version to load under the version policy"),
    ("model-file-missing", E, BACKEND, "the model file of a loaded version is missing"),
    ("model-file-wrong-kind", E, BACKEND, "the model file is a directory or vice versa"),
    ("repository-agent-unavailable", E, REPOSITORY, "model repository agents are not installed"),
    ("batch-strategy-path-missing", E, BACKEND, "TRITON_BATCH_STRATEGY_PATH does not exist"),
    ("batch-strategy-with-sequence", E, BACKEND, "custom batch strategy with sequence batcher"),
    ("python-execution-env-missing", E, BACKEND, "EXECUTION_ENV_PATH does not exist"),
    ("python-model-filename-invalid", E, BACKEND, "a python model file must end with .py"),
    ("python-model-syntax-error", E, BACKEND, "model.py does not compile"),
    ("python-model-class-missing", E, BACKEND, "model.py defines no TritonPythonModel"),
    ("label-file-missing", E, BACKEND, "output label_filename does not exist"),
    ("label-file-outside-model-dir", W, ADVISORY, "label file path escapes the model dir"),
    # ValidateModelConfig (§4.2)
    ("platform-unexpected", E, REPOSITORY, "no backend, and the platform is not ensemble"),
    ("ensemble-backend-set", E, REPOSITORY, "platform ensemble must have an empty backend"),
    ("platform-backend-mismatch", E, REPOSITORY, "platform does not match the backend"),
    ("max-batch-size-negative", E, REPOSITORY, "max_batch_size must be >= 0"),
    ("dynamic-batching-preferred-size-invalid", E, REPOSITORY, "preferred sizes must be > 0"),
    ("dynamic-batching-preferred-size-too-large", E, REPOSITORY, "preferred > max_batch_size"),
    ("priority-default-level-out-of-range", E, REPOSITORY, "default level not in [1, levels]"),
    ("priority-queue-policy-level-out-of-range", E, REPOSITORY, "policy key not in [1, levels]"),
    ("preserve-ordering-priority-levels", E, REPOSITORY, "preserve_ordering needs <= 1 level"),
    ("preserve-ordering-delay-policy", E, REPOSITORY, "preserve_ordering forbids DELAY"),
    ("response-cache-sequence-batching", E, REPOSITORY, "response cache with sequence batcher"),
    ("response-cache-decoupled", E, REPOSITORY, "response cache with a decoupled model"),
    ("sequence-control-name-missing", E, REPOSITORY, "a control_input needs a name"),
    ("sequence-control-tensor-reused", E, REPOSITORY, "a control tensor used twice"),
    ("sequence-control-kind-duplicated", E, REPOSITORY, "a control kind specified twice"),
    ("sequence-control-values-missing", E, REPOSITORY, "START/END/READY need *_false_true"),
    ("sequence-control-values-ambiguous", E, REPOSITORY, "more than one *_false_true field"),
    ("sequence-control-values-count", E, REPOSITORY, "*_false_true needs exactly 2 entries"),
    ("sequence-corrid-values-set", E, REPOSITORY, "CORRID must not use *_false_true"),
    ("sequence-corrid-data-type", E, REPOSITORY, "CORRID data type not allowed"),
    ("sequence-preferred-size-invalid", E, REPOSITORY, "oldest preferred sizes must be > 0"),
    ("sequence-preferred-size-too-large", E, REPOSITORY, "oldest preferred > max_batch_size"),
    ("sequence-slot-utilization-range", E, REPOSITORY, "minimum_slot_utilization not in [0,1]"),
    ("ensemble-scheduling-platform", E, REPOSITORY, "ensemble_scheduling needs platform ensemble"),
    ("ensemble-scheduling-missing", E, REPOSITORY, "platform ensemble needs ensemble_scheduling"),
    ("model-metrics-identifier-missing", E, REPOSITORY, "metric_control needs metric_identifier"),
    ("model-metrics-family-empty", E, REPOSITORY, "metric_identifier needs a family"),
    ("model-metrics-histogram-missing", E, REPOSITORY, "metric_control needs histogram_options"),
    ("model-metrics-buckets-empty", E, REPOSITORY, "histogram_options needs buckets"),
    # ValidateBatchIO (§4.3)
    ("input-format-dims", E, IO, "FORMAT_NHWC/NCHW inputs need 3 dims"),
    ("batch-input-source-count", E, IO, "a batch input kind needs exactly 1 source input"),
    ("batch-input-data-type", E, IO, "batch input data_type must be INT32 or FP32"),
    ("batch-io-unknown-source", E, IO, "batch IO source_input must be a model input"),
    ("batch-output-source-count", E, IO, "BATCH_SCATTER_WITH_INPUT_SHAPE needs 1 source"),
    ("batch-output-unknown-target", E, IO, "batch output target must be a model output"),
    ("batch-output-target-duplicated", E, IO, "batch output target listed twice"),
    # instance groups (§4.5)
    ("instance-group-gpu-unavailable", E, BACKEND, "KIND_GPU on a server without GPUs"),
    ("python-auto-complete-failed", E, BACKEND, "the model's auto_complete_config failed"),
    ("runtime-escapes-backend-dir", E, REPOSITORY, "runtime resolves outside its folder"),
    ("backend-library-missing", E, REPOSITORY, "no backend library (--backend-directory)"),
    ("instance-group-model-gpus", E, BACKEND, "KIND_MODEL must not list gpus"),
    ("instance-group-cpu-gpus", E, BACKEND, "KIND_CPU (or AUTO on CPU) must not list gpus"),
    ("instance-group-gpu-invalid", E, BACKEND, "a gpu id is negative or not one of --gpus N"),
    ("instance-group-profile-platform", E, BACKEND, "profile is only for TensorRT"),
    ("instance-group-profile-invalid", E, BACKEND, "profile must be a non-negative integer"),
    # sequence state (§4.4, sequence batch scheduler creation)
    ("initial-state-count", E, BACKEND, "at most one initial_state per state"),
    ("initial-state-data-type", E, BACKEND, "initial_state data_type must match the state"),
    ("initial-state-name-missing", E, BACKEND, "initial_state needs a name"),
    ("state-input-duplicated", E, BACKEND, "a state input_name is used twice"),
    ("initial-state-dims-rank", E, BACKEND, "initial_state rank must match the state"),
    ("initial-state-dims-variable", E, BACKEND, "initial_state dims must be fixed"),
    ("initial-state-dims-mismatch", E, BACKEND, "initial_state dims must match the state"),
    ("initial-state-data-missing", E, BACKEND, "initial_state needs zero_data or data_file"),
    ("initial-state-file-missing", E, BACKEND, "initial_state data_file does not exist"),
    ("initial-state-file-too-small", E, BACKEND, "initial_state data_file is too small"),
    # warmup (§4.9)
    ("warmup-dims-variable", E, BACKEND, "warmup dims must be fixed"),
    ("warmup-data-missing", E, BACKEND, "warmup input needs a data kind"),
    ("warmup-file-missing", E, BACKEND, "warmup input_data_file does not exist"),
    ("warmup-file-too-small", E, BACKEND, "warmup input_data_file is too small"),
    ("warmup-string-data-invalid", E, BACKEND, "warmup STRING file is not a BYTES tensor"),
    ("warmup-execute-return", E, BACKEND, "warmup runs execute(), whose return is wrong"),
    ("warmup-input-missing", E, BACKEND, "a warmup sample misses a required input"),
    ("warmup-data-type-mismatch", E, BACKEND, "warmup data_type differs from the input"),
    ("warmup-shape-mismatch", E, BACKEND, "warmup dims differ from the input dims"),
    ("warmup-batch-size-too-large", E, BACKEND, "warmup batch_size above max_batch_size"),
    ("warmup-input-not-model-input", W, ADVISORY, "a warmup input that is not a model input"),
]

RULES: dict[str, RuleInfo] = {
    rule_id: RuleInfo(rule_id, severity, stage, summary)
    for rule_id, severity, stage, summary in _ROWS + _io_rules()
}


def rule(rule_id: str) -> RuleInfo:
    return RULES[rule_id]
