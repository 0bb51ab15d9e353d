"""The CPU gauges and the latency summaries of /metrics, on injected clocks and readers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from repokit.backends.base import Timing
from repokit.core.cpu_metrics import CpuMetrics, read_cpu_times, read_memory
from repokit.core.latency_summary import LatencySummaries, LatencySummary, parse_quantiles
from repokit.core.metrics import MetricSource, render_metrics
from repokit.core.settings import MetricsSettings
from repokit.core.statistics import ModelStats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_summary_quantiles_over_a_sliding_window() -> None:
    clock = Clock()
    summary = LatencySummary(clock, max_age_s=60)
    assert all(math.isnan(v) for v in summary.quantiles((0.5, 0.99)))
    for value in range(1, 101):
        summary.observe(value)
    assert summary.quantiles((0.5, 0.9, 0.99, 1.0)) == [50.0, 90.0, 99.0, 100.0]
    clock.now += 61  # the window empties; count and sum stay
    summary.observe(7)
    assert summary.quantiles((0.5,)) == [7.0]
    assert (summary.count, summary.total_us) == (101, 5057)


def test_parse_quantiles() -> None:
    assert parse_quantiles("0.5:0.05,0.9:0.01") == (0.5, 0.9)
    with pytest.raises(ValueError, match="not between 0 and 1"):
        parse_quantiles("1.5:0.1")
    with pytest.raises(ValueError, match="invalid summary quantile"):
        parse_quantiles("x:0.1")


def test_cpu_utilization_from_the_change_between_collections() -> None:
    times = iter([(100, 1000), (150, 1100), (150, 1100)])
    cpu = CpuMetrics(read_times=lambda: next(times), read_mem=lambda: (8000, 3000))
    cpu.collect()
    assert cpu.utilization == 0.0  # one reading: no change yet
    cpu.collect()
    assert cpu.utilization == 0.5
    cpu.collect()  # no time passed: the last value stays
    assert cpu.utilization == 0.5
    assert cpu.render()[-7:] == [
        "nv_cpu_utilization 0.5",
        "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes",
        "# TYPE nv_cpu_memory_total_bytes gauge",
        "nv_cpu_memory_total_bytes 8000",
        "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes",
        "# TYPE nv_cpu_memory_used_bytes gauge",
        "nv_cpu_memory_used_bytes 3000",
    ]


def test_proc_readers(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 2 8 70 10 0 0 0 0 0\ncpu0 1 1 1 1 1 1 1 1\n")
    assert read_cpu_times(stat) == (20, 100)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  1000 kB\nMemFree:  100 kB\nMemAvailable:  400 kB\n")
    assert read_memory(meminfo) == (1024000, 614400)


def test_unreadable_proc_leaves_the_gauges() -> None:
    def fail() -> tuple[int, int]:
        raise OSError("no /proc")

    cpu = CpuMetrics(read_times=fail, read_mem=fail)
    cpu.collect()
    assert cpu.render()[2] == "nv_cpu_utilization 0"


def test_render_summaries_as_triton_and_counter_latencies_off() -> None:
    stats = ModelStats("m", 1, summaries=LatencySummaries(Clock()))
    stats.record_success(1, 2_000_000, 5_000, Timing())
    settings = MetricsSettings(summary_latencies=True, counter_latencies=False)
    text = render_metrics([MetricSource(stats, 0)], settings=settings)
    assert "nv_inference_request_duration_us" not in text
    assert "nv_inference_request_success" in text
    assert "# TYPE nv_inference_request_summary_us summary" in text
    assert 'nv_inference_request_summary_us_count{model="m",version="1"} 1' in text
    assert 'nv_inference_request_summary_us_sum{model="m",version="1"} 2000' in text
    assert 'nv_inference_request_summary_us{model="m",version="1",quantile="0.99"} 2000' in text
    assert 'nv_inference_queue_summary_us{model="m",version="1",quantile="0.5"} 5' in text
    empty = ModelStats("e", 1, summaries=LatencySummaries(Clock()))
    text = render_metrics([MetricSource(empty, 0)], settings=settings)
    assert 'nv_inference_queue_summary_us{model="e",version="1",quantile="0.999"} Nan' in text
    assert "summary_us" not in render_metrics([MetricSource(stats, 0)])  # off by default


def test_compute_phase_summaries_as_triton() -> None:
    """Triton 2.51 also summarises each compute phase of the requests a model ran
    (L0_metrics' test_inf_summaries_exist); a cache hit adds none."""
    stats = ModelStats("m", 1, summaries=LatencySummaries(Clock()))
    timing = Timing(compute_input_ns=3_000, compute_infer_ns=40_000, compute_output_ns=7_000)
    stats.record_success(1, 2_000_000, 5_000, timing)
    stats.record_cache_hit(1_000, 1_000, 500)
    text = render_metrics(
        [MetricSource(stats, 0)], settings=MetricsSettings(summary_latencies=True)
    )
    labels = '{model="m",version="1"}'
    for phase, us in (("input", 3), ("infer", 40), ("output", 7)):
        name = f"nv_inference_compute_{phase}_summary_us"
        assert f"# TYPE {name} summary" in text
        assert f"{name}_count{labels} 1" in text
        assert f"{name}_sum{labels} {us}" in text
        assert f'{name}{{model="m",version="1",quantile="0.5"}} {us}' in text
    assert f"nv_inference_queue_summary_us_count{labels} 2" in text


def test_the_request_summary_family_is_left_out_when_only_cached_models_have_summaries() -> None:
    """Triton publishes no request summary for a model with the response cache, and an empty
    family is not written at all (L0_metrics' test_inf_summaries_exist_with_cache)."""
    stats = ModelStats("cached", 1, summaries=LatencySummaries(Clock()), cache_enabled=True)
    stats.record_success(1, 2_000, 1_000, Timing())
    text = render_metrics(
        [MetricSource(stats, 0)], settings=MetricsSettings(summary_latencies=True)
    )
    assert "nv_inference_request_summary" not in text
    assert 'nv_inference_queue_summary_us_count{model="cached",version="1"} 1' in text
    assert "# TYPE nv_inference_compute_infer_summary_us summary" in text
