"""perf_analyzer's command lines as Triton's qa/L0_perf_analyzer runs them: deprecated -t/-c/-d/-z,
--sync, --serial-sequences, --request-count, --request-parameter, --trace-* options, and the
input-data checks in perf_analyzer's words (validation_data alignment and sizes, shapes that do
not fit --shape, optional inputs with -b 2). Unit checks, the virtual-time profiler, and the CLI
against a real repokit server on port 0."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.core.tracing.options import TraceStartup
from repokit.perf.errors import PerfError
from repokit.perf.input_json import check_batchable, json_dataset
from repokit.perf.load import worker_shares
from repokit.perf.model_info import ModelInfo, TensorSpec
from repokit.perf.options import (
    ConcurrencyRange,
    PerfOptions,
    RateRange,
    deprecated_concurrency,
    parse_request_parameter,
    validate_options,
)
from repokit.perf.profiler import run_perf_blocking
from repokit.perf.setup import output_region_sizes
from repokit.perf.transports.base import TransportOptions
from repokit.perf.transports.grpc import BlockingGrpcConnection, GrpcTransport
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server
from tests.perf.fakes import FakeTransport
from tests.perf.test_profiler import _options, _run


def _info(**kwargs: Any) -> ModelInfo:
    values: dict[str, Any] = {
        "name": "m",
        "version": "1",
        "max_batch_size": 8,
        "inputs": [TensorSpec("INPUT0", "INT32", (16,)), TensorSpec("INPUT1", "INT32", (16,))],
        "outputs": [TensorSpec("OUTPUT0", "INT32", (16,))],
    }
    values.update(kwargs)
    return ModelInfo(**values)


def _json(tmp_path: Path, document: Any) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return path


def _error(call: Any) -> PerfError:
    with pytest.raises(PerfError) as caught:
        call()
    assert caught.value.exit_code == 3
    return caught.value


def test_deprecated_concurrency_options() -> None:
    assert deprecated_concurrency(None, None, None, False) is None
    assert deprecated_concurrency("1:5:2", None, None, False) == ConcurrencyRange(1, 5, 2)
    assert deprecated_concurrency(None, 5, None, False) == ConcurrencyRange(5, 5, 1)
    assert deprecated_concurrency(None, 2, 6, True) == ConcurrencyRange(2, 6, 1)
    assert deprecated_concurrency(None, None, None, True) == ConcurrencyRange(1, 0, 1)
    message = _error(lambda: deprecated_concurrency("1:4", 2, None, False)).message
    assert "Cannot use deprecated options" in message
    assert "at least 1" in _error(lambda: deprecated_concurrency(None, 0, None, False)).message


def test_request_parameters_parse_and_reach_the_grpc_request() -> None:
    assert parse_request_parameter("max_tokens:256:int") == ("max_tokens", ("256", "int"))
    assert "<name>:<value>:<type>" in _error(lambda: parse_request_parameter("a:b")).message
    assert "string, int or bool" in _error(lambda: parse_request_parameter("a:b:float")).message
    assert "not an int" in _error(lambda: parse_request_parameter("a:b:int")).message
    assert "not true or false" in _error(lambda: parse_request_parameter("a:yes:bool")).message
    parameters = {"n": ("3", "int"), "flag": ("True", "bool"), "tag": ("x", "string")}
    transport = GrpcTransport(
        TransportOptions("grpc", "localhost:1", request_parameters=parameters), lambda: 0
    )
    prepared = transport.prepare("m", "", {"IN": ("INT32", np.ones((1, 1), np.int32))}, [])
    sent = prepared.message.parameters
    assert sent["n"].int64_param == 3
    assert sent["flag"].bool_param is True
    assert sent["tag"].string_param == "x"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"async_mode": True, "forced_sync": True}, "Cannot specify --async and --sync"),
        ({"request_parameters": {"a": ("1", "int")}}, "only supported with -i grpc"),
        ({"trace_settings": {"trace_level": "ALL"}}, "--trace-level must be one of"),
        (
            {"request_count": 2, "concurrency_range": ConcurrencyRange(4, 4, 1)},
            "can not be less than the concurrency",
        ),
        (
            {"request_count": 10, "concurrency_range": ConcurrencyRange(1, 4, 1)},
            "single concurrency",
        ),
        ({"request_count": 10, "request_rate_range": RateRange(5, 20, 5)}, "single request rate"),
        ({"request_count": -1}, "must not be negative"),
    ],
)
def test_invalid_combinations_exit_3(change: dict[str, Any], expected: str) -> None:
    options = PerfOptions(model="m", **change)
    assert expected in _error(lambda: validate_options(options)).message


def test_validation_data_must_align_with_data(tmp_path: Path) -> None:
    row = {"INPUT0": [1] * 16, "INPUT1": [1] * 16}
    path = _json(tmp_path, {"data": [row, row], "validation_data": [{"OUTPUT0": [0] * 16}]})
    message = _error(lambda: json_dataset([path], _info(), {})).message
    assert "The 'validation_data' field doesn't align with 'data' field in the json file" in message
    assert "$.validation_data has 1 entries but $.data has 2" in message
    steps = {"data": [[row, row]], "validation_data": [[{"OUTPUT0": [0] * 16}]]}
    message = _error(lambda: json_dataset([_json(tmp_path, steps)], _info(), {})).message
    assert "doesn't align" in message and "$.validation_data[0]" in message


def test_validation_data_of_the_wrong_size_names_the_bytes(tmp_path: Path) -> None:
    row = {"INPUT0": [1] * 16, "INPUT1": [1] * 16}
    path = _json(tmp_path, {"data": [row], "validation_data": [{"OUTPUT0": [0] * 10}]})
    message = _error(lambda: json_dataset([path], _info(), {})).message
    assert "mismatch in the data provided for OUTPUT0. Expected: 64 bytes, Got: 40 bytes" in message


def test_supplied_shapes_must_fit_the_shape_option(tmp_path: Path) -> None:
    info = _info(
        inputs=[TensorSpec("INPUT0", "INT32", (-1, -1, -1)), TensorSpec("INPUT1", "INT32", (-1,))]
    )
    entry = {
        "INPUT0": {"content": [1] * 32, "shape": [1, 8, 4]},
        "INPUT1": {"content": [1, 2], "shape": [2]},
    }
    path = _json(tmp_path, {"data": [entry]})
    message = _error(lambda: json_dataset([path], info, {"INPUT0": [2, 8, 2]})).message
    assert (
        'The supplied shape of [1,8,4] for input "INPUT0" is incompatible with the model\'s '
        "input shape of [2,8,2]"
    ) in message
    # without --shape the variable dims take any size; a wrong rank never fits
    assert json_dataset([path], info, {}).streams[0][0].tensors["INPUT0"].shape == (1, 8, 4)
    entry["INPUT1"] = {"content": [1, 2], "shape": [1, 2]}
    message = _error(lambda: json_dataset([_json(tmp_path, {"data": [entry]})], info, {})).message
    assert 'The supplied shape of [1,2] for input "INPUT1"' in message


def test_optional_inputs_may_be_left_out_but_not_batched_unevenly(tmp_path: Path) -> None:
    info = _info(optional_inputs=frozenset({"INPUT0", "INPUT1"}), max_batch_size=2)
    info.inputs = [TensorSpec("INPUT0", "INT32", (1,)), TensorSpec("INPUT1", "INT32", (1,))]
    path = _json(tmp_path, {"data": [{"INPUT0": [1]}, {"INPUT1": [1]}]})
    dataset = json_dataset([path], info, {})
    assert [set(s.tensors) for s in dataset.streams[0]] == [{"INPUT0"}, {"INPUT1"}]
    check_batchable(dataset.streams, 1)
    message = _error(lambda: check_batchable(dataset.streams, 2)).message
    assert message.startswith("For batch sizes larger than 1, the same set of inputs")
    required = _info()
    path = _json(tmp_path, {"data": [{"INPUT0": [1] * 16}]})
    message = _error(lambda: json_dataset([path], required, {})).message
    assert "input 'INPUT1' is missing" in message


@pytest.mark.parametrize(
    "load",
    [
        {"concurrency_range": ConcurrencyRange(3, 3, 1)},
        {"concurrency_range": ConcurrencyRange(7, 7, 1), "warmup_request_count": 5},
        {"request_rate_range": RateRange(20, 20, 1)},
    ],
    ids=["concurrency", "concurrency_after_warmup", "request_rate"],
)
def test_request_count_sends_exactly_that_many_requests(load: dict[str, Any]) -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.001)
    options = _options(
        request_count=40,
        measurement_mode="count_windows",
        measurement_request_count=40,
        max_trials=1,
        count_window_poll_s=0.0001,  # the window would close long after the 40 answered
        stability_percentage=0.0001,
        **load,
    )
    report = _run(options, transport)
    assert report.exit_code == 0
    [result] = report.results
    assert result.stable and len(result.windows) == 1
    assert result.windows[0].request_count == 40
    assert result.windows[0].sent_count == 40
    assert len(transport.sent) == 40 + options.warmup_request_count


def test_request_count_is_dealt_over_the_workers() -> None:
    assert worker_shares(10, 4) == [3, 3, 2, 2]
    assert worker_shares(4, 4) == [1, 1, 1, 1]
    assert worker_shares(None, 2) == [None, None]


def test_request_rate_on_a_sequence_model_keeps_num_of_sequences_going() -> None:
    transport = FakeTransport(latency=lambda now, inflight: 0.05)
    transport.config = {"name": "add_sub", "max_batch_size": 8, "sequence_batching": {}}
    options = _options(
        request_rate_range=RateRange(100, 100, 1),
        num_of_sequences=3,
        sequence_length=4,
        sequence_length_variation=0,
        stability_percentage=1000.0,
    )
    report = _run(options, transport)
    assert report.exit_code == 0
    assert transport.connections == 3  # not --max-threads (16): one per sequence
    open_ids: set[int] = set()
    most = 0
    for _, flags in transport.sent:
        assert flags is not None
        if flags.start:
            open_ids.add(flags.sequence_id)
        most = max(most, len(open_ids))
        if flags.end:
            open_ids.discard(flags.sequence_id)
    assert most <= 3


BLS_MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="add_sub",
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
        return responses
"""


def _bls_model(repo: Path) -> None:
    """bls_add_sub: add_sub's config, answered by calling add_sub over BLS."""
    (repo / "bls_add_sub" / "1").mkdir(parents=True)
    config = (repo / "add_sub" / "config.pbtxt").read_text()
    config = config.replace('name: "add_sub"', 'name: "bls_add_sub"')
    (repo / "bls_add_sub" / "config.pbtxt").write_text(config)
    (repo / "bls_add_sub" / "1" / "model.py").write_text(BLS_MODEL)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("repo"), ("add_sub",))
    _bls_model(repo)
    trace_file = tmp_path_factory.mktemp("trace") / "trace.json"
    trace = TraceStartup(file=str(trace_file))
    with running_server(repo, allow_grpc=True, allow_client_shm=True, trace=trace) as srv:
        yield srv


def _perf(server: ServerThread, *args: str) -> Any:
    return CliRunner().invoke(
        make_app(),
        ["perf", "-m", "add_sub", "-u", server.http_url, "-p", "200", "-s", "1000", *args],
        env={"COLUMNS": "300"},
    )


def test_cli_takes_perf_analyzers_deprecated_and_newer_options(server: ServerThread) -> None:
    result = _perf(server, "-v", "-t", "2", "--sync", "--serial-sequences", "-z")
    assert result.exit_code == 0, result.output
    assert "Request concurrency: 2" in result.output
    assert "concurrency 2:" in result.output
    result = _perf(server, "-d", "-t", "1", "-c", "2")
    assert result.exit_code == 0, result.output
    assert "concurrency 1:" in result.output and "concurrency 2:" in result.output
    result = _perf(server, "--service-kind", "triton", "--request-count", "30")
    assert result.exit_code == 0, result.output
    assert "(stable, 1 windows)" in result.output


def _success_count(server: ServerThread, model: str) -> int:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=30) as answer:
        stats = json.loads(answer.read())
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency-range", "3"],  # sync: a thread per concurrent request
        ["--concurrency-range", "4", "-a"],
        ["--concurrency-range", "2", "-i", "grpc"],
        ["--request-rate-range", "20"],
    ],
    ids=["sync", "async", "grpc", "request_rate"],
)
def test_cli_request_count_reaches_the_server_exactly(
    server: ServerThread, args: list[str]
) -> None:
    url = server.grpc_url if "grpc" in args else server.http_url
    before = _success_count(server, "add_sub")
    result = CliRunner().invoke(
        make_app(),
        ["perf", "-m", "add_sub", "-u", url, "--request-count", "23", *args],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.output
    assert _success_count(server, "add_sub") - before == 23


def test_version() -> None:
    result = CliRunner().invoke(make_app(), ["perf", "--version"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("repokit ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-t", "2", "--concurrency-range", "1:2"], "Cannot use deprecated options"),
        (["-a", "--sync"], "Cannot specify --async and --sync"),
        (["-z", "--input-data", "random"], "-z cannot be combined"),
        (["--request-parameter", "a:1:int"], "only supported with -i grpc"),
        (["--trace-level", "LOUD"], "--trace-level must be one of"),
        (["--grpc-compression-algorithm", "gzip"], "only allowed with -i grpc"),
        (["--service-kind", "torchserve"], "--service-kind torchserve is not supported"),
        # qa's '-i $PROTOCOL -m MODEL' with PROTOCOL unset leaves MODEL as a stray word
        (["-i", "-m", "add_sub"], "No such command 'add_sub'"),
        (["--grpc-compression-algorithm", "zstd"], "must be one of none, gzip, deflate"),
        (["--shape", "INPUT0:1,16"], "unexpected shape for input 'INPUT0' for model 'add_sub'"),
    ],
)
def test_cli_refuses_bad_combinations_with_exit_3(
    server: ServerThread, args: list[str], expected: str
) -> None:
    result = _perf(server, *args)
    assert result.exit_code == 3, result.output
    assert expected in result.output
    assert "Traceback" not in result.output


def test_output_regions_hold_fixed_size_outputs_for_the_batch() -> None:
    info = _info(
        outputs=[
            TensorSpec("FIXED", "FP32", (1001,)),
            TensorSpec("VARIABLE", "FP32", (-1,)),
            TensorSpec("TEXT", "BYTES", (4,)),
        ]
    )
    options = PerfOptions(model="m", batch_size=64, output_shared_memory_size=100)
    assert output_region_sizes(info, options) == {
        "FIXED": 64 * 1001 * 4,  # inception's 64 x 1001 scores: more than the 100 KiB default
        "VARIABLE": 64 * 100,
        "TEXT": 64 * 100,
    }


def test_system_shm_outputs_larger_than_output_shared_memory_size(server: ServerThread) -> None:
    # add_sub's outputs are 16 FP32 (64 bytes) each, 512 for -b 8: the regions are sized from
    # the model, as perf_analyzer sizes them, not from --output-shared-memory-size
    result = _perf(
        server, "--shared-memory", "system", "--output-shared-memory-size", "16", "-b", "8"
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("mode", [[], ["-a"]], ids=["sync", "async"])
def test_grpc_compression_algorithm(server: ServerThread, algorithm: str, mode: list[str]) -> None:
    result = CliRunner().invoke(
        make_app(),
        [
            "perf",
            "-m",
            "add_sub",
            "-u",
            server.grpc_url,
            "-i",
            "grpc",
            "-p",
            "200",
            "-s",
            "1000",
            "--grpc-compression-algorithm",
            algorithm,
            *mode,
        ],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.output
    assert "concurrency 1:" in result.output
    # compressed requests take the grpc library's channels, not the own HTTP/2 client
    transport = GrpcTransport(
        TransportOptions("grpc", server.grpc_url, compression=algorithm), lambda: 0
    )
    connection = transport.connect_blocking()
    assert isinstance(connection, BlockingGrpcConnection)
    connection.close()
    for channel in transport._sync_channels:
        channel.close()


def test_bls_composing_models_are_listed_under_the_bls_model(server: ServerThread) -> None:
    options = PerfOptions(
        model="bls_add_sub",
        url=server.http_url,
        measurement_interval_ms=200.0,
        stability_percentage=1000.0,
        max_trials=12,
        bls_composing_models=["add_sub"],
    )
    report = run_perf_blocking(options)
    assert report.exit_code == 0
    assert report.composing_models == ["add_sub"]
    [result] = report.results
    assert result.server is not None
    composing = result.server.composing["add_sub"]
    # every BLS request made one add_sub call; the BLS model keeps its own compute time,
    # which holds the call (an ensemble's would be replaced by its steps' sums)
    # (the statistics are read while the load runs: a call may be counted before its request)
    assert result.server.success_count > 0
    assert abs(composing.success_count - result.server.success_count) <= 2
    assert result.server.compute_infer_ns >= composing.compute_infer_ns
    bad = _perf(server, "--bls-composing-models", "add_sub,nope")
    assert bad.exit_code == 3, bad.output
    assert "--bls-composing-models names 'nope', which the server does not have" in bad.output


def test_trace_options_update_the_servers_trace_settings(server: ServerThread) -> None:
    for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
        count = "7" if protocol == "http" else "9"
        result = CliRunner().invoke(
            make_app(),
            [
                "perf",
                "-m",
                "add_sub",
                "-u",
                url,
                "-i",
                protocol,
                "-p",
                "200",
                "-s",
                "1000",
                "--trace-level",
                "TIMESTAMPS",
                "--trace-rate",
                "1000",
                "--trace-count",
                count,
                "--log-frequency",
                "10",
            ],
        )
        assert result.exit_code == 0, result.output
        with urllib.request.urlopen(f"http://{server.http_url}/v2/trace/setting") as response:
            settings = json.loads(response.read())
        assert settings["trace_level"] == ["TIMESTAMPS"]
        assert settings["trace_rate"] == "1000"
        assert settings["log_frequency"] == "10"
        assert int(settings["trace_count"]) <= int(count)  # counts down as requests are traced


def test_trace_options_a_server_refuses_exit_99(tmp_path: Path) -> None:
    repo = copy_models(tmp_path, ("add_sub",))
    with running_server(repo) as srv:  # no trace file: Triton refuses trace settings too
        result = CliRunner().invoke(
            make_app(),
            ["perf", "-m", "add_sub", "-u", srv.http_url, "--trace-level", "TIMESTAMPS"],
        )
    assert result.exit_code == 99, result.output
    assert "failed to update the server's trace settings: " in result.output
    assert "trace file name is not given" in result.output
