"""The qa/L0_perf_analyzer runner (tools/triton_qa_perf.py): its stand-in configs, how it
rewrites the test's command lines, its case list; and, given git dirs of Triton's server and
python_backend repositories ($TRITON_SERVER_GIT, $TRITON_PYTHON_BACKEND_GIT), the validation,
shape and option cases of the test against repokit serve (slow)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from repokit.config.parse import parse_text
from tools import triton_qa_perf as qa_perf


def test_stand_in_configs_parse_with_the_tests_names_and_controls() -> None:
    config = parse_text(
        qa_perf._add_sub_config(
            "graphdef_object_int32_int32", 8, "TYPE_STRING", "TYPE_INT32", "TYPE_INT32", "-1, -1"
        )
    )
    assert config.backend == "python" and config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert list(config.input[0].dims) == [-1, -1]
    sequence = parse_text(
        qa_perf._sequence_config("graphdef_sequence_float32", "TYPE_FP32", "-1", "TYPE_FP32")
    )
    controls = {c.name: c.control[0] for c in sequence.sequence_batching.control_input}
    assert set(controls) == {"START", "READY"}
    assert list(controls["START"].fp32_false_true) == [0.0, 1.0]


def test_windows_are_shortened_except_count_windows() -> None:
    assert qa_perf._short(["-m", "x", "-p2000", "-s", "100"]) == [
        "-m",
        "x",
        "-s",
        "100",
        "-p",
        "500",
    ]
    assert qa_perf._short(["-p", "1000", "-m", "x"]) == ["-m", "x", "-p", "500"]
    counted = ["-m", "x", "--measurement-mode", "count_windows"]
    assert qa_perf._short(counted) == counted


def test_cases_cover_the_test_and_list_what_is_not_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = qa_perf.cases(Path("d"), Path("t"), Path("s"), heavy=False)
    names = [c.name for c in cases]
    assert len(names) == len(set(names)) == 106
    assert qa_perf.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "not applicable: shared memory cuda" in out
    assert "not applicable: MPI" in out


@pytest.mark.slow
def test_validation_shape_and_option_cases_pass_against_repokit(tmp_path: Path) -> None:
    server = os.environ.get("TRITON_SERVER_GIT")
    backend = os.environ.get("TRITON_PYTHON_BACKEND_GIT")
    if not (server and backend):
        pytest.skip("needs $TRITON_SERVER_GIT and $TRITON_PYTHON_BACKEND_GIT (git dirs)")
    json_path = tmp_path / "results.json"
    code = qa_perf.main(
        [
            "--workdir",
            str(tmp_path),
            "--json",
            str(json_path),
            "-k",
            "validation_data",
            "-k",
            "count_windows",
            "-k",
            "optional",
            "-k",
            "unset PROTOCOL",
            "-k",
            "-b 0",
        ]
    )
    results = json.loads(json_path.read_text())["repokit"]
    sys.stdout.write(json.dumps(results, indent=1))
    assert code == 0
    assert len(results) >= 12 and all(results.values())
