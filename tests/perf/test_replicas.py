"""repokit perf over two `repokit serve` processes (two replicas on one machine, port 0): the
level is split between them, each is reported with the breakdown from its own statistics, and
the merge adds them up; text, CSV and JSON outputs."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.perf.options import ConcurrencyRange, PerfOptions, RateRange
from repokit.perf.profiler import run_perf_blocking
from tests.cli.serve_process import PORT_FLAGS, ServeProcess
from tests.frontends.http.server_thread import copy_models


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServeProcess]]:
    repo = copy_models(tmp_path_factory.mktemp("repo"), ("add_sub",))
    servers: list[ServeProcess] = []
    try:
        for _ in range(2):
            servers.append(ServeProcess(str(repo), *PORT_FLAGS))
        yield servers
    finally:
        for server in servers:
            server.kill()


def test_cli_splits_the_load_and_reports_each_replica_and_the_merge(
    replicas: list[ServeProcess], tmp_path: Path
) -> None:
    first, second = (server.url("HTTPService") for server in replicas)
    args = [
        "perf", "-m", "add_sub", "-u", first, "-u", second, "--concurrency-range", "4",
        "-p", "400", "-s", "1000", "-r", "12",
        "-f", str(tmp_path / "r.csv"), "--profile-export-file", str(tmp_path / "r.json"),
    ]  # fmt: skip
    result = CliRunner().invoke(make_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"add_sub v1 over http ({first},{second})" in result.output
    assert f"  {first}: " in result.output and f"  {second}: " in result.output
    exported = json.loads((tmp_path / "r.json").read_text())["repokit_report"]
    [level] = exported["results"]
    merged, parts = level["summary"], level["endpoints"]
    assert [part["url"] for part in parts] == [first, second]
    assert merged["request_count"] == sum(p["summary"]["request_count"] for p in parts)
    for part in parts:
        assert part["summary"]["throughput"] > 0
        # each replica's breakdown comes from its own statistics: it served at least what the
        # client counted against it (requests in flight at a window edge land on either side)
        server = part["server"]
        assert server["success_count"] >= part["summary"]["request_count"] - 2
        assert server["compute_infer_ns"] > 0
    assert level["server"]["success_count"] == sum(p["server"]["success_count"] for p in parts)
    label = {url: url.replace(":", "_") for url in (first, second)}
    for url in (first, second):
        with (tmp_path / f"{label[url]}.r.csv").open() as f:
            [row] = list(csv.DictReader(f))
        assert row["Concurrency"] == "4" and float(row["Inferences/Second"]) > 0
    with (tmp_path / "r.csv").open() as f:
        [row] = list(csv.DictReader(f))
    assert float(row["Inferences/Second"]) == pytest.approx(merged["throughput"], rel=1e-5)


def test_grpc_endpoints_given_with_a_comma(replicas: list[ServeProcess]) -> None:
    urls = ",".join(server.url("GRPCInferenceService") for server in replicas)
    report = run_perf_blocking(
        PerfOptions(
            model="add_sub",
            url=urls,
            protocol="grpc",
            concurrency_range=ConcurrencyRange(2, 2, 1),
            measurement_interval_ms=400.0,
            stability_percentage=1000.0,
            max_trials=12,
        )
    )
    assert report.exit_code == 0
    [result] = report.results
    assert [e.url for e in result.endpoints] == urls.split(",")
    assert all(e.summary.request_count > 0 for e in result.endpoints)
    assert result.server is not None and result.server.success_count == sum(
        e.server.success_count for e in result.endpoints if e.server is not None
    )


def test_request_rate_is_dealt_to_both_replicas(replicas: list[ServeProcess]) -> None:
    urls = ",".join(server.url("HTTPService") for server in replicas)
    report = run_perf_blocking(
        PerfOptions(
            model="add_sub",
            url=urls,
            request_rate_range=RateRange(100, 100, 1),
            measurement_interval_ms=600.0,
            stability_percentage=1000.0,
            max_trials=12,
        )
    )
    assert report.exit_code == 0
    [result] = report.results
    # 100 requests/s in all, every other one to each replica
    assert result.summary.throughput == pytest.approx(100, rel=0.25)
    counts = [e.summary.request_count for e in result.endpoints]
    assert abs(counts[0] - counts[1]) <= 2 + 0.1 * max(counts)
    assert all(e.server is not None and e.server.success_count > 0 for e in result.endpoints)


def test_a_replica_without_the_model_is_named(replicas: list[ServeProcess]) -> None:
    first = replicas[0].url("HTTPService")
    result = CliRunner().invoke(
        make_app(), ["perf", "-m", "nope", "-u", f"{first},127.0.0.1:1", "-p", "300"]
    )
    assert result.exit_code == 99, result.output
    assert f"{first}: failed to get metadata of model 'nope'" in result.output
    assert "Traceback" not in result.output
