"""ValidateModelConfig (§4.2), sequence controls (§4.4) and parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.validate_helpers import IO, make_model, python_config, rules, validate_one


def test_valid_python_model_is_clean(tmp_path: Path) -> None:
    make_model(tmp_path)
    report = validate_one(tmp_path)
    assert report.ok and report.diagnostics == []
    assert report.versions == [1]


def test_parse_error_has_line_and_column(tmp_path: Path) -> None:
    make_model(tmp_path, config='backend: "python"\nbogus_field: 3\n')
    report = validate_one(tmp_path)
    [diagnostic] = report.diagnostics
    assert diagnostic.rule == "config-parse-error"
    assert (diagnostic.line, diagnostic.column) == (2, 1)
    assert diagnostic.file == "m/config.pbtxt"
    assert "failed to read text proto" in diagnostic.message


def test_field_newer_than_triton_251(tmp_path: Path) -> None:
    make_model(
        tmp_path,
        config=python_config(
            'model_metrics { metric_control [ { metric_identifier { family: "f" } '
            "histogram_options { buckets: [ 1 ] } } ] }"
        ),
    )
    assert rules(validate_one(tmp_path)) == ["config-field-unsupported"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "model_metrics { metric_control [ { histogram_options { buckets: [ 1 ] } } ] }",
            "model-metrics-identifier-missing",
        ),
        (
            "model_metrics { metric_control [ { metric_identifier { } histogram_options "
            "{ buckets: [ 1 ] } } ] }",
            "model-metrics-family-empty",
        ),
        (
            'model_metrics { metric_control [ { metric_identifier { family: "f" } } ] }',
            "model-metrics-histogram-missing",
        ),
        (
            'model_metrics { metric_control [ { metric_identifier { family: "f" } '
            "histogram_options { } } ] }",
            "model-metrics-buckets-empty",
        ),
    ],
)
def test_model_metrics_rules(tmp_path: Path, body: str, expected: str) -> None:
    make_model(tmp_path, config=python_config(body))
    assert rules(validate_one(tmp_path), errors_only=True) == ["config-field-unsupported", expected]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ('name: "x"\nbackend: "python"\n' + IO, "model-name-mismatch"),
        ('platform: "nope"\n' + IO, "platform-unexpected"),
        ('backend: "pytorch"\nplatform: "libtorch"\n' + IO, "platform-backend-mismatch"),
        ('backend: "python"\nmax_batch_size: -2\n' + IO, "max-batch-size-negative"),
        (
            python_config("max_batch_size: 4 dynamic_batching { preferred_batch_size: [ -1 ] }"),
            "dynamic-batching-preferred-size-invalid",
        ),
        (
            python_config("dynamic_batching { preferred_batch_size: [ 2 ] }"),
            "dynamic-batching-preferred-size-too-large",
        ),
        (
            python_config(
                "max_batch_size: 4 dynamic_batching { priority_levels: 3 "
                "default_priority_level: 4 }"
            ),
            "priority-default-level-out-of-range",
        ),
        (
            python_config(
                "max_batch_size: 4 dynamic_batching { priority_levels: 3 "
                "default_priority_level: 1 priority_queue_policy { key: 0 value {} } }"
            ),
            "priority-queue-policy-level-out-of-range",
        ),
        (
            python_config(
                "max_batch_size: 4 dynamic_batching { preserve_ordering: true "
                "priority_levels: 2 default_priority_level: 1 }"
            ),
            "preserve-ordering-priority-levels",
        ),
        (
            python_config(
                "max_batch_size: 4 dynamic_batching { preserve_ordering: true "
                "priority_levels: 1 default_priority_level: 1 priority_queue_policy { key: "
                "1 value { timeout_action: DELAY default_timeout_microseconds: 5 } } }"
            ),
            "preserve-ordering-delay-policy",
        ),
        (
            python_config("sequence_batching {} response_cache { enable: true }"),
            "response-cache-sequence-batching",
        ),
        (
            python_config(
                "model_transaction_policy { decoupled: true } response_cache { enable: true }"
            ),
            "response-cache-decoupled",
        ),
        (
            python_config(
                "max_batch_size: 2 sequence_batching { oldest { preferred_batch_size: [ 0 ] } }"
            ),
            "sequence-preferred-size-invalid",
        ),
        (
            python_config(
                "max_batch_size: 2 sequence_batching { oldest { preferred_batch_size: [ 3 ] } }"
            ),
            "sequence-preferred-size-too-large",
        ),
        (
            python_config("sequence_batching { direct { minimum_slot_utilization: -0.5 } }"),
            "sequence-slot-utilization-range",
        ),
        ('platform: "ensemble"\n' + IO, "ensemble-scheduling-missing"),
        (
            python_config('ensemble_scheduling { step [ { model_name: "x" } ] }'),
            "ensemble-scheduling-platform",
        ),
        (
            python_config('model_repository_agents { agents [ { name: "checksum" } ] }'),
            "repository-agent-unavailable",
        ),
    ],
)
def test_model_config_rules(tmp_path: Path, config: str, expected: str) -> None:
    make_model(tmp_path, config=config)
    assert expected in rules(validate_one(tmp_path), errors_only=True)


def test_slot_utilization_zero_is_accepted(tmp_path: Path) -> None:
    make_model(
        tmp_path,
        config=python_config("sequence_batching { direct { minimum_slot_utilization: 0.0 } }"),
    )
    assert validate_one(tmp_path).ok


def test_dynamic_batching_defaults_are_normalised(tmp_path: Path) -> None:
    make_model(tmp_path, config=python_config("max_batch_size: 8 dynamic_batching {}"))
    report = validate_one(tmp_path)
    assert report.ok and report.config is not None
    assert list(report.config.dynamic_batching.preferred_batch_size) == [8]


START = "kind: CONTROL_SEQUENCE_START"


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        (
            f"[ {{ control [ {{ {START} int32_false_true: [0, 1] }} ] }} ]",
            "sequence-control-name-missing",
        ),
        (
            f'[ {{ name: "A" control [ {{ {START} int32_false_true: [0, 1] }} ] }}, '
            '{ name: "A" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] }'
            " ] } ]",
            "sequence-control-tensor-reused",
        ),
        (
            f'[ {{ name: "A" control [ {{ {START} fp32_false_true: [0, 1] }}, '
            f"{{ {START} fp32_false_true: [0, 1] }} ] }} ]",
            "sequence-control-kind-duplicated",
        ),
        (f'[ {{ name: "A" control [ {{ {START} }} ] }} ]', "sequence-control-values-missing"),
        (
            f'[ {{ name: "A" control [ {{ {START} int32_false_true: [0, 1] bool_false_true: '
            "[false, true] } ] } ]",
            "sequence-control-values-ambiguous",
        ),
        (
            f'[ {{ name: "A" control [ {{ {START} bool_false_true: [true] }} ] }} ]',
            "sequence-control-values-count",
        ),
        (
            '[ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID fp32_false_true: [0, 1] } ]'
            " } ]",
            "sequence-corrid-values-set",
        ),
        (
            '[ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID } ] } ]',
            "sequence-corrid-data-type",
        ),
    ],
)
def test_sequence_controls(tmp_path: Path, controls: str, expected: str) -> None:
    make_model(
        tmp_path,
        config=python_config(f"max_batch_size: 2 sequence_batching {{ control_input {controls} }}"),
    )
    assert rules(validate_one(tmp_path), errors_only=True) == [expected]


def test_valid_sequence_controls(tmp_path: Path) -> None:
    make_model(
        tmp_path,
        config=python_config(
            "max_batch_size: 2 sequence_batching { control_input [ "
            f'{{ name: "S" control [ {{ {START} int32_false_true: [0, 1] }} ] }}, '
            '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ] }'
        ),
    )
    report = validate_one(tmp_path)
    assert report.ok
    assert report.config is not None
    assert report.config.sequence_batching.max_sequence_idle_microseconds == 1_000_000


def test_config_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    make_model(tmp_path, config=None)
    (tmp_path / "m" / "config.pbtxt").write_bytes(b'# caf\xe9\nbackend: "python"\n' + IO.encode())
    report = validate_one(tmp_path)
    assert report.ok and rules(report) == ["config-not-utf8"]


def test_byte_order_mark_is_a_parse_error(tmp_path: Path) -> None:
    make_model(tmp_path, config=None)
    (tmp_path / "m" / "config.pbtxt").write_bytes(b'\xef\xbb\xbfbackend: "python"\n')
    [diagnostic] = validate_one(tmp_path).diagnostics
    assert diagnostic.rule == "config-parse-error" and "byte-order mark" in diagnostic.message
