"""Per model-version counters, rendered as the statistics extension JSON (§9.2).

Updated in the hot path with plain integer adds: everything runs on one event loop, so no
locks. The same counters feed the Prometheus text in :mod:`repokit.core.metrics`.

What counts (as Triton's ``InferenceStatsAggregator``):
- a request that passed the checks and ran: success +1 (request duration), queue +1 (time
  waiting for an instance), compute_input/infer/output +1 each with the execution's durations,
  inference_count + its batch size (1 for models without batching);
- a request the backend failed: fail +1, with a failure reason for the metrics;
- each execution: execution_count +1 and ``batch_stats[batch size]`` +1 per compute phase;
- with the response cache (:mod:`repokit.core.response_cache`): a hit counts success +1 and
  queue +1 (the time before the lookup) and cache_hit +1 with the lookup's duration, nothing
  else (no compute, no inference_count, no execution); a miss counts cache_miss +1 with the
  lookup and insert durations (the insert is added to the request's duration too), and runs
  as any request.
Requests rejected by the request checks never reach a model and are not counted (as Triton).

``response_stats`` is always ``{}``: Triton's core fills it only from what a backend reports
per response (``TRITONBACKEND_ModelInstanceReportResponseStatistics``), and neither the python
backend (2.51, nor its current source) nor onnxruntime's reports anything, so Triton 2.51 shows
``{}`` for plain and decoupled python models alike (checked against it in
tests/differential/test_python_cancel_vs_triton.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from repokit.backends.base import Timing
from repokit.core.latency_summary import LatencySummaries

FAILURE_REASONS = ("REJECTED", "OTHER", "CANCELED", "BACKEND")


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    name: str
    version: int
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    load_duration_secs: float = 0.0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    batch_stats: dict[int, BatchStats] = field(default_factory=dict)
    summaries: LatencySummaries | None = None  # --metrics-config summary_latencies=true
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    cache_enabled: bool = False  # the server has a cache and the config enables it

    def record_success(
        self, batch_size: int, request_ns: int, queue_ns: int, timing: Timing
    ) -> None:
        # the Duration adds written out: this runs once per request
        success, queue = self.success, self.queue
        success.count += 1
        success.ns += request_ns
        queue.count += 1
        queue.ns += queue_ns
        phase = self.compute_input
        phase.count += 1
        phase.ns += timing.compute_input_ns
        phase = self.compute_infer
        phase.count += 1
        phase.ns += timing.compute_infer_ns
        phase = self.compute_output
        phase.count += 1
        phase.ns += timing.compute_output_ns
        self.inference_count += batch_size if batch_size > 0 else 1
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.summaries is not None:
            self.summaries.observe(request_ns, queue_ns)
            self.summaries.observe_compute(
                timing.compute_input_ns, timing.compute_infer_ns, timing.compute_output_ns
            )

    def record_cache_hit(self, request_ns: int, queue_ns: int, hit_ns: int) -> None:
        """A request answered from the response cache (as Triton's UpdateSuccessCacheHit,
        which leaves last_inference as it was)."""
        self.success.add(request_ns)
        self.queue.add(queue_ns)
        self.cache_hit.add(hit_ns)
        if self.summaries is not None:
            self.summaries.observe(request_ns, queue_ns)
            self.summaries.cache_hit.observe(hit_ns // 1000)

    def record_cache_miss(self, miss_ns: int) -> None:
        """A request the cache did not have: its lookup and (when its result was stored)
        insert durations."""
        self.cache_miss.add(miss_ns)
        if self.summaries is not None:
            self.summaries.cache_miss.observe(miss_ns // 1000)

    def record_failure(self, request_ns: int, reason: str = "BACKEND") -> None:
        self.fail.add(request_ns)
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_execution(self, batch_size: int, timing: Timing) -> None:
        self.execution_count += 1
        size = batch_size if batch_size > 0 else 1
        stats = self.batch_stats.get(size)
        if stats is None:
            stats = self.batch_stats[size] = BatchStats()
        stats.compute_input.add(timing.compute_input_ns)
        stats.compute_infer.add(timing.compute_infer_ns)
        stats.compute_output.add(timing.compute_output_ns)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": str(self.version),
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_json(),
                "fail": self.fail.to_json(),
                "queue": self.queue.to_json(),
                "compute_input": self.compute_input.to_json(),
                "compute_infer": self.compute_infer.to_json(),
                "compute_output": self.compute_output.to_json(),
                "cache_hit": self.cache_hit.to_json(),
                "cache_miss": self.cache_miss.to_json(),
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stats.compute_input.to_json(),
                    "compute_infer": stats.compute_infer.to_json(),
                    "compute_output": stats.compute_output.to_json(),
                }
                for size, stats in sorted(self.batch_stats.items())
            ],
            "memory_usage": [],
        }
