"""With ``--exit-on-error false`` a start whose models failed logs tritonserver 2.51's one error
after the options table and serves on: ``Internal: failed to load all models`` (modes none
and poll), ``Invalid argument: `` and each failed ``--load-model``'s load error (explicit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repokit.cli.startup_status import model_load_error, startup_error
from tests.cli.serve_process import PORT_FLAGS, ServeProcess

INDEX = [
    {"name": "good", "version": "1", "state": "READY", "reason": ""},
    {"name": "gone", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
    {"name": "bad", "version": "1", "state": "UNAVAILABLE", "reason": "Internal: r1"},
    {"name": "bad", "version": "2", "state": "UNAVAILABLE", "reason": "Internal: r2"},
    {"name": "poll", "state": "UNAVAILABLE", "reason": "no config"},
]


def test_no_failure_no_error() -> None:
    assert startup_error("explicit", INDEX[:2]) == ""
    assert startup_error("poll", []) == ""


def test_none_and_poll_mode_say_that_not_all_models_loaded() -> None:
    assert startup_error("poll", INDEX) == "Internal: failed to load all models"
    assert startup_error("none", INDEX) == "Internal: failed to load all models"


def test_explicit_mode_joins_each_model_s_load_error() -> None:
    assert startup_error("explicit", INDEX) == (
        "Invalid argument: load failed for model 'bad': version 1 is at UNAVAILABLE state: "
        "Internal: r1;version 2 is at UNAVAILABLE state: Internal: r2;\n"
        "load failed for model 'poll': no config\n"
    )
    assert model_load_error("poll", INDEX) == "load failed for model 'poll': no config"


CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] label_filename: "labels.txt" } ]
"""


@pytest.mark.parametrize("mode", ["explicit", "poll"])
def test_a_start_with_failed_models_logs_triton_s_error_and_serves(
    tmp_path: Path, mode: str
) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (tmp_path / "m" / "config.pbtxt").write_text(CONFIG)
    flags = ["--model-control-mode", mode, "--exit-on-error", "false"]
    if mode == "explicit":
        flags += ["--load-model", "m"]
    server = ServeProcess(str(tmp_path), *PORT_FLAGS, *flags)  # returns once it serves
    try:
        lines = server.text.splitlines()
    finally:
        server.kill()
    errors = [line for line in lines if line.startswith("E")]
    reason = (
        f"Internal: failed to open text file for read {tmp_path / 'm'}/labels.txt: "
        "No such file or directory"
    )
    expected = (
        "Internal: failed to load all models"
        if mode == "poll"
        else "Invalid argument: load failed for model 'm': version 1 is at UNAVAILABLE state: "
        f"{reason};\n"
    )
    assert errors[-1].endswith(f"] {json.dumps(expected)}"), errors
    options = next(i for i, line in enumerate(lines) if "| Option" in line)
    started = next(i for i, line in enumerate(lines) if "Started HTTPService" in line)
    assert options < lines.index(errors[-1]) < started
