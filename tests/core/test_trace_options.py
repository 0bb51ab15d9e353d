"""``--trace-config`` and the deprecated ``--trace-*`` flags as tritonserver 2.51 parses them."""

from __future__ import annotations

import pytest

from repokit.core.tracing.options import TraceStartup, parse_trace_flags
from repokit.core.tracing.setting import TENSORS, TIMESTAMPS


def test_defaults() -> None:
    startup = parse_trace_flags([])
    assert startup == TraceStartup()
    assert (startup.level, startup.rate, startup.count, startup.log_frequency) == (0, 1000, -1, 0)
    assert (startup.file, startup.mode) == ("", "triton")


def test_triton_forms() -> None:
    startup = parse_trace_flags(
        [
            "triton,file=traces/t.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "level=tensors",
            "count=100",
        ]
    )
    assert startup.level == TIMESTAMPS | TENSORS
    assert (startup.rate, startup.count, startup.log_frequency) == (100, 100, 50)
    assert startup.file == "traces/t.json"
    assert startup.notes == ()


def test_level_aliases_and_off_wins() -> None:
    assert parse_trace_flags(["level=max"]).level == TIMESTAMPS
    assert parse_trace_flags(["level=TIMESTAMPS", "level=OFF"]).level == 0
    assert parse_trace_flags(["level=false", "level=TENSORS"]).level == 0


def test_deprecated_flags_with_warnings_and_overrides() -> None:
    startup = parse_trace_flags(
        ["rate=7"],
        trace_file="traces/old.json",
        trace_level=["TIMESTAMPS"],
        trace_rate="3",
        trace_count="9",
        trace_log_frequency="2",
    )
    assert (startup.file, startup.level, startup.rate, startup.count) == (
        "traces/old.json",
        TIMESTAMPS,
        7,
        9,
    )
    assert startup.log_frequency == 2
    assert any("'--trace-rate' has been deprecated" in note for note in startup.notes)
    assert any("Overriding deprecated '--trace-rate'" in note for note in startup.notes)


def test_opentelemetry_settings_with_bsp_defaults() -> None:
    startup = parse_trace_flags(
        [
            "mode=opentelemetry",
            "opentelemetry,url=localhost:4318/v1/traces",
            "opentelemetry,resource=service.name=mine",
            "opentelemetry,resource=service.version=1",
            "opentelemetry,bsp_schedule_delay=100",
        ],
        trace_file="traces/ignored.json",
        environ={"OTEL_BSP_MAX_QUEUE_SIZE": "1024"},
    )
    assert startup.mode == "opentelemetry"
    assert startup.otel_setting("url") == "localhost:4318/v1/traces"
    assert startup.otel_setting("bsp_schedule_delay") == "100"
    assert startup.otel_setting("bsp_max_queue_size") == "1024"  # from the environment
    assert startup.otel_setting("bsp_max_export_batch_size") == "512"
    assert startup.otel_resources() == {"service.name": "mine", "service.version": "1"}
    assert any("ignored with opentelemetry tracing mode" in note for note in startup.notes)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([",rate=1"], "No trace mode specified"),
        (["rate"], "--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"),
        (["rate="], "Got rate="),
        (["zipkin,url=x"], "invalid value for trace mode option: zipkin"),
        (["mode=zipkin"], 'Bad option: "--trace-config mode".\ninvalid value for trace mode'),
        (["level=LOUD"], "invalid value for trace level option: loud"),
        (["rate=many"], 'Bad option: "--trace-config rate".\nInvalid option value. Got many'),
        (["rate=-1"], "Provided option value is out of bound. Got -1"),
        (["count=-2"], "Provided option value is out of bound. Got -2"),
        (["triton,log-frequency=x"], 'Bad option: "--trace-config triton,log-frequency"'),
        (["colour=blue"], 'Bad option: "--trace-config colour": unknown setting'),
        (["triton,url=x"], 'Bad option: "--trace-config triton,url": unknown setting'),
        (
            ["mode=opentelemetry", "opentelemetry,bsp_max_queue_size=x"],
            'Bad option: "--trace-config opentelemetry,bsp_max_queue_size"',
        ),
        (
            ["mode=opentelemetry", "opentelemetry,resource=novalue"],
            "expected <key>=<value>, got novalue",
        ),
        (
            [
                "mode=opentelemetry",
                "opentelemetry,bsp_max_export_batch_size=10",
                "opentelemetry,bsp_max_queue_size=5",
            ],
            "must be less than or equal to bsp_max_queue_size (5)",
        ),
    ],
)
def test_refused(specs: list[str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_trace_flags(specs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"trace_level": ["loud"]}, 'Bad option: "--trace-level"'),
        ({"trace_rate": "x"}, 'Bad option: "--trace-rate"'),
        ({"trace_count": "x"}, 'Bad option: "--trace-count"'),
        ({"trace_log_frequency": "-3"}, 'Bad option: "--trace-log-frequency"'),
    ],
)
def test_refused_deprecated(flags: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_trace_flags([], **flags)  # type: ignore[arg-type]


def test_bad_environment_value() -> None:
    with pytest.raises(ValueError, match='Bad option: "OTEL_BSP_SCHEDULE_DELAY"'):
        parse_trace_flags(["mode=opentelemetry"], environ={"OTEL_BSP_SCHEDULE_DELAY": "soon"})
