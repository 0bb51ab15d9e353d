"""Core ``ValidateModelConfig`` (§4.2): the checks Triton runs on every config while reading the
repository, before any backend is loaded. Messages quote Triton's wording."""

from __future__ import annotations

from repokit.config.rules.context import RuleContext
from repokit.config.rules.sequence_controls import check_sequence_controls
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.repository.backends import ENSEMBLE_PLATFORM, backend_platform_pair_ok

DELAY = mc.ModelQueuePolicy.DELAY


def check_platform_backend(ctx: RuleContext) -> None:
    config, name = ctx.config, ctx.name
    if not config.backend:
        if config.platform != ENSEMBLE_PLATFORM:
            ctx.report(
                "platform-unexpected",
                f"no backend is set or can be deduced and platform '{config.platform}' is not "
                f"'ensemble'; Triton: \"unexpected platform type '{config.platform}' for "
                f'{name}". Set \'backend\' (e.g. "python") or a known platform.',
                path="platform" if config.platform else "backend",
            )
    elif config.platform == ENSEMBLE_PLATFORM:
        ctx.report(
            "ensemble-backend-set",
            f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend "
            f"type; remove backend '{config.backend}'",
            path="backend",
        )
    if config.backend and not backend_platform_pair_ok(config.backend, config.platform):
        ctx.report(
            "platform-backend-mismatch",
            f"unexpected 'platform' and 'backend' pair, got:{config.platform}, "
            f"{config.backend}; backend '{config.backend}' expects platform "
            f"{_expected_platform(config.backend)}",
            path="platform",
        )


def _expected_platform(backend: str) -> str:
    return {
        "tensorrt": "'tensorrt_plan'",
        "onnxruntime": "'onnxruntime_onnx'",
        "pytorch": "'pytorch_libtorch'",
        "tensorflow": "'tensorflow_savedmodel' or 'tensorflow_graphdef'",
    }.get(backend, "any")


def check_max_batch_size(ctx: RuleContext) -> None:
    if ctx.config.max_batch_size < 0:
        ctx.report(
            "max-batch-size-negative",
            f"'max_batch_size' must be non-negative value for {ctx.name} "
            f"(got {ctx.config.max_batch_size}); use 0 for a model that does not batch",
            path="max_batch_size",
        )


def check_dynamic_batching(ctx: RuleContext) -> None:
    config, name = ctx.config, ctx.name
    if not config.HasField("dynamic_batching"):
        return
    batching = config.dynamic_batching
    for i, size in enumerate(batching.preferred_batch_size):
        path = f"dynamic_batching.preferred_batch_size[{i}]"
        if size <= 0:
            ctx.report(
                "dynamic-batching-preferred-size-invalid",
                f"dynamic batching preferred size must be positive for {name} (got {size})",
                path=path,
            )
        elif size > config.max_batch_size:
            ctx.report(
                "dynamic-batching-preferred-size-too-large",
                f"dynamic batching preferred size must be <= max batch size for {name} "
                f"(got {size}, max_batch_size is {config.max_batch_size})",
                path=path,
            )
    levels = batching.priority_levels
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            ctx.report(
                "priority-default-level-out-of-range",
                f"default priority level must be in range [1, {levels}] for {name} "
                f"(got {batching.default_priority_level})",
                path="dynamic_batching.default_priority_level",
            )
        for key in sorted(batching.priority_queue_policy):
            if not 1 <= key <= levels:
                ctx.report(
                    "priority-queue-policy-level-out-of-range",
                    f"priority queue policy must have priority level in range [1, {levels}] "
                    f"for {name} (got {key})",
                    path=f"dynamic_batching.priority_queue_policy[{key}]",
                )
    if batching.preserve_ordering:
        if levels > 1:
            ctx.report(
                "preserve-ordering-priority-levels",
                f"Only one priority level is allowed when 'preserve_ordering' is true for "
                f"{name} (priority_levels is {levels})",
                path="dynamic_batching.priority_levels",
            )
        policies = [("dynamic_batching.default_queue_policy", batching.default_queue_policy)]
        policies += [
            (f"dynamic_batching.priority_queue_policy[{k}]", batching.priority_queue_policy[k])
            for k in sorted(batching.priority_queue_policy)
        ]
        for path, policy in policies:
            if policy.default_timeout_microseconds != 0 and policy.timeout_action == DELAY:
                ctx.report(
                    "preserve-ordering-delay-policy",
                    "Queue policy can not have DELAY as timeout action when "
                    f"'preserve_ordering' is true for {name}; use REJECT or no timeout",
                    path=f"{path}.timeout_action",
                )


def check_sequence_batching(ctx: RuleContext) -> None:
    config, name = ctx.config, ctx.name
    if not config.HasField("sequence_batching"):
        return
    if config.response_cache.enable:
        ctx.report(
            "response-cache-sequence-batching",
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache.",
            path="response_cache.enable",
        )
    check_sequence_controls(ctx)
    sequence = config.sequence_batching
    if sequence.HasField("oldest"):
        for i, size in enumerate(sequence.oldest.preferred_batch_size):
            path = f"sequence_batching.oldest.preferred_batch_size[{i}]"
            if size <= 0:
                ctx.report(
                    "sequence-preferred-size-invalid",
                    f"sequence batching preferred batch size must be positive for {name} "
                    f"(got {size})",
                    path=path,
                )
            elif size > config.max_batch_size:
                ctx.report(
                    "sequence-preferred-size-too-large",
                    f"sequence batching preferred batch size must be <= max batch size for "
                    f"{name} (got {size}, max_batch_size is {config.max_batch_size})",
                    path=path,
                )
    if sequence.HasField("direct"):
        utilization = sequence.direct.minimum_slot_utilization
        if utilization < 0.0 or utilization > 1.0:  # as in C++: NaN passes
            ctx.report(
                "sequence-slot-utilization-range",
                "sequence batching minimum slot utilization must be in range (0.0, 1.0] for "
                f"{name} (got {utilization:g}; Triton also accepts 0.0)",
                path="sequence_batching.direct.minimum_slot_utilization",
            )


def check_ensemble_platform(ctx: RuleContext) -> None:
    config, name = ctx.config, ctx.name
    if config.HasField("ensemble_scheduling"):
        if config.platform != ENSEMBLE_PLATFORM:
            ctx.report(
                "ensemble-scheduling-platform",
                f"ensemble scheduling cannot be set for model '{name}' whose platform is not "
                'ensemble; set platform: "ensemble" or remove ensemble_scheduling',
                path="ensemble_scheduling",
            )
    elif config.platform == ENSEMBLE_PLATFORM:
        ctx.report(
            "ensemble-scheduling-missing",
            f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble",
            path="ensemble_scheduling",
        )


def check_response_cache_decoupled(ctx: RuleContext) -> None:
    config = ctx.config
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        ctx.report(
            "response-cache-decoupled",
            f"Response Cache does not currently support model {ctx.name} with 'decoupled' "
            "transaction policy. Please disable the response cache.",
            path="response_cache.enable",
        )


def check_model_metrics(ctx: RuleContext) -> None:
    """Newer Triton's model_metrics checks (Triton 2.51 rejects the field altogether, see
    ``config-field-unsupported``)."""
    for i, control in enumerate(ctx.config.model_metrics.metric_control):
        path = f"model_metrics.metric_control[{i}]"
        if not control.HasField("metric_identifier"):
            ctx.report(
                "model-metrics-identifier-missing",
                "metric control must specify 'metric_identifier'",
                path=path,
            )
        elif not control.metric_identifier.family:
            ctx.report(
                "model-metrics-family-empty",
                "metric identifier must specify non-empty 'family'",
                path=f"{path}.metric_identifier.family",
            )
        if not control.HasField("histogram_options"):
            ctx.report(
                "model-metrics-histogram-missing",
                "metric control must specify 'histogram_options'",
                path=path,
            )
        elif not control.histogram_options.buckets:
            ctx.report(
                "model-metrics-buckets-empty",
                "histogram options must specify non-empty 'buckets'",
                path=f"{path}.histogram_options.buckets",
            )


def check_model_config(ctx: RuleContext) -> None:
    """All of ValidateModelConfig, in Triton's order."""
    check_platform_backend(ctx)
    check_max_batch_size(ctx)
    check_dynamic_batching(ctx)
    check_sequence_batching(ctx)
    check_ensemble_platform(ctx)
    check_response_cache_decoupled(ctx)
    check_model_metrics(ctx)
