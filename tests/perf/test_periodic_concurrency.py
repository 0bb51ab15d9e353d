"""repokit perf --periodic-concurrency-range START:END:STEP --request-period N, perf_analyzer's
ramp for decoupled models: START streaming requests, STEP more each time every request of the
latest group has N responses, until END requests have their final response; the requests'
timestamps go to the profile export as perf_analyzer writes them (one experiment, concurrency
1, window [0, 2^64 - 1]); option errors in perf_analyzer's words. Real repokit server (port
0) with ``token_stream`` (N responses for input N) from tests/e2e/generate_models.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.perf.periodic import TOO_FEW_RESPONSES, UINT64_MAX
from tests.e2e.generate_models import build_generate_repository
from tests.frontends.http.server_thread import ServerThread, running_server

TOKENS = 5  # each request: 5 responses with a token, then the empty final one


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = build_generate_repository(tmp_path_factory.mktemp("perf_periodic") / "models")
    with running_server(repo, allow_grpc=True) as srv:
        yield srv


def _perf(server: ServerThread, tmp_path: Path, *args: str) -> Any:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"N": [TOKENS]}]}))
    return CliRunner().invoke(
        make_app(),
        ["perf", "-m", "token_stream", "-u", server.grpc_url, "--input-data", str(data), *args],
        env={"COLUMNS": "300"},
    )


def _export(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def test_ramp_sends_each_group_once_the_previous_has_its_period(
    server: ServerThread, tmp_path: Path
) -> None:
    export = tmp_path / "export.json"
    result = _perf(
        server,
        tmp_path,
        "-i",
        "grpc",
        "--streaming",
        "--periodic-concurrency-range",
        "2:6:2",
        "--request-period",
        "3",
        "--profile-export-file",
        str(export),
    )
    assert result.exit_code == 0, result.output
    assert "periodic concurrency 6:" in result.output
    (experiment,) = _export(export)["experiments"]
    assert experiment["experiment"] == {"mode": "concurrency", "value": 1}
    assert experiment["window_boundaries"] == [0, UINT64_MAX]
    requests = sorted(experiment["requests"], key=lambda r: r["timestamp"])
    assert len(requests) == 6  # 2, then 2 more twice: 6 in all
    for request in requests:
        assert len(request["response_timestamps"]) == TOKENS
    groups = [requests[0:2], requests[2:4], requests[4:6]]
    for earlier, later in itertools.pairwise(groups):
        # a group starts once every request of the one before has its 3rd response
        period_reached = max(r["response_timestamps"][2] for r in earlier)
        assert all(r["timestamp"] >= period_reached for r in later)


def test_end_counts_requests_and_the_empty_final_response_counts(
    server: ServerThread, tmp_path: Path
) -> None:
    export = tmp_path / "export.json"
    # period 6: the 5 tokens and the empty final response (perf_analyzer counts it)
    result = _perf(
        server,
        tmp_path,
        "-i",
        "grpc",
        "--streaming",
        "--periodic-concurrency-range",
        "1:3",
        "--request-period",
        str(TOKENS + 1),
        "--profile-export-file",
        str(export),
    )
    assert result.exit_code == 0, result.output
    (experiment,) = _export(export)["experiments"]
    assert len(experiment["requests"]) == 3  # step 1: one more after each completes


def test_final_response_before_the_period_is_an_error(server: ServerThread, tmp_path: Path) -> None:
    result = _perf(
        server,
        tmp_path,
        "-i",
        "grpc",
        "--streaming",
        "--periodic-concurrency-range",
        "1:2",
        "--request-period",
        str(TOKENS + 2),
        "--profile-export-file",
        str(tmp_path / "export.json"),
    )
    assert result.exit_code == 99, result.output
    assert TOO_FEW_RESPONSES in " ".join(result.output.split())
    assert "Traceback" not in result.output


STREAMING = ["-i", "grpc", "--streaming"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            [*STREAMING, "--periodic-concurrency-range", "4"],
            "Both <start> and <end> values must be provided.",
        ),
        (
            [*STREAMING, "--periodic-concurrency-range", "1:2:3:4"],
            "The value does not match <start:end:step>.",
        ),
        ([*STREAMING, "--periodic-concurrency-range", "1:4:0"], "The <step> value must be > 0."),
        ([*STREAMING, "--periodic-concurrency-range", "5:4"], "The <start> must be <= <end>."),
        (
            [*STREAMING, "--periodic-concurrency-range", "1:6:2"],
            "The <step> value must be a factor of the range size (<end> - <start>).",
        ),
        ([*STREAMING, "--periodic-concurrency-range", "0:4"], "The <start> value must be > 0."),
        ([*STREAMING, "--periodic-concurrency-range", "a:4"], "must be integers"),
        (
            [*STREAMING, "--periodic-concurrency-range", "1:4", "--request-period", "0"],
            "Failed to parse --request-period. The value must be > 0",
        ),
        (
            ["-i", "grpc", "--periodic-concurrency-range", "1:4"],
            "The --periodic-concurrency-range option requires bi-directional gRPC streaming.",
        ),
        (
            [*STREAMING, "--periodic-concurrency-range", "1:4"],
            "Must provide --profile-export-file when using the --periodic-concurrency-range",
        ),
        (
            [*STREAMING, "--periodic-concurrency-range", "1:4", "--concurrency-range", "2"],
            "Cannot specify more then one inference load mode.",
        ),
        (
            [*STREAMING, "--periodic-concurrency-range", "1:4", "--request-count", "4"],
            "--request-count cannot be combined with --periodic-concurrency-range",
        ),
    ],
)
def test_option_errors_exit_3(
    server: ServerThread, tmp_path: Path, args: list[str], expected: str
) -> None:
    needs_file = "--profile-export-file" not in expected and "Must provide" not in expected
    extra = ["--profile-export-file", str(tmp_path / "e.json")] if needs_file else []
    result = _perf(server, tmp_path, *args, *extra)
    assert result.exit_code == 3, result.output
    assert expected in " ".join(result.output.split())
    assert "Traceback" not in result.output
