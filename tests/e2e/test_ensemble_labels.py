"""Classification on an ensemble's output (L0_infer's simple_/sequence_/fan_ ensembles with
class_count): an output without a label_filename of its own takes the labels of the composing
model's output it is mapped from, as Triton completes an ensemble's labels when it loads; an
output with its own label file keeps it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.frontends.http.server_thread import copy_models, running_server

STEP_OUTPUT = '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }'
ENSEMBLE_OUTPUT = '{ name: "TWICE_B" data_type: TYPE_FP32 dims: [ 16 ] }'


def _repository(root: Path) -> Path:
    repo = copy_models(root, ("add_sub", "add_sub_onnx", "add_sub_ensemble"))
    step = repo / "add_sub" / "config.pbtxt"
    assert STEP_OUTPUT in step.read_text()
    step.write_text(
        step.read_text().replace(STEP_OUTPUT, STEP_OUTPUT[:-1] + 'label_filename: "labels.txt" }')
    )
    (repo / "add_sub" / "labels.txt").write_text("".join(f"step{i}\n" for i in range(16)))
    ensemble = repo / "add_sub_ensemble" / "config.pbtxt"
    text = ensemble.read_text()
    assert ENSEMBLE_OUTPUT in text
    ensemble.write_text(
        text.replace(ENSEMBLE_OUTPUT, ENSEMBLE_OUTPUT[:-1] + 'label_filename: "own.txt" }')
    )
    (repo / "add_sub_ensemble" / "own.txt").write_text("".join(f"own{i}\n" for i in range(16)))
    return repo


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_outputs_classify_with_the_step_labels_or_their_own(
    tmp_path: Path, protocol: str
) -> None:
    module = httpclient if protocol == "http" else grpcclient
    with running_server(_repository(tmp_path / "models"), allow_grpc=True) as server:
        client = server.client(protocol)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)  # TWICE_A is largest at 15
        b = a[:, ::-1].copy()  # TWICE_B at 0
        inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("A", "B")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        outputs = [module.InferRequestedOutput(n, class_count=1) for n in ("TWICE_A", "TWICE_B")]
        result = client.infer("add_sub_ensemble", inputs, outputs=outputs)
        twice_a = result.as_numpy("TWICE_A").reshape(-1)[0].decode().split(":")
        twice_b = result.as_numpy("TWICE_B").reshape(-1)[0].decode().split(":")
        assert (float(twice_a[0]), twice_a[1:]) == (30.0, ["15", "step15"])
        assert (float(twice_b[0]), twice_b[1:]) == (30.0, ["0", "own0"])
        client.close()
