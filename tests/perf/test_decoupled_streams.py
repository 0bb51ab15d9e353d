"""repokit perf on a decoupled model, as perf_analyzer measures one: over a ModelStreamInfer
stream each request asks for an empty final response and is read up to its final response
(before, the stream was read one message per request, so the next request took the previous
one's second response and the figures measured nothing); every response with outputs counts
towards the Response Throughput (CSV) and the responses/s line; the first one's arrival is the
time to first response. Real repokit server (port 0) with ``token_stream`` (N responses for
N) from tests/e2e/generate_models.py; short windows, loose stability."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repokit.perf.errors import PerfError
from repokit.perf.export import csv_text
from repokit.perf.options import ConcurrencyRange, PerfOptions
from repokit.perf.profiler import run_perf_blocking
from tests.e2e.generate_models import build_generate_repository
from tests.frontends.http.server_thread import ServerThread, running_server

TOKENS = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_generate_repository(tmp_path_factory.mktemp("perf_decoupled") / "models")
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _data(tmp_path: Path, payload: dict[str, Any]) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(payload))
    return str(path)


def _options(**kwargs: Any) -> PerfOptions:
    values: dict[str, Any] = {
        "measurement_interval_ms": 300.0,
        "stability_percentage": 1000.0,
        "max_trials": 12,
        "model": "token_stream",
    }
    values.update(kwargs)
    return PerfOptions(**values)


@pytest.mark.parametrize("async_mode", [False, True], ids=["sync", "async"])
def test_grpc_stream_reads_every_response_of_a_request(
    server: ServerThread, tmp_path: Path, async_mode: bool
) -> None:
    data = _data(
        tmp_path, {"data": [{"N": [TOKENS]}], "validation_data": [{"TOKEN": [TOKENS - 1]}]}
    )
    report = run_perf_blocking(
        _options(
            url=server.grpc_url,
            protocol="grpc",
            streaming=True,
            async_mode=async_mode,
            concurrency_range=ConcurrencyRange(2, 2, 1),
            input_data=[data],
            profile_export_file=tmp_path / "export.json",
        )
    )
    assert report.exit_code == 0
    # the export lists every response's arrival (qa/L0_perf_analyzer checks for more than one)
    requests = json.loads((tmp_path / "export.json").read_text())["experiments"][0]["requests"]
    assert requests
    for request in requests:
        stamps = request["response_timestamps"]
        assert len(stamps) == TOKENS
        assert request["timestamp"] < stamps[0] and stamps == sorted(stamps)
    summary = report.results[0].summary
    assert summary.request_count > 0
    assert summary.response_count == TOKENS * summary.request_count
    assert summary.response_throughput == pytest.approx(TOKENS * summary.throughput)
    first = summary.extra["first_response_avg_ns"]
    assert 0 < first < summary.avg_latency_ns  # the first of five comes before the last
    row = next(csv.DictReader(csv_text(report).splitlines()))
    assert float(row["Response Throughput"]) == pytest.approx(
        TOKENS * float(row["Inferences/Second"]), rel=1e-3
    )


def test_grpc_stream_validates_the_last_response(server: ServerThread, tmp_path: Path) -> None:
    wrong = _data(tmp_path, {"data": [{"N": [3]}], "validation_data": [{"TOKEN": [0]}]})
    with pytest.raises(PerfError) as failed:
        run_perf_blocking(
            _options(url=server.grpc_url, protocol="grpc", streaming=True, input_data=[wrong])
        )
    assert "TOKEN" in failed.value.message


def test_generate_stream_counts_its_events(server: ServerThread, tmp_path: Path) -> None:
    data = _data(tmp_path, {"data": [{"N": [TOKENS]}]})
    report = run_perf_blocking(
        _options(url=server.http_url, endpoint="generate_stream", input_data=[data])
    )
    summary = report.results[0].summary
    assert summary.request_count > 0
    assert summary.response_count == TOKENS * summary.request_count


def test_a_model_that_is_not_decoupled_answers_once_per_request(
    server: ServerThread, tmp_path: Path
) -> None:
    data = _data(tmp_path, {"data": [{"X": [1.0, 2.0]}], "validation_data": [{"Y": [2.0, 3.0]}]})
    report = run_perf_blocking(
        _options(
            url=server.grpc_url,
            protocol="grpc",
            streaming=True,
            model="batched_add",
            input_data=[data],
        )
    )
    summary = report.results[0].summary
    assert summary.request_count > 0
    assert summary.response_count == summary.request_count
    assert "first_response_avg_ns" not in summary.extra
