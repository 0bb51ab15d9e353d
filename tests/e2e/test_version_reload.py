"""Reloading a model keeps the versions whose files did not change, as Triton 2.51
(qa/L0_lifecycle test_load_new_model_version): only touched and new versions load again, a
change to the model folder's other files reloads them all, and a version_policy change alone
loads nothing. Each load logs "successfully loaded" once, as Triton."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.frontends.http.server_thread import running_server

MODEL = """import pathlib

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        loads = pathlib.Path(args["model_repository"]).parent / "loads.txt"
        with loads.open("a") as out:
            out.write(args["model_version"] + "\\n")
        self.version = float(args["model_version"])

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                + self.version)])
            for r in requests
        ]
"""

CONFIG = """name: "counted"
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]
instance_group [{ kind: KIND_CPU }]
"""


def _policy(folder: Path, versions: str) -> None:
    text = CONFIG + f"version_policy: {{ specific: {{ versions: [{versions}] }} }}\n"
    (folder / "config.pbtxt").write_text(text)


def _newer(path: Path) -> None:
    """A modification time clearly after the load's (as a later edit has)."""
    later = path.stat().st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(later, later))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "counted"
    for version in ("1", "2", "3"):
        (folder / version).mkdir(parents=True)
        (folder / version / "model.py").write_text(MODEL)
    _policy(folder, "1, 2")
    return tmp_path / "models"


def test_a_reload_loads_only_the_versions_that_changed(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = repo / "counted"
    loads = repo / "loads.txt"

    def loaded() -> list[str]:
        return sorted(loads.read_text().split())

    with (
        caplog.at_level(logging.INFO, logger="repokit.core.model_manager"),
        running_server(repo, model_control_mode="explicit", load_models=["*"]) as server,
    ):
        client = httpclient.InferenceServerClient(server.http_url)
        assert loaded() == ["1", "2"]
        # Triton's python stub writes one (a modified version for Triton): it does not count
        (folder / "1" / "__pycache__").mkdir(exist_ok=True)

        _newer(folder / "2" / "model.py")
        shutil.copytree(folder / "3", folder / "4")
        _policy(folder, "1, 2, 3, 4")
        client.load_model("counted")
        assert all(client.is_model_ready("counted", v) for v in ("1", "2", "3", "4"))
        assert loaded() == ["1", "2", "2", "3", "4"]  # version 1 kept as it was

        given = httpclient.InferInput("INPUT0", [1], "FP32")
        given.set_data_from_numpy(np.zeros(1, np.float32))
        answered = client.infer("counted", [given], model_version="1")
        assert answered.as_numpy("OUTPUT0").tolist() == [1.0]  # the kept version serves

        (folder / "dependency.py").write_text("")  # a file every version may import
        client.load_model("counted")
        assert loaded() == ["1", "1", "2", "2", "2", "3", "3", "4", "4"]

        _policy(folder, "4")
        client.load_model("counted")
        assert [client.is_model_ready("counted", v) for v in ("1", "2", "3", "4")] == [
            False, False, False, True,
        ]  # fmt: skip
        assert loaded() == ["1", "1", "2", "2", "2", "3", "3", "4", "4"]
        config = client.get_model_config("counted")
        assert config["version_policy"] == {"specific": {"versions": [4]}}
        client.close()
    assert caplog.text.count("successfully loaded 'counted'") == 4  # once a load
