"""repokit perf on the generate extension against a real repokit server (port 0): /generate
and /generate_stream under load with the models of tests/e2e/generate_models.py, output
validation on the (last) answer, time to first response for streams, the CLI's --endpoint
spellings and refusals. Windows are short and the stability threshold loose."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.perf.errors import PerfError
from repokit.perf.options import PerfOptions, parse_endpoint
from repokit.perf.profiler import run_perf_blocking
from repokit.perf.statistics import RecordBatch, RequestLog, summarize_window
from tests.e2e.generate_models import build_generate_repository
from tests.frontends.http.server_thread import ServerThread, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_generate_repository(tmp_path_factory.mktemp("perf_generate") / "models")
    with running_server(repo) as srv:
        yield srv


def _data(tmp_path: Path, payload: dict[str, Any]) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(payload))
    return str(path)


def _options(server: ServerThread, **kwargs: Any) -> PerfOptions:
    values: dict[str, Any] = {
        "url": server.http_url,
        "measurement_interval_ms": 300.0,
        "stability_percentage": 1000.0,
        "max_trials": 12,
    }
    values.update(kwargs)
    return PerfOptions(**values)


def test_generate_stream_reports_time_to_first_response(
    server: ServerThread, tmp_path: Path
) -> None:
    data = _data(
        tmp_path, {"data": [{"N": [3]}], "validation_data": [{"TOKEN": [2]}]}
    )  # the last event carries the last token
    report = run_perf_blocking(
        _options(server, model="token_stream", endpoint="generate_stream", input_data=[data])
    )
    assert report.exit_code == 0
    summary = report.results[0].summary
    assert summary.request_count > 0
    first = summary.extra["first_response_avg_ns"]
    assert 0 < first <= summary.avg_latency_ns
    assert summary.extra["first_response_p50_ns"] <= summary.extra["first_response_p99_ns"]


def test_generate_validates_outputs(server: ServerThread, tmp_path: Path) -> None:
    good = _data(
        tmp_path,
        {
            "data": [{"TEXT": ["ab"], "COUNT": [2]}],
            "validation_data": [{"TEXT_OUT": ["abab"], "COUNT_OUT": [2.0, 1.0]}],
        },
    )
    report = run_perf_blocking(
        _options(server, model="text_echo", endpoint="generate", input_data=[good])
    )
    assert report.exit_code == 0
    summary = report.results[0].summary
    assert summary.request_count > 0
    assert "first_response_avg_ns" not in summary.extra
    wrong = tmp_path / "wrong.json"
    wrong.write_text(
        json.dumps(
            {"data": [{"TEXT": ["ab"], "COUNT": [2]}], "validation_data": [{"TEXT_OUT": ["x"]}]}
        )
    )
    with pytest.raises(PerfError) as failed:
        run_perf_blocking(
            _options(server, model="text_echo", endpoint="generate", input_data=[str(wrong)])
        )
    assert "TEXT_OUT" in failed.value.message


def test_an_error_event_fails_the_run(server: ServerThread, tmp_path: Path) -> None:
    data = _data(tmp_path, {"data": [{"N": [-1]}]})
    with pytest.raises(PerfError) as failed:
        run_perf_blocking(
            _options(server, model="token_stream", endpoint="generate_stream", input_data=[data])
        )
    assert "N must not be negative" in failed.value.message


def test_cli_generate_stream_prints_time_to_first_response(
    server: ServerThread, tmp_path: Path
) -> None:
    data = _data(tmp_path, {"data": [{"N": [2]}]})
    args = ["perf", "-m", "token_stream", "-u", server.http_url, "-p", "300", "-s", "1000"]
    args += ["--input-data", data, "--endpoint", "v2/models/token_stream/generate", "--streaming"]
    result = CliRunner().invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    assert "time to first response: avg" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--endpoint", "classify"], "--endpoint must be infer, generate or generate_stream"),
        (["--endpoint", "generate", "-i", "grpc"], "only available with -i http"),
    ],
)
def test_cli_refuses_bad_endpoint_options(
    server: ServerThread, args: list[str], message: str
) -> None:
    base = ["perf", "-m", "token_stream", "-u", server.http_url]
    result = CliRunner().invoke(make_app(), base + args)
    assert result.exit_code == 3, result.output
    assert message in result.output


def test_parse_endpoint_spellings() -> None:
    assert parse_endpoint("generate") == "generate"
    assert parse_endpoint("generate", streaming=True) == "generate_stream"
    assert parse_endpoint("/v2/models/m/generate_stream") == "generate_stream"
    assert parse_endpoint("") == "infer"


def test_first_response_times_survive_windows_and_merges() -> None:
    log = RequestLog()
    for index in range(4):
        log.add(index * 100, index * 100 + 50, 1, 1, first=10 * (index + 1))
    batch = log.take()
    kept = batch.select(np.array([True, True, False, True]))
    merged = RecordBatch.concat([kept, RecordBatch.empty()])
    summary = summarize_window(merged, 0, 1000, batch_size=1)
    assert summary.extra == {
        "first_response_avg_ns": (10 + 20 + 40) // 3,
        "first_response_p50_ns": 20,
        "first_response_p99_ns": 40,
    }
