"""repokit perf against a real repokit server (HTTP + gRPC on port 0, in a thread): HTTP binary
and JSON tensors, gRPC unary and streaming, a sequence model, an ensemble, shared memory,
metrics, output validation and the CLI's exit codes. Windows are short (0.3 s) and the stability
threshold loose so each level finishes in about a second."""

from __future__ import annotations

import asyncio
import csv
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.perf.errors import PerfError
from repokit.perf.options import ConcurrencyRange, PerfOptions, RateRange
from repokit.perf.profiler import run_perf, run_perf_blocking
from repokit.perf.report import PerfReport
from repokit.perf.transports.base import TransportOptions
from repokit.perf.transports.grpc import (
    BlockingGrpcConnection,
    GrpcTransport,
    WireGrpcConnection,
)
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

MODELS = ("add_sub", "accumulate", "add_sub_onnx", "add_sub_ensemble")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("repo"), MODELS)
    with running_server(repo, allow_grpc=True, allow_client_shm=True) as srv:
        yield srv


def _grpc_url(server: ServerThread) -> str:
    return server.grpc_url


def _options(server: ServerThread, **kwargs: Any) -> PerfOptions:
    values: dict[str, Any] = {
        "model": "add_sub",
        "url": server.http_url,
        "measurement_interval_ms": 300.0,
        "stability_percentage": 1000.0,
        # generous: on a loaded 2-core CI machine a 300 ms window can be nearly empty
        "max_trials": 12,
    }
    values.update(kwargs)
    if values.get("protocol") == "grpc" and "url" not in kwargs:
        values["url"] = _grpc_url(server)
    return PerfOptions(**values)


def test_http_binary_sweep_writes_csv_export_and_plot(server: ServerThread, tmp_path: Path) -> None:
    options = _options(
        server,
        concurrency_range=ConcurrencyRange(1, 2, 1),
        csv_file=tmp_path / "r.csv",
        profile_export_file=tmp_path / "r.json",
        plot_file=tmp_path / "r.png",
        warmup_request_count=5,
    )
    report = run_perf_blocking(options)
    assert report.exit_code == 0
    assert [r.value for r in report.results] == [1, 2]
    for result in report.results:
        assert result.stable and result.summary.throughput > 0
        assert result.server is not None
        # the server saw (at least) the requests the client counted in the merged windows
        assert result.server.success_count >= result.summary.request_count - 2
        assert result.server.compute_infer_ns > 0
    with (tmp_path / "r.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:3] == ["Concurrency", "Inferences/Second", "Client Send"]
    assert {row["Concurrency"] for row in rows} == {"1", "2"}
    exported = json.loads((tmp_path / "r.json").read_text())
    requests = exported["experiments"][0]["requests"]
    assert len(requests) == report.results[0].summary.request_count
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_http_json_tensors_with_validation_data(server: ServerThread, tmp_path: Path) -> None:
    a, b = list(range(16)), [2] * 16
    data = tmp_path / "data.json"
    data.write_text(
        json.dumps(
            {
                "data": [{"INPUT0": a, "INPUT1": b}],
                "validation_data": [{"OUTPUT0": [x + 2 for x in a], "OUTPUT1": [x - 2 for x in a]}],
            }
        )
    )
    for fmt in ("json", "binary"):
        report = run_perf_blocking(
            _options(
                server, input_data=[str(data)], input_tensor_format=fmt, output_tensor_format=fmt
            )
        )
        assert report.exit_code == 0 and report.results[0].summary.request_count > 0
    wrong = tmp_path / "wrong.json"
    wrong.write_text(
        json.dumps({"data": [{"INPUT0": a, "INPUT1": b}], "validation_data": [{"OUTPUT0": a}]})
    )
    with pytest.raises(PerfError) as e:
        run_perf_blocking(_options(server, input_data=[str(wrong)]))
    assert e.value.exit_code == 99
    assert "Output doesn't match expected output: output 'OUTPUT0'" in e.value.message


@pytest.mark.parametrize("streaming", [False, True])
def test_grpc_unary_and_streaming(server: ServerThread, streaming: bool) -> None:
    report = run_perf_blocking(
        _options(
            server,
            protocol="grpc",
            streaming=streaming,
            concurrency_range=ConcurrencyRange(2, 2, 1),
            batch_size=4,
        )
    )
    result = report.results[0]
    assert report.exit_code == 0 and result.summary.throughput > 0
    assert result.server is not None and result.server.inference_count > 0
    # -b 4: every request carries four inferences
    assert result.server.inference_count == 4 * result.server.success_count


@pytest.mark.parametrize("streaming", [False, True])
def test_grpc_own_http2_client_and_library_fallback(server: ServerThread, streaming: bool) -> None:
    options = _options(
        server, protocol="grpc", streaming=streaming, concurrency_range=ConcurrencyRange(2, 2, 1)
    )

    async def measure(force_library: bool) -> tuple[PerfReport, Any]:
        transport = GrpcTransport(
            TransportOptions("grpc", options.url, streaming=streaming), time.monotonic_ns
        )
        await transport.open()
        assert transport.wire_problem is None  # repokit serve's headers are plain strings
        if force_library:
            transport.wire_problem = "forced by the test"
        try:
            report = await run_perf(options, transport=transport)
            connection = transport.connect_blocking() if transport.supports_blocking() else None
        finally:
            await transport.close()
        return report, connection

    own, connection = asyncio.run(measure(False))
    assert own.exit_code == 0 and own.results[0].summary.throughput > 0
    assert isinstance(connection, WireGrpcConnection)
    connection.close()
    library, connection = asyncio.run(measure(True))
    assert library.exit_code == 0 and library.results[0].summary.throughput > 0
    assert library.warnings == [
        "gRPC: the built-in HTTP/2 client cannot talk to this server (forced by the test); "
        "using the grpc library, which costs more client CPU per request"
    ]
    assert own.warnings == []
    # unary falls back to a synchronous grpc channel, streaming to the asyncio driver
    assert connection is None if streaming else isinstance(connection, BlockingGrpcConnection)


def test_sequence_model_with_streams_and_validation(server: ServerThread, tmp_path: Path) -> None:
    data = tmp_path / "seq.json"
    data.write_text(
        json.dumps(
            {
                "data": [
                    [{"INPUT": [1]}, {"INPUT": [2]}, {"INPUT": [3]}],
                    [{"INPUT": [10]}, {"INPUT": [5]}],
                ],
                "validation_data": [
                    [{"OUTPUT": [1]}, {"OUTPUT": [3]}, {"OUTPUT": [6]}],
                    [{"OUTPUT": [10]}, {"OUTPUT": [15]}],
                ],
            }
        )
    )
    for protocol in ("http", "grpc"):
        report = run_perf_blocking(
            _options(
                server,
                model="accumulate",
                protocol=protocol,
                input_data=[str(data)],
                concurrency_range=ConcurrencyRange(2, 2, 1),
                sequence_id_range=(1000, 1999),
            )
        )
        assert report.exit_code == 0
        assert report.results[0].summary.sequence_count > 0


def test_ensemble_breakdown_per_composing_model(server: ServerThread, tmp_path: Path) -> None:
    report = run_perf_blocking(
        _options(server, model="add_sub_ensemble", csv_file=tmp_path / "e.csv")
    )
    assert report.composing_models == ["add_sub_onnx", "add_sub"]
    server_stats = report.results[0].server
    assert server_stats is not None
    assert set(server_stats.composing) == {"add_sub_onnx", "add_sub"}
    # statistics are read between windows while a request may be inside the ensemble (its
    # composing step counted, the ensemble not yet), so the counts may differ by in-flight ones
    in_flight = 1  # the default concurrency
    difference = server_stats.composing["add_sub"].success_count - server_stats.success_count
    assert abs(difference) <= 2 * in_flight
    assert server_stats.composing["add_sub"].success_count > 0
    assert (tmp_path / "add_sub_v1.e.csv").read_text().startswith("Concurrency,Inferences/Second")


def test_system_shared_memory_and_metrics(server: ServerThread) -> None:
    assert server.handle is not None
    metrics_url = f"127.0.0.1:{server.handle.metrics_port}/metrics"
    for protocol in ("http", "grpc"):
        report = run_perf_blocking(
            _options(
                server,
                protocol=protocol,
                shared_memory="system",
                collect_metrics=True,
                metrics_url=metrics_url,
                metrics_interval_ms=100,
            )
        )
        assert report.exit_code == 0 and report.results[0].summary.request_count > 0
        assert not [w for w in report.results[0].warnings if "metrics" in w]


def test_request_rate_over_http(server: ServerThread) -> None:
    report = run_perf_blocking(_options(server, request_rate_range=RateRange(50, 100, 50)))
    assert [r.value for r in report.results] == [50, 100]
    assert report.results[1].summary.throughput == pytest.approx(100, rel=0.3)


def test_unknown_model_is_a_generic_error(server: ServerThread) -> None:
    with pytest.raises(PerfError) as e:
        run_perf_blocking(_options(server, model="nope"))
    assert e.value.exit_code == 99 and "failed to get metadata of model 'nope'" in e.value.message


def test_cli_runs_and_compares(server: ServerThread, tmp_path: Path) -> None:
    runner = CliRunner()
    args = [
        "perf",
        "-m",
        "add_sub",
        "-u",
        server.http_url,
        "-p",
        "300",
        "-s",
        "1000",
        "--profile-export-file",
        str(tmp_path / "a.json"),
    ]
    result = runner.invoke(make_app(), args)
    assert result.exit_code == 0, result.output
    assert "add_sub v1 over http" in result.output
    result = runner.invoke(
        make_app(), ["perf", "compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")]
    )
    assert result.exit_code == 0, result.output
    assert "1.00" in result.output


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--concurrency-range", "x"], "--concurrency-range takes integers"),
        (["--no-such-option"], "No such option"),
        (["-b", "two"], "Invalid value for '-b'"),
        (["-b", "9"], "exceeds max_batch_size 8"),
        (["--shape", "NOPE:1"], "--shape names unknown input 'NOPE'"),
        (["--input-data", "{data}"], "$.data[0]: input 'INPUT1' is missing"),
    ],
)
def test_cli_bad_options_exit_3(
    server: ServerThread, tmp_path: Path, extra: list[str], expected: str
) -> None:
    data = tmp_path / "bad.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [0] * 16}]}))
    extra = [e.replace("{data}", str(data)) for e in extra]
    result = CliRunner().invoke(
        make_app(),
        ["perf", "-m", "add_sub", "-u", server.http_url, "-p", "300", *extra],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 3, result.output
    assert expected in result.output
    assert "Traceback" not in result.output
