"""Files a perf run writes: perf_analyzer's CSV (``-f``), its profile-export JSON, and the
side-by-side comparison of two exports (``repokit perf compare``).

CSV: perf_analyzer's columns and order (``report_writer.cc``), rows sorted by throughput
ascending; ``--verbose-csv`` adds repokit's "Avg Batch Size" and "Execution Count" (from the
server's statistics) after perf_analyzer's columns; times in integer microseconds, doubles
printed like C++ streams (6 significant digits); ensembles add one CSV per composing model
named ``<model>_v<version>.<file name>`` beside it; with several ``-u`` endpoints the CSV holds
the merged figures and one CSV per endpoint (``<host>_<port>.<file name>``) each one's.
Profile export: ``{experiments: [{experiment, requests, window_boundaries}], version,
service_kind, endpoint}`` with per-request timestamps of the merged windows; repokit adds each
experiment's summary (``summary``) and the whole report (``repokit_report``, with each
endpoint's figures under ``endpoints``), which ``compare`` reads.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from repokit.perf.errors import option_error
from repokit.perf.report import LevelResult, PerfReport
from repokit.perf.server_stats import ServerBreakdown
from repokit.perf.statistics import REPORTED_PERCENTILES, response_times_of

EXPORT_VERSION = "repokit-perf 1"


def _g(value: float) -> str:
    return f"{value:.6g}"


def _us(ns: int) -> str:
    return str(int(ns) // 1000)


def _level(report: PerfReport, result: LevelResult) -> str:
    return str(int(result.value)) if report.mode == "concurrency" else _g(result.value)


def _percentiles(report: PerfReport) -> list[int]:
    extra = [report.percentile] if report.percentile > 0 else []
    return sorted({*REPORTED_PERCENTILES, *extra})


def csv_text(report: PerfReport, verbose: bool = False) -> str:
    head = ["Concurrency" if report.mode == "concurrency" else "Request Rate", "Inferences/Second"]
    if report.decoupled:
        head.append("Response Throughput")
    head.append("Client Send")
    if report.include_server_stats:
        head += [
            "Network+Server Send/Recv",
            "Server Queue",
            "Server Compute Input",
            "Server Compute Infer",
            "Server Compute Output",
        ]
        if report.response_cache:
            head += ["Server Cache Hit", "Server Cache Miss"]
    head.append("Client Recv")
    percentiles = _percentiles(report)
    head += [f"p{p} latency" for p in percentiles]
    metrics = verbose and report.collect_metrics
    if verbose:
        if report.percentile == -1:
            head.append("Avg latency")
        head += ["request/response", "response wait"]
        if metrics:
            head += [
                "Avg GPU Utilization",
                "Avg GPU Power Usage",
                "Max GPU Memory Usage",
                "Total GPU Memory",
            ]
        if report.include_server_stats:  # repokit's own columns, after perf_analyzer's
            head += ["Avg Batch Size", "Execution Count"]
    lines = [",".join(head)]
    for result in sorted(report.results, key=lambda r: r.summary.throughput):
        s = result.summary
        row = [_level(report, result), _g(s.throughput)]
        if report.decoupled:
            row.append(_g(s.response_throughput))
        row.append(_us(s.avg_send_ns))
        server = result.server
        if report.include_server_stats:
            b = server or ServerBreakdown(0, 0, 0, 0, 0, 0, 0, 0)
            wait = s.avg_latency_ns - s.avg_send_ns - s.avg_recv_ns
            accounted = b.queue_ns + b.compute_ns + b.cache_hit_ns + b.cache_miss_ns
            row += [
                _us(max(wait - accounted, 0)),
                _us(b.queue_ns),
                _us(b.compute_input_ns),
                _us(b.compute_infer_ns),
                _us(b.compute_output_ns),
            ]
            if report.response_cache:
                row += [_us(b.cache_hit_ns), _us(b.cache_miss_ns)]
        row.append(_us(s.avg_recv_ns))
        row += [_us(s.percentiles_ns.get(p, 0)) for p in percentiles]
        if verbose:
            send_us, recv_us = int(s.avg_send_ns) // 1000, int(s.avg_recv_ns) // 1000
            if report.percentile == -1:
                row.append(_us(s.avg_latency_ns))
            row += [str(send_us + recv_us), str(int(s.avg_latency_ns) // 1000 - send_us - recv_us)]
            if metrics:
                row += _gpu_cells(result.metrics)
            if report.include_server_stats:
                b = server or ServerBreakdown(0, 0, 0, 0, 0, 0, 0, 0)
                row += [_g(b.avg_batch_size), str(b.execution_count)]
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"


def _gpu_cells(metrics: dict[str, Any]) -> list[str]:
    def cell(family: str) -> str:
        return "".join(f"{k}:{_g(v)};" for k, v in sorted(metrics.get(family, {}).items()) if k)

    return [
        cell("gpu_utilization"),
        cell("gpu_power_usage"),
        cell("gpu_memory_used_bytes"),
        cell("gpu_memory_total_bytes"),
    ]


def composing_csv_text(report: PerfReport, model: str) -> str:
    head = [
        "Concurrency" if report.mode == "concurrency" else "Request Rate",
        "Inferences/Second",
        "Client Send",
        "Network+Server Send/Recv",
        "Server Queue",
        "Server Compute Input",
        "Server Compute Infer",
        "Server Compute Output",
    ]
    if report.response_cache:
        head += ["Server Cache Hit", "Server Cache Miss"]
    head.append("Client Recv")
    lines = [",".join(head)]
    for result in sorted(report.results, key=lambda r: r.summary.throughput):
        top = result.server
        b = top.composing.get(model) if top is not None else None
        if top is None or b is None:
            continue
        ratio = b.success_count / top.success_count if top.success_count else 0.0
        accounted = b.queue_ns + b.compute_ns + b.cache_hit_ns + b.cache_miss_ns
        overhead = max(b.avg_request_ns - accounted, 0)
        row = [
            _level(report, result),
            _g(ratio * result.summary.throughput),
            "0",
            _us(overhead),
            _us(b.queue_ns),
            _us(b.compute_input_ns),
            _us(b.compute_infer_ns),
            _us(b.compute_output_ns),
        ]
        if report.response_cache:
            row += [_us(b.cache_hit_ns), _us(b.cache_miss_ns)]
        row.append("0")
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"


def endpoint_report(report: PerfReport, index: int) -> PerfReport:
    """The run as one endpoint saw it (``-u`` with several): its share of every level."""
    view = replace(report, url=report.results[0].endpoints[index].url, results=[])
    for result in report.results:
        part = result.endpoints[index]
        view.results.append(
            replace(result, summary=part.summary, server=part.server, windows=[], endpoints=[])
        )
    return view


def endpoint_file_label(url: str) -> str:
    """An endpoint as a file-name prefix: ``host:8000`` -> ``host_8000``."""
    return "".join(c if c.isalnum() or c in "-." else "_" for c in url)


def write_csv(report: PerfReport, path: Path, verbose: bool = False) -> list[Path]:
    """The CSV (the merged figures with several endpoints), one CSV per composing model of an
    ensemble, and with several endpoints one per endpoint (``<host>_<port>.<file name>``)."""
    path.write_text(csv_text(report, verbose))
    written = [path]
    if report.include_server_stats:
        for model in report.composing_models:
            extra = path.with_name(f"{model}_v1.{path.name}")
            extra.write_text(composing_csv_text(report, model))
            written.append(extra)
    endpoints = report.results[0].endpoints if report.results else []
    for index, endpoint in enumerate(endpoints):
        extra = path.with_name(f"{endpoint_file_label(endpoint.url)}.{path.name}")
        extra.write_text(csv_text(endpoint_report(report, index), verbose))
        written.append(extra)
    return written


def profile_export(report: PerfReport) -> dict[str, Any]:
    experiments = []
    for result in report.results:
        records = result.records
        requests = []
        if records is not None:
            times = response_times_of(records).tolist()
            for start, end, each in zip(
                records.start.tolist(), records.end.tolist(), times, strict=True
            ):
                # a decoupled model's stream: every response's arrival, as perf_analyzer
                # exports them; one-response requests: their end
                stamps = list(each) if each else [end]
                requests.append(
                    {"timestamp": start, "sequence_id": 0, "response_timestamps": stamps}
                )
        experiment: dict[str, Any] = {"mode": result.mode, "value": result.value}
        if result.mode == "periodic_concurrency":  # perf_analyzer's one experiment of the mode
            experiment = {"mode": "concurrency", "value": 1}
        experiments.append(
            {
                "experiment": experiment,
                "requests": requests,
                "window_boundaries": result.window_boundaries,
                "summary": result.to_dict()["summary"],
            }
        )
    return {
        "experiments": experiments,
        "version": EXPORT_VERSION,
        "service_kind": "triton",
        "endpoint": "",
        "repokit_report": report.to_dict(),
    }


def write_profile_export(report: PerfReport, path: Path) -> None:
    path.write_text(json.dumps(profile_export(report), indent=1) + "\n")


def load_report(path: Path) -> PerfReport:
    """A report from a profile export written by ``repokit perf --profile-export-file``."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise option_error(f"'{path}' does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise option_error(f"'{path}' is not a JSON file: {exc}") from None
    data = document.get("repokit_report") if isinstance(document, dict) else None
    if not isinstance(data, dict):
        raise option_error(
            f"'{path}' has no 'repokit_report': compare takes files written by "
            "repokit perf --profile-export-file"
        )
    try:
        return PerfReport.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise option_error(f"'{path}': malformed repokit_report ({exc!r})") from None


def compare_rows(a: PerfReport, b: PerfReport) -> list[dict[str, Any]]:
    """One row per load level present in either run: throughput and latency of A and B."""
    by_value_a = {r.value: r for r in a.results}
    by_value_b = {r.value: r for r in b.results}
    rows = []
    for value in sorted({*by_value_a, *by_value_b}):
        ra, rb = by_value_a.get(value), by_value_b.get(value)
        row: dict[str, Any] = {"value": value}
        for tag, result in (("a", ra), ("b", rb)):
            row[f"{tag}_throughput"] = result.summary.throughput if result else None
            row[f"{tag}_avg_us"] = result.summary.avg_latency_ns / 1000 if result else None
            row[f"{tag}_p99_us"] = (
                result.summary.percentiles_ns.get(99, 0) / 1000 if result else None
            )
        if ra and rb and ra.summary.throughput:
            row["throughput_ratio"] = rb.summary.throughput / ra.summary.throughput
        if ra and rb and ra.summary.percentiles_ns.get(99):
            row["p99_ratio"] = rb.summary.percentiles_ns.get(99, 0) / ra.summary.percentiles_ns[99]
        rows.append(row)
    return rows
