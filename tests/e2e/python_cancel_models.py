"""Python models for cancellation and statistics tests: ``slow`` waits (polling
``request.is_cancelled()``) and counts what it saw in custom metrics; ``bls_slow`` calls ``slow``
through BLS; ``stream`` is a decoupled model sending N responses. Written against Triton's
documented API only, so real Triton 2.51 serves them unchanged.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.python_parity_models import write_model

SLOW = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily("slow_requests", "what the slow model saw",
                                       pb_utils.MetricFamily.COUNTER)
        self.family = family
        self.executed = family.Metric(labels={"event": "executed"})
        self.cancelled = family.Metric(labels={"event": "cancelled"})
        self.completed = family.Metric(labels={"event": "completed"})

    def execute(self, requests):
        responses = []
        event = threading.Event()
        for request in requests:
            self.executed.increment(1)
            wait_ms = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            seen = False
            for _ in range(wait_ms // 5):
                if request.is_cancelled():
                    seen = True
                    break
                event.wait(0.005)
            if seen:
                self.cancelled.increment(1)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "slow: request cancelled", pb_utils.TritonError.CANCELLED)))
                continue
            self.completed.increment(1)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([wait_ms], dtype=np.int32))]))
        return responses
"""

BLS_SLOW = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            reply = pb_utils.InferenceRequest(
                model_name="slow",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"],
            ).exec()
            if reply.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "bls_slow: " + reply.error().message())))
                continue
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.get_output_tensor_by_name(reply, "OUT")]))
        return responses
"""

STREAM = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if json.loads(request.parameters()).get("fail"):
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("asked to fail")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for i in range(count):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

IO = """max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

DECOUPLED = "model_transaction_policy { decoupled: true }\n"

MODELS: dict[str, tuple[str, str]] = {
    "slow": ('backend: "python"\n' + IO, SLOW),
    "bls_slow": ('backend: "python"\n' + IO, BLS_SLOW),
    "stream": ('backend: "python"\n' + IO + DECOUPLED, STREAM),
}


def build_cancel_repository(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    for name, (config, code) in MODELS.items():
        write_model(repo, name, config, code)
    return repo
