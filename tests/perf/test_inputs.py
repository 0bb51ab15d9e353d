"""Input data: shapes, synthetic data, directories and perf_analyzer's JSON format, with the
errors bad files give (file and JSON path named, exit 3); option validation."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repokit.perf.errors import PerfError
from repokit.perf.input_json import json_dataset
from repokit.perf.inputs import directory_dataset, synthetic_dataset
from repokit.perf.model_info import TensorSpec, build_model_info, check_batch_size
from repokit.perf.options import (
    PerfOptions,
    parse_concurrency_range,
    parse_rate_range,
    parse_shape,
    validate_options,
)
from tests.perf.fakes import ADD_SUB_CONFIG, ADD_SUB_METADATA

IDENTITY_METADATA = {
    "name": "identity",
    "versions": ["1"],
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}],
}
STRINGS_METADATA = {
    "name": "strings",
    "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2]}],
    "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [1]}],
}


def add_sub() -> Any:
    return build_model_info("add_sub", "", ADD_SUB_METADATA, ADD_SUB_CONFIG)


def identity() -> Any:
    return build_model_info("identity", "", IDENTITY_METADATA, {"max_batch_size": 0})


def _option_error(excinfo: pytest.ExceptionInfo[PerfError]) -> str:
    assert excinfo.value.exit_code == 3
    return excinfo.value.message


def test_model_info_strips_the_batch_dim() -> None:
    info = add_sub()
    assert info.max_batch_size == 8 and info.version == "1"
    assert info.inputs[0] == TensorSpec("INPUT0", "FP32", (16,))
    with pytest.raises(PerfError) as e:
        check_batch_size(info, 9)
    assert "exceeds max_batch_size 8" in _option_error(e)
    with pytest.raises(PerfError) as e:
        check_batch_size(identity(), 2)
    assert "does not support batching" in _option_error(e)


def test_random_and_zero_data() -> None:
    data = synthetic_dataset(add_sub(), "random", {}, string_length=4, string_data=None, seed=1)
    x = data.streams[0][0].tensors["INPUT0"]
    assert x.shape == (16,) and x.dtype == np.float32 and x.min() >= 0 and x.max() < 1
    zero = synthetic_dataset(add_sub(), "zero", {}, string_length=4, string_data=None, seed=1)
    assert not zero.streams[0][0].tensors["INPUT1"].any()
    strings = build_model_info("strings", "", STRINGS_METADATA, None)
    s = synthetic_dataset(strings, "random", {}, string_length=5, string_data=None, seed=1)
    assert [len(v) for v in s.streams[0][0].tensors["TEXT"]] == [5, 5]
    fixed = synthetic_dataset(strings, "random", {}, string_length=5, string_data="hi", seed=1)
    assert fixed.streams[0][0].tensors["TEXT"].tolist() == [b"hi", b"hi"]


def test_variable_dims_need_shape() -> None:
    with pytest.raises(PerfError) as e:
        synthetic_dataset(identity(), "random", {}, string_length=1, string_data=None, seed=0)
    assert "--shape INPUT0:" in _option_error(e)
    data = synthetic_dataset(
        identity(), "zero", {"INPUT0": [5]}, string_length=1, string_data=None, seed=0
    )
    assert data.streams[0][0].tensors["INPUT0"].shape == (5,)
    with pytest.raises(PerfError) as e:
        synthetic_dataset(
            add_sub(), "zero", {"INPUT0": [15]}, string_length=1, string_data=None, seed=0
        )
    assert "conflicts with the model's fixed dims [16]" in _option_error(e)


def test_directory_data(tmp_path: Path) -> None:
    values = np.arange(16, dtype=np.float32)
    (tmp_path / "INPUT0").write_bytes(values.tobytes())
    with pytest.raises(PerfError) as e:
        directory_dataset(add_sub(), tmp_path, {})
    assert f"no file for input 'INPUT1' (expected {tmp_path / 'INPUT1'})" in _option_error(e)
    (tmp_path / "INPUT1").write_bytes(values[:15].tobytes())
    with pytest.raises(PerfError) as e:
        directory_dataset(add_sub(), tmp_path, {})
    message = _option_error(e)
    assert str(tmp_path / "INPUT1") in message and "Expected 64, got 60" in message
    (tmp_path / "INPUT1").write_bytes(values.tobytes())
    data = directory_dataset(add_sub(), tmp_path, {})
    assert np.array_equal(data.streams[0][0].tensors["INPUT1"], values)


def _write(tmp_path: Path, document: Any, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_json_data_values_b64_content_and_validation(tmp_path: Path) -> None:
    a = list(range(16))
    b64 = base64.b64encode(np.ones(16, dtype=np.float32).tobytes()).decode()
    path = _write(
        tmp_path,
        {
            "data": [
                {"INPUT0": a, "INPUT1": {"b64": b64}},
                {"INPUT0": {"content": [a[:8], a[8:]], "shape": [16]}, "INPUT1": a},
            ],
            "validation_data": [{"OUTPUT0": [x + 1 for x in a]}, {"OUTPUT1": [0] * 16}],
        },
    )
    data = json_dataset([path], add_sub(), {})
    first, second = data.streams[0]
    assert np.array_equal(first.tensors["INPUT0"], np.arange(16, dtype=np.float32))
    assert np.array_equal(first.tensors["INPUT1"], np.ones(16, dtype=np.float32))
    assert np.array_equal(second.tensors["INPUT0"], first.tensors["INPUT0"])
    assert first.expected is not None and first.expected["OUTPUT0"][0] == 1
    assert not data.stream_lengths_from_data


def test_json_sequences_are_streams(tmp_path: Path) -> None:
    path = _write(tmp_path, {"data": [[{"INPUT0": [1]}, {"INPUT0": [2]}], [{"INPUT0": [3]}]]})
    info = build_model_info(
        "acc",
        "",
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 1]}]},
        {"max_batch_size": 4, "sequence_batching": {}},
    )
    data = json_dataset([path], info, {})
    assert data.stream_lengths_from_data
    assert [len(s) for s in data.streams] == [2, 1]
    assert data.streams[0][1].tensors["INPUT0"].tolist() == [2]


def test_variable_dim_inferred_from_json_element_count(tmp_path: Path) -> None:
    path = _write(tmp_path, {"data": [{"INPUT0": [1.0, 2.0, 3.0]}]})
    data = json_dataset([path], identity(), {})
    assert data.streams[0][0].tensors["INPUT0"].shape == (3,)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("{not json", "data.json:1:2: not valid JSON"),
        ({"rows": []}, "data.json: $: 'data' is a required property"),
        ({"data": {}}, "data.json: $.data: {} is not of type 'array'"),
        ({"data": [{"INPUT0": {"b64": 5}}]}, "data.json: $.data[0].INPUT0"),
        ({"data": [{"INPUT0": {"content": [1], "dims": [1]}}]}, "data.json: $.data[0].INPUT0"),
        (
            {"data": [{"INPUT0": [1] * 16, "INPUTX": [1]}]},
            "data.json: $.data[0]: unknown input 'INPUTX'; model 'add_sub' has inputs "
            "INPUT0, INPUT1",
        ),
        ({"data": [{"INPUT0": [1] * 16}]}, "data.json: $.data[0]: input 'INPUT1' is missing"),
        (
            {"data": [{"INPUT0": [1] * 15, "INPUT1": [1] * 16}]},
            "data.json: $.data[0].INPUT0: Unable to parse 'data': Shape does not match true shape",
        ),
        (
            {"data": [{"INPUT0": ["a"] * 16, "INPUT1": [1] * 16}]},
            "data.json: $.data[0].INPUT0: Unable to parse 'data': attempt to access JSON "
            "non-number as double",
        ),
        (
            {"data": [{"INPUT0": {"b64": "!!"}, "INPUT1": [1] * 16}]},
            "data.json: $.data[0].INPUT0.b64: not valid base64",
        ),
        (
            {"data": [{"INPUT0": [1] * 16, "INPUT1": [1] * 16}], "validation_data": []},
            "data.json: $.validation_data: [] should be non-empty",
        ),
        (
            {
                "data": [{"INPUT0": [1] * 16, "INPUT1": [1] * 16}],
                "validation_data": [{"OUT9": [1]}],
            },
            "data.json: $.validation_data[0]: unknown output 'OUT9'",
        ),
    ],
)
def test_bad_json_files_name_the_file_and_path(
    tmp_path: Path, document: Any, expected: str
) -> None:
    path = _write(tmp_path, document)
    with pytest.raises(PerfError) as e:
        json_dataset([path], add_sub(), {})
    message = _option_error(e)
    assert expected in message
    assert str(path) in message


def test_missing_json_file(tmp_path: Path) -> None:
    with pytest.raises(PerfError) as e:
        json_dataset([tmp_path / "nope.json"], add_sub(), {})
    assert "does not exist" in _option_error(e)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"protocol": "udp"}, "-i must be one of http, grpc"),
        ({"batch_size": 0}, "-b (batch size) must be at least 1"),
        ({"concurrency_range": parse_concurrency_range("4:2")}, "end 2 is below start 4"),
        ({"concurrency_range": parse_concurrency_range("1:0")}, "needs --latency-threshold"),
        ({"request_rate_range": parse_rate_range("0")}, "needs start > 0"),
        (
            {
                "request_rate_range": parse_rate_range("10"),
                "concurrency_range": parse_concurrency_range("1"),
            },
            "are exclusive",
        ),
        ({"streaming": True}, "--streaming is only available with -i grpc"),
        ({"measurement_mode": "windows"}, "--measurement-mode must be one of"),
        ({"percentile": 100}, "--percentile must be between 1 and 99"),
        ({"shared_memory": "cuda"}, "--shared-memory must be one of none, system"),
        ({"sequence_id_range": (5, 2)}, "--sequence-id-range must be 1 <= start <= end"),
        ({"request_intervals": Path("/nonexistent/intervals")}, "does not exist"),
    ],
)
def test_bad_options(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(PerfError) as e:
        validate_options(PerfOptions(model="add_sub", **change))
    assert expected in _option_error(e)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_concurrency_range, "1:x", "takes integers"),
        (parse_concurrency_range, "1::2", "must be <start>[:<end>[:<step>]]"),
        (parse_rate_range, "a", "takes numbers"),
        (parse_shape, "INPUT0", "--shape must be <input name>:<d1>,<d2>"),
        (parse_shape, "INPUT0:2,x", "dims must be integers"),
    ],
)
def test_bad_option_strings(parse: Any, text: str, expected: str) -> None:
    with pytest.raises(PerfError) as e:
        parse(text)
    assert expected in _option_error(e)


def test_ranges() -> None:
    assert parse_concurrency_range("2:8:3").levels() == [2, 5, 8]
    assert parse_concurrency_range("4").levels() == [4]
    assert parse_rate_range("100:300:100").levels() == [100, 200, 300]
    assert parse_shape("IN:1,2") == ("IN", [1, 2])
