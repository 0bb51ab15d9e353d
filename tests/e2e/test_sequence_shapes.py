"""Direct sequence batches hold one shape of the inputs that are not ragged, as Triton 2.51
(qa/L0_sequence_batcher test_ragged_batch on its variable-shape onnx models, run by
qa/L0_implicit_state too): four sequences of shapes [2], [2], [1] and [3] queued together run
in three executions, the two of shape [2] together. repokit put all four in one batch, whose
inputs could not be concatenated, and no request of the model was ever answered."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from tests.frontends.http.server_thread import running_server

CONFIG = """
name: "seq" platform: "onnxruntime_onnx" max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  control_input [
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
"""


def _ready_times_input() -> bytes:
    """OUTPUT = INPUT * READY (READY [batch, 1] broadcast over INPUT [batch, n])."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT", "READY"], ["OUTPUT"])],
        "g",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.INT32, ["b", "n"]),
            helper.make_tensor_value_info("READY", TensorProto.INT32, ["b", 1]),
        ],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["b", "n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def test_direct_sequences_of_different_shapes_run_in_separate_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "models" / "seq"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(_ready_times_input())
    (folder / "config.pbtxt").write_text(CONFIG)
    # Triton's test hook, as the qa test sets it: no batch before the four requests queued
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    lengths = {1001: 2, 1002: 2, 1003: 1, 1004: 3}
    answers: dict[int, tuple[grpcclient.InferResult | None, object]] = {}
    answered = threading.Semaphore(0)

    def answer(corrid: int, result: grpcclient.InferResult | None, error: object) -> None:
        answers[corrid] = (result, error)
        answered.release()

    with running_server(tmp_path / "models", allow_grpc=True) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for corrid, length in lengths.items():
            given = grpcclient.InferInput("INPUT", [1, length], "INT32")
            given.set_data_from_numpy(np.full((1, length), corrid, dtype=np.int32))
            client.async_infer(
                "seq",
                [given],
                lambda result, error, corrid=corrid: answer(corrid, result, error),
                sequence_id=corrid,
                sequence_start=True,
                sequence_end=True,
                client_timeout=60,
            )
        for _ in lengths:  # (before the fix no request was ever answered)
            assert answered.acquire(timeout=60), f"answered only {sorted(answers)}"
        for corrid, length in lengths.items():
            result, error = answers[corrid]
            assert error is None and result is not None
            assert result.as_numpy("OUTPUT").tolist() == [[corrid] * length]
        stats = client.get_inference_statistics("seq").model_stats[0]
        assert stats.execution_count == 3
        assert stats.inference_count == 4
        client.close()
