"""Python models for the generate-extension tests, written against Triton's documented API
only, so real Triton 2.51 serves them unchanged (tests/differential/test_generate_vs_triton.py).

- ``text_echo`` (non-decoupled): TEXT (BYTES [1]) and COUNT (INT32 [1]) -> TEXT_OUT (the text
  repeated COUNT times, then the request parameter ``tag``) and COUNT_OUT (FP32 [2]: COUNT,
  COUNT/2); COUNT < 0 fails the request (Triton 2.51's python backend has no response
  parameters, so the responses carry none);
- ``token_stream`` (decoupled): N (INT32 [1]) -> N responses TOKEN (INT32 [1]) = 0..N-1, then
  the final flag; N < 0 sends one error response;
- ``batched_add`` (non-decoupled, max_batch_size 4): X (FP32 [-1]) -> Y = X + 1;
- ``typed_stream`` (decoupled): KINDS (BYTES [-1]) -> one response per element, with an output
  JSON cannot carry as it is: ``half`` (FP16), ``infinite`` / ``nan`` (FP64 non-finite),
  ``raw`` (BYTES not UTF-8), ``ok`` (BYTES "ok");
- ``parameters_text`` (non-decoupled): X (INT32 [1]) -> P, the text of the request's
  ``parameters()``.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.python_parity_models import write_model

_ECHO_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "COUNT_OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_ECHO_CODE = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            if count < 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("COUNT must not be negative")))
                continue
            word = text.reshape(-1)[0]
            word = word.decode() if isinstance(word, bytes) else str(word)
            params = json.loads(request.parameters() or "{}")
            tag = str(params.get("tag", ""))
            out = np.array([(word * count + tag).encode()], dtype=np.object_)
            counts = np.array([count, count / 2], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("TEXT_OUT", out), pb_utils.Tensor("COUNT_OUT", counts)]))
        return responses
"""

_STREAM_CONFIG = """backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TOKEN" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_STREAM_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            if n < 0:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("N must not be negative")), flags=final)
                continue
            for i in range(n):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("TOKEN", np.array([i], dtype=np.int32))]))
            sender.send(flags=final)
        return None
"""

_ADD_CONFIG = """backend: "python"
max_batch_size: 4
dynamic_batching { }
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_ADD_CODE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)]))
        return responses
"""

_TYPED_CONFIG = """backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "KINDS" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "HALF" data_type: TYPE_FP16 dims: [ -1 ] },
         { name: "DOUBLE" data_type: TYPE_FP64 dims: [ -1 ] },
         { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_TYPED_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils

OUTPUTS = {
    "half": ("HALF", np.array([1.5], dtype=np.float16)),
    "infinite": ("DOUBLE", np.array([np.inf, -np.inf, 0.25], dtype=np.float64)),
    "nan": ("DOUBLE", np.array([np.nan], dtype=np.float64)),
    "raw": ("TEXT", np.array([b"\\xff\\xfe"], dtype=np.object_)),
    "ok": ("TEXT", np.array([b"ok"], dtype=np.object_)),
}


class TritonPythonModel:
    def execute(self, requests):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender()
            kinds = pb_utils.get_input_tensor_by_name(request, "KINDS").as_numpy()
            for kind in kinds:
                name, value = OUTPUTS[kind.decode()]
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(name, value)]))
            sender.send(flags=final)
        return None
"""

_PARAMETERS_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "P" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_PARAMETERS_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "P", np.array([request.parameters().encode()], dtype=np.object_))])
            for request in requests
        ]
"""

MODELS = {
    "text_echo": (_ECHO_CONFIG, _ECHO_CODE),
    "token_stream": (_STREAM_CONFIG, _STREAM_CODE),
    "batched_add": (_ADD_CONFIG, _ADD_CODE),
    "typed_stream": (_TYPED_CONFIG, _TYPED_CODE),
    "parameters_text": (_PARAMETERS_CONFIG, _PARAMETERS_CODE),
}


def build_generate_repository(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    for name, (config, code) in MODELS.items():
        write_model(repo, name, config, code)
    return repo
