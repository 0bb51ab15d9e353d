"""Python models for the response-sender, BLS-stream and async-concurrency tests. Written
against Triton's documented API only, so real Triton 2.51 serves them unchanged.

- ``sender`` / ``sender_async`` (non-decoupled, dynamic batching): input MODE picks how each
  request is answered, see :data:`MODES`; ``sender_async`` has ``async def execute`` and sends
  its late answers from asyncio callbacks instead of threads;
- ``bls_counts``: counts the responses of a decoupled BLS request to ``ends_bare`` (N
  responses, then a bare final flag) and to ``ends_flagged`` (the last response flagged final);
- ``async_peak`` (decoupled, ``async def execute``): each request makes a decoupled BLS request
  to ``slow_stream`` and answers with how many of its requests were in ``execute`` at once;
  ``slow_stream`` answers once it holds three requests (or ten seconds after the first, so a
  server that runs them one after another answers each alone: the peak is then 1).
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.python_parity_models import write_model

# MODE -> what the model does, and the OUT value(s) the client gets
MODES: dict[str, tuple[int, str]] = {
    "returned": (0, "returns a response: 100"),
    "sent_before_return": (1, "sends 200 and the final flag, returns None"),
    "sent_after_return": (2, "sends 300 and the final flag after execute returned"),
    "sent_twice": (3, "sends 400, then 401 raises: the client gets 400"),
    "sent_and_returned": (4, "sends 500 with the final flag, returns 501: the client gets 500"),
    "returned_then_sent": (5, "returns 600, sends 601 later (raises): the client gets 600"),
    "final_only": (6, "sends only the final flag: raises, the client gets the error"),
}

_SENDER_COMMON = """
import numpy as np
import triton_python_backend_utils as pb_utils


def answer(value, shape):
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("OUT", np.full(shape, value, dtype=np.int32))])


def plan(requests):
    returned, later = [], []
    for request in requests:
        modes = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()
        mode, shape = int(modes.reshape(-1)[0]), modes.shape
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        response = None
        if mode == 0:
            response = answer(100, shape)
        elif mode == 1:
            sender = request.get_response_sender()
            sender.send(answer(200, shape))
            sender.send(flags=final)
        elif mode == 2:
            later.append((request.get_response_sender(), [answer(300, shape)]))
        elif mode == 3:
            sender = request.get_response_sender()
            sender.send(answer(400, shape))
            sender.send(answer(401, shape), flags=final)
        elif mode == 4:
            request.get_response_sender().send(answer(500, shape), flags=final)
            response = answer(501, shape)
        elif mode == 5:
            later.append((request.get_response_sender(), [answer(601, shape)]))
            response = answer(600, shape)
        elif mode == 6:
            request.get_response_sender().send(flags=final)
        returned.append(response)
    return (None if all(r is None for r in returned) else returned), later


def send_later(later):
    for sender, responses in later:
        try:
            for response in responses:
                sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except pb_utils.TritonModelException:
            pass  # the request was answered already (mode 5)
"""

SENDER = (
    _SENDER_COMMON
    + """
import threading


class TritonPythonModel:
    def execute(self, requests):
        returned, later = plan(requests)
        if later:
            threading.Timer(0.1, send_later, (later,)).start()
        return returned
"""
)

SENDER_ASYNC = (
    _SENDER_COMMON
    + """
import asyncio


class TritonPythonModel:
    async def execute(self, requests):
        returned, later = plan(requests)
        if later:
            asyncio.get_running_loop().call_later(0.1, send_later, later)
        return returned
"""
)

_STREAM = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(count):
                flags = final if FLAG_LAST and i == count - 1 else 0
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]), flags=flags)
            if not FLAG_LAST or count == 0:
                sender.send(flags=final)
        return None
"""

BLS_COUNTS = """
import numpy as np
import triton_python_backend_utils as pb_utils


def count(model, n):
    request = pb_utils.InferenceRequest(
        model_name=model, inputs=[n], requested_output_names=["OUT"])
    return sum(1 for _ in request.exec(decoupled=True))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N")
            counts = [count("ends_bare", n), count("ends_flagged", n)]
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("COUNTS", np.array(counts, dtype=np.int32))]))
        return responses
"""

SLOW_STREAM = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.waiting = []
        self.lock = threading.Lock()

    def execute(self, requests):
        with self.lock:
            self.waiting.extend(request.get_response_sender() for request in requests)
            if len(self.waiting) >= 3:
                self.answer_all()
            elif len(self.waiting) == len(requests):
                threading.Timer(10.0, self.answer_waiting).start()
        return None

    def answer_waiting(self):
        with self.lock:
            self.answer_all()

    def answer_all(self):
        senders, self.waiting = self.waiting, []
        for sender in senders:
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

ASYNC_PEAK = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.inside = 0
        self.peak = 0

    async def execute(self, requests):
        for request in requests:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            bls = pb_utils.InferenceRequest(
                model_name="slow_stream", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("N", np.array([1], np.int32))])
            for _ in await bls.async_exec(decoupled=True):
                pass
            self.inside -= 1
            request.get_response_sender().send(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([self.peak], np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_BATCHED_IO = """backend: "python"
max_batch_size: 8
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 200000 }
"""
_N_IO = """backend: "python"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
_DECOUPLED = "model_transaction_policy { decoupled: true }\n"

MODELS: dict[str, tuple[str, str]] = {
    "sender": (_BATCHED_IO, SENDER),
    "sender_async": (_BATCHED_IO, SENDER_ASYNC),
    "ends_bare": (_N_IO + _DECOUPLED, "FLAG_LAST = False\n" + _STREAM),
    "ends_flagged": (_N_IO + _DECOUPLED, "FLAG_LAST = True\n" + _STREAM),
    "bls_counts": (
        _N_IO.replace(
            'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
            'output [ { name: "COUNTS" data_type: TYPE_INT32 dims: [ 2 ] } ]',
        ),
        BLS_COUNTS,
    ),
    "slow_stream": (_N_IO + _DECOUPLED, SLOW_STREAM),
    "async_peak": (_N_IO + _DECOUPLED, ASYNC_PEAK),
}


def build_sender_repository(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    for name, (config, code) in MODELS.items():
        write_model(repo, name, config, code)
    return repo
