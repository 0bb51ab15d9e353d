"""The custom-metrics registry's rules, as Triton 2.51's qa model custom_metrics expects them
(qa/python_models/custom_metrics: test_histogram_args, test_dup_metric_family_diff_description,
test_dup_metric_family_diff_kind)."""

from __future__ import annotations

import pytest

from repokit.core.custom_metrics import CustomMetrics
from repokit.errors import RepokitError


def test_a_family_added_again_with_another_description_is_the_first_one() -> None:
    registry = CustomMetrics()
    first = registry.family("requests_seen", "first description", "COUNTER")
    second = registry.family("requests_seen", "second description", "COUNTER")
    metric = registry.metric(second, {}, None)
    registry.update(metric, "increment", 2)
    registry.release(first, 0)  # the first handle goes away; the family stays for the second
    text = registry.render()
    assert "# HELP requests_seen first description" in text
    assert "second description" not in text
    assert "requests_seen 2" in text


def test_a_family_added_again_with_another_kind_is_refused() -> None:
    registry = CustomMetrics()
    registry.family("latency", "latency", "COUNTER")
    with pytest.raises(RepokitError, match="Family name already exists with different type"):
        registry.family("latency", "latency", "GAUGE")


@pytest.mark.parametrize(
    "buckets", [[2.5, 0.1, 1.0, 10.0, 5.0], [1.0, 1.0, 2.0, 5.0, 5.0], [1.0, 1.0]]
)
def test_histogram_buckets_must_increase_strictly(buckets: list[float]) -> None:
    registry = CustomMetrics()
    family = registry.family("sizes", "sizes", "HISTOGRAM")
    with pytest.raises(RepokitError, match="Bucket Boundaries must be strictly sorted"):
        registry.metric(family, {}, buckets)


def test_a_histogram_needs_buckets_but_they_may_be_empty() -> None:
    registry = CustomMetrics()
    family = registry.family("sizes", "sizes", "HISTOGRAM")
    with pytest.raises(RepokitError, match="Bucket boundaries not found"):
        registry.metric(family, {}, None)
    metric = registry.metric(family, {}, [])
    registry.update(metric, "observe", 3.0)
    text = registry.render()
    assert 'sizes_bucket{le="+Inf"} 1' in text
    assert "sizes_count 1" in text
