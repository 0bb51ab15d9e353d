"""`repokit validate --python-auto-complete`: a python model's auto_complete_config runs in a
process of its own, as the python backend runs it at load, and the rules check what it
completes (Triton's qa L0_model_config autofill_noplatform/python cases, with their texts)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from repokit.cli.main import make_app
from tests.config.validate_helpers import make_model

COMPLETES = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
        config.set_max_batch_size(8)
        return config

    def execute(self, requests):
        return []
"""


def _model(root: Path, source: str, config: str = 'backend: "python"\n') -> None:
    make_model(root, config=config, files={"1/model.py": source})


def _validate(root: Path, *flags: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(make_app(), ["validate", str(root), "--format", "json", *flags])
    return result.exit_code, json.loads(result.output)


def _messages(report: dict[str, object]) -> list[str]:
    models = report["models"]
    assert isinstance(models, dict)
    return [d["message"] for d in models["m"]["diagnostics"] if d["severity"] == "error"]


def test_the_config_the_model_completes_is_the_one_checked(tmp_path: Path) -> None:
    _model(tmp_path, COMPLETES)
    code, report = _validate(tmp_path, "--python-auto-complete")
    assert code == 0, report
    models = report["models"]
    assert isinstance(models, dict) and models["m"]["ok"]


def test_what_the_model_gets_wrong_is_refused_with_tritons_text(tmp_path: Path) -> None:
    _model(tmp_path, COMPLETES.replace('"data_type": "TYPE_FP32", "dims": [4]}', '"dims": [4]}', 1))
    code, report = _validate(tmp_path, "--python-auto-complete")
    assert code == 1
    [message] = _messages(report)
    assert message.startswith("failed to load 'm' version 1: ")
    assert "input 'IN' in auto-complete-config function for model 'm' is missing " in message
    assert "'data_type' property." in message


def test_a_config_that_contradicts_the_model_is_refused(tmp_path: Path) -> None:
    config = 'backend: "python"\nmax_batch_size: 16\n'  # more than the model's 8
    _model(tmp_path, COMPLETES, config)
    code, report = _validate(tmp_path, "--python-auto-complete")
    assert code == 1
    assert any(
        "configuration specified max_batch_size 16, but in auto-complete-config function for "
        "model 'm' specified max_batch_size 8" in m
        for m in _messages(report)
    ), report


def test_no_auto_complete_config_leaves_the_config_as_it_is(tmp_path: Path) -> None:
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    make_model(tmp_path, files={"1/model.py": source})  # the helper's config has its IO
    assert _validate(tmp_path, "--python-auto-complete")[0] == 0


def test_a_model_whose_process_dies_says_so(tmp_path: Path) -> None:
    _model(tmp_path, "import os, sys\nsys.stderr.write('bye\\n')\nos._exit(3)\n")
    code, report = _validate(tmp_path, "--python-auto-complete")
    assert code == 1
    assert _messages(report) == [
        "failed to load 'm' version 1: the process running auto_complete_config exited with 3: bye"
    ]


def test_without_the_flag_no_model_code_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    _model(tmp_path, f"open({str(marker)!r}, 'w').close()\n" + COMPLETES)
    _validate(tmp_path)
    assert not marker.exists()
    # nor with --strict (Triton's --disable-auto-complete-config)
    _validate(tmp_path, "--python-auto-complete", "--strict")
    assert not marker.exists()
    _validate(tmp_path, "--python-auto-complete")
    assert marker.exists()


def test_a_model_that_never_returns_is_stopped(tmp_path: Path) -> None:
    from repokit.config.python_auto_complete import run_auto_complete
    from repokit.protocol.generated import model_config_pb2 as mc

    model_file = tmp_path / "m" / "1" / "model.py"
    model_file.parent.mkdir(parents=True)
    model_file.write_text("import time\ntime.sleep(60)\n")
    completed = run_auto_complete(model_file, mc.ModelConfig(name="m"), 1, timeout_s=1.0)
    assert (completed.config, completed.error) == (
        None,
        "auto_complete_config did not return in 1 s",
    )
