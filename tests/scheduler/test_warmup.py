"""Warmup samples: data kinds, sizes, files, skipped samples, errors and running them."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import pytest

from repokit.errors import Code, ConfigError, RepokitError
from repokit.scheduler.warmup import build_warmup_samples, run_warmup
from tests.scheduler.helpers import RecordingBackend, config

MODEL = """
name: "w" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
%s
"""


def warmup(body: str) -> str:
    return MODEL % f"model_warmup [ {body} ]"


def test_zero_random_and_skipped_samples(tmp_path: Path) -> None:
    cfg = config(
        warmup(
            """
            { name: "zeros" batch_size: 3 count: 2
              inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
              inputs { key: "INPUT1" value {
                data_type: TYPE_STRING dims: [ 2 ] random_data: true } }
              inputs { key: "START" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } },
            { name: "skipped" batch_size: 0 },
            { name: "random" batch_size: 1
              inputs { key: "INPUT0" value {
                data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } }
            """
        )
    )
    samples = build_warmup_samples(cfg, tmp_path)
    assert [(s.name, len(s.requests), s.count) for s in samples] == [
        ("zeros", 3, 2),
        ("random", 1, 1),
    ]
    zeros = samples[0].requests[0].inputs
    assert zeros["INPUT0"].shape == (1, 4) and not zeros["INPUT0"].data.any()
    assert zeros["INPUT1"].data.tolist() == [[b"", b""]]  # STRING random falls back to zeros
    assert zeros["START"].shape == (1,)  # not a model input: no batch dimension added
    rand = samples[1].requests[0].inputs["INPUT0"]
    assert rand.data.dtype == np.float32 and rand.data.nbytes == 16


def test_input_data_files(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "floats").write_bytes(np.arange(5, dtype=np.float32).tobytes())
    strings = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"xyz"))
    (tmp_path / "warmup" / "strings").write_bytes(strings)
    cfg = config(
        warmup(
            """{ name: "file" batch_size: 1
              inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "floats" } }
              inputs { key: "INPUT1" value { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "strings" } } }"""  # noqa: E501
        )
    )
    inputs = build_warmup_samples(cfg, tmp_path)[0].requests[0].inputs
    assert inputs["INPUT0"].data.tolist() == [[0, 1, 2, 3]]
    assert inputs["INPUT1"].data.tolist() == [[b"ab", b"xyz"]]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{ name: "v" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ -1 ] zero_data: true } } }',  # noqa: E501
            "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
        ),
        (
            '{ name: "k" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] } } }',  # noqa: E501
            "warmup setting expects input 'INPUT0' to have input_data_type set",
        ),
        (
            '{ name: "s" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "short" } } }',  # noqa: E501
            "warmup setting expects 16 bytes, but the data provided from shortonly has 8 bytes",
        ),
    ],
)
def test_bad_samples_fail_with_tritons_messages(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "short").write_bytes(b"\0" * 8)
    with pytest.raises(ConfigError) as err:
        build_warmup_samples(config(warmup(body)), tmp_path)
    assert err.value.message == message


def test_missing_file_says_which(tmp_path: Path) -> None:
    body = '{ name: "m" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "gone" } } }'  # noqa: E501
    with pytest.raises(ConfigError) as err:
        build_warmup_samples(config(warmup(body)), tmp_path)
    assert "gone" in err.value.message


async def test_run_warmup_executes_count_times_and_reports_failures(tmp_path: Path) -> None:
    body = '{ name: "zero sample" batch_size: 2 count: 3 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }'  # noqa: E501
    samples = build_warmup_samples(config(warmup(body)), tmp_path)
    backend = RecordingBackend(instances=2)
    await run_warmup(backend, 1, samples)
    assert [(i, len(reqs)) for i, reqs in backend.batches] == [(1, 2)] * 3
    backend.fail_with = "An Error Occurred"
    with pytest.raises(RepokitError) as err:
        await run_warmup(backend, 0, samples)
    assert err.value.code is Code.INVALID_ARG
    assert err.value.message == (
        "failed to run warmup sample 'zero sample': An Error Occurred; An Error Occurred; "
    )


async def test_each_run_is_logged_at_verbose_level_as_triton_logs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = '{ name: "zero sample" batch_size: 1 count: 2 inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }'  # noqa: E501
    samples = build_warmup_samples(config(warmup(body)), tmp_path)
    with caplog.at_level(logging.DEBUG, logger="repokit.scheduler.warmup"):
        await run_warmup(RecordingBackend(instances=1), 0, samples, "w", "w_0_0")
    assert [r.getMessage() for r in caplog.records] == [
        "model 'w' instance w_0_0 is running warmup sample 'zero sample' for iteration 1",
        "model 'w' instance w_0_0 is running warmup sample 'zero sample' for iteration 2",
    ]
