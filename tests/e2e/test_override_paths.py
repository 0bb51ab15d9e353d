"""A config override (the load API's ``config`` parameter) cannot name files outside the model
directory (issue 17, item 13): every file-name field (``default_model_filename``,
``cc_model_filenames``, ``label_filename``, warmup ``input_data_file``) that is absolute or
climbs out with ``..`` is refused with 400 before anything is read or run, over HTTP and gRPC.

Triton 2.51, asked the same, loads ``default_model_filename: "../../../evil/model.py"`` and runs
that file (the marker file below appeared); an absolute name it joins under the version folder
and then hangs the load. The repository's own configs are trusted and keep Triton's behaviour.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests
from google.protobuf import json_format

from repokit.config.override_paths import override_path_problem
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.generated import grpc_service_pb2_grpc as pb_grpc
from repokit.protocol.generated import model_config_pb2 as mc
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server

EVIL_MODEL = """
import pathlib
pathlib.Path(__file__).with_name("RAN").write_text("ran")
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def evil(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("outside")
    (folder / "model.py").write_text(EVIL_MODEL)
    (folder / "labels.txt").write_text("a\nb\n")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, evil: Path) -> Iterator[ServerThread]:
    repo = copy_models(tmp_path_factory.mktemp("override") / "models")
    with running_server(
        repo, allow_grpc=True, model_control_mode="explicit", load_models=["*"]
    ) as thread:
        yield thread


def _config(**fields: object) -> dict[str, object]:
    config: dict[str, object] = {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    }
    config.update(fields)
    return config


def _cases(evil: Path, model_dir: Path) -> dict[str, tuple[dict[str, object], str, str]]:
    """case -> (override, field path, value)."""
    climb = "../" * (len(model_dir.parts) + 2) + str(evil).lstrip("/") + "/model.py"
    label = [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]
    return {
        "relative climb": (_config(default_model_filename=climb), "default_model_filename", climb),
        "short climb": (
            _config(default_model_filename="../../x/model.py"),
            "default_model_filename",
            "../../x/model.py",
        ),
        "absolute": (
            _config(default_model_filename=str(evil / "model.py")),
            "default_model_filename",
            str(evil / "model.py"),
        ),
        "cc_model_filenames": (
            _config(cc_model_filenames={"7.5": "../../x.plan"}),
            "cc_model_filenames[7.5]",
            "../../x.plan",
        ),
        "label file": (
            _config(output=[{**label[0], "label_filename": str(evil / "labels.txt")}]),
            "output[0].label_filename",
            str(evil / "labels.txt"),
        ),
        "warmup file": (
            _config(
                model_warmup=[
                    {
                        "name": "w",
                        "batch_size": 1,
                        "inputs": {
                            "INPUT0": {
                                "data_type": "TYPE_FP32",
                                "dims": [1],
                                "input_data_file": "../../../etc/passwd",
                            }
                        },
                    }
                ]
            ),
            "model_warmup[0].inputs[INPUT0].input_data_file",
            "../../../etc/passwd",
        ),
    }


def _message(field: str, value: str) -> str:
    return (
        f"load failed for model 'identity': config override field '{field}' is '{value}', "
        "which is outside the model directory; file names in a config override must be "
        "relative and stay within the model directory"
    )


def test_override_paths_refused_over_http(server: ServerThread, evil: Path) -> None:
    model_dir = Path(server.settings.core.repositories[0]) / "identity"
    for case, (config, field, value) in _cases(evil, model_dir).items():
        reply = requests.post(
            f"{server.endpoints.http}/v2/repository/models/identity/load",
            json={"parameters": {"config": json.dumps(config)}},
            timeout=120,
        )
        assert reply.status_code == 400, (case, reply.text)
        assert reply.json()["error"] == _message(field, value), case
        assert not (evil / "RAN").exists(), case
    # the model that was loaded is still served as it was
    ready = requests.get(f"{server.endpoints.http}/v2/models/identity/ready", timeout=30)
    assert ready.status_code == 200


def test_override_paths_refused_over_grpc(server: ServerThread, evil: Path) -> None:
    config = _config(default_model_filename=str(evil / "model.py"))
    with grpc.insecure_channel(server.endpoints.grpc) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.RepositoryModelLoadRequest(model_name="identity")
        request.parameters["config"].string_param = json.dumps(config)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(request, timeout=120)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == _message("default_model_filename", str(evil / "model.py"))
    assert not (evil / "RAN").exists()


def test_override_with_plain_names_still_loads(server: ServerThread) -> None:
    config = _config(default_model_filename="./model.py")
    reply = requests.post(
        f"{server.endpoints.http}/v2/repository/models/identity/load",
        json={"parameters": {"config": json.dumps(config)}},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("fields", "outside"),
    [
        ({"default_model_filename": "model.py"}, False),
        ({"default_model_filename": "../model.py"}, False),  # the model directory itself
        ({"default_model_filename": "../../model.py"}, True),
        ({"default_model_filename": "sub/../../../x"}, True),
        ({"default_model_filename": "/model.py"}, True),
        ({"default_model_filename": "model\0.py"}, True),
        ({"cc_model_filenames": {"8.0": "a/../b.plan"}}, False),
        ({"output": [{"name": "O", "label_filename": "../labels.txt"}]}, True),
        ({"output": [{"name": "O", "label_filename": "sub/labels.txt"}]}, False),
    ],
)
def test_override_path_rules(fields: dict[str, object], outside: bool) -> None:
    config = json_format.ParseDict(fields, mc.ModelConfig())
    assert (override_path_problem(config) is not None) == outside
