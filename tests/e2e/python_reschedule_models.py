"""Python models that reschedule requests (``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``), for the
e2e tests and the comparison with Triton 2.51. Each takes INT32 ``IN`` [1] and answers INT32
``OUT`` [1]; their state lives per correlation id (a START request resets it).

- ``countdown`` (decoupled, iterative): ``IN`` = n; each execution sends one response with the
  steps left (n-1, ..., 0) and reschedules the request until 0, whose response is final;
- ``countdown_plain`` (not decoupled, iterative): reschedules until it ran n times (None in the
  response list meanwhile), then answers ``OUT`` = the number of executions;
- ``countdown_not_iterative`` (decoupled, ``sequence_batching {}``) and ``plain_default``
  (default scheduler): the same models where rescheduling is not configured;
- ``wrong_return`` (iterative): reschedules but returns a response for the request;
- ``final_then_reschedule`` (decoupled, iterative): sends its final response, then reschedules
  (only the first execution of a sequence does; later ones answer at once).
"""

from __future__ import annotations

from pathlib import Path

ITERATIVE = "sequence_batching { iterative_sequence: true }"

CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
model_transaction_policy {{ decoupled: {decoupled} }}
{scheduling}
"""

STATE = """
import numpy as np
import triton_python_backend_utils as pb_utils

START = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def out(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


class Countdowns:
    def __init__(self):
        self.left = {}
        self.runs = {}

    def step(self, request):
        key = request.correlation_id()
        if request.flags() & START or key not in self.left:
            self.left[key] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.runs[key] = 0
        self.left[key] -= 1
        self.runs[key] += 1
        left, runs = self.left[key], self.runs[key]
        if left <= 0:
            del self.left[key], self.runs[key]
        return left, runs
"""

DECOUPLED = (
    STATE
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.countdowns = Countdowns()

    def execute(self, requests):
        for request in requests:
            left, _ = self.countdowns.step(request)
            sender = request.get_response_sender()
            if left <= 0:
                sender.send(out(left), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(RESCHEDULE)
                sender.send(out(left))
        return None
"""
)

PLAIN = (
    STATE
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.countdowns = Countdowns()

    def execute(self, requests):
        responses = []
        for request in requests:
            left, runs = self.countdowns.step(request)
            if left <= 0:
                responses.append(out(runs))
            else:
                request.set_release_flags(RESCHEDULE)
                responses.append(None)
        return responses
"""
)

WRONG_RETURN = (
    STATE
    + """

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(RESCHEDULE)
        return [out(5) for _ in requests]
"""
)

FINAL_THEN_RESCHEDULE = (
    STATE
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.seen = set()

    def execute(self, requests):
        for request in requests:
            key = request.correlation_id()
            first = key not in self.seen
            self.seen.add(key)
            sender = request.get_response_sender()
            sender.send(out(1 if first else 2), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if first:
                request.set_release_flags(RESCHEDULE)
        return None
"""
)

# name -> (model.py, decoupled, scheduling); triton=False: not served by the reference
MODELS: dict[str, tuple[str, bool, str]] = {
    "countdown": (DECOUPLED, True, ITERATIVE),
    "countdown_plain": (PLAIN, False, ITERATIVE),
    "countdown_not_iterative": (DECOUPLED, True, "sequence_batching { }"),
    "plain_default": (PLAIN, False, ""),
    "wrong_return": (WRONG_RETURN, False, ITERATIVE),
    "final_then_reschedule": (FINAL_THEN_RESCHEDULE, True, ITERATIVE),
}
# Triton 2.51 crashes on this one (a request rescheduled after its final response)
NOT_FOR_TRITON = frozenset({"final_then_reschedule"})


def build_reschedule_repository(dest: Path, *, for_triton: bool = False) -> Path:
    for name, (source, decoupled, scheduling) in MODELS.items():
        if for_triton and name in NOT_FOR_TRITON:
            continue
        (dest / name / "1").mkdir(parents=True)
        config = CONFIG.format(decoupled=str(decoupled).lower(), scheduling=scheduling)
        (dest / name / "config.pbtxt").write_text(config)
        (dest / name / "1" / "model.py").write_text(source)
    return dest
