"""A load's JSON config override may give one value where the config has a repeated field:
Triton 2.51 (protobuf's C++ JSON parser) takes it as a list of that value, and
qa/L0_lifecycle's test_concurrent_model_instance_load_sanity loads
``{"instance_group": {"kind": ..., "count": 5}}`` (checked against Triton 2.51: an override
with ``"input": {...}``, ``"dims": 1`` and ``"instance_group": {...}`` loads there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import running_server

MODEL = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "single"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    (folder / "config.pbtxt").write_text('backend: "python"\n')
    return tmp_path / "models"


def test_one_value_for_a_repeated_field_is_a_list_of_it(repo: Path) -> None:
    override = {
        "backend": "python",
        "max_batch_size": 0,
        "input": {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": 1},
        "output": {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": 1},
        "instance_group": {"kind": "KIND_CPU", "count": 2},
    }
    with running_server(repo, model_control_mode="explicit") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        client.load_model("single", config=json.dumps(override))
        config = client.get_model_config("single")
        assert [(i["name"], i["dims"]) for i in config["input"]] == [("INPUT0", [1])]
        assert [(g["kind"], g["count"]) for g in config["instance_group"]] == [("KIND_CPU", 2)]
        with pytest.raises(InferenceServerException, match="instance_group"):
            bad = {**override, "instance_group": "KIND_CPU"}  # still a wrong value
            client.load_model("single", config=json.dumps(bad))
        client.close()
