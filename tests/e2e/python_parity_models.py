"""Python-backend models that use the rest of ``triton_python_backend_utils``: BLS (sync,
async fan-out, decoupled), decoupled streaming, auto-complete, custom metrics, logging,
cancellation and errors in every phase. Written only against Triton's documented API, so
real Triton serves them unchanged (``TRITON_MODELS``; the others need onnxruntime).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from repokit.paths import default_sample_repository

IO16 = """max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""

BLS = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def _call(model, x):
    return pb_utils.InferenceRequest(
        model_name=model,
        inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
        requested_output_names=["OUTPUT0"],
    )


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "add_sub")
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            reply = _call(target, x).exec()
            if reply.has_error():
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(reply.error().message(), reply.error().code())))
                continue
            out = pb_utils.get_output_tensor_by_name(reply, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""

BLS_ASYNC = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            calls = [
                pb_utils.InferenceRequest(
                    model_name="add_sub",
                    inputs=[pb_utils.Tensor("INPUT0", x * k), pb_utils.Tensor("INPUT1", x)],
                    requested_output_names=["OUTPUT0"],
                ).async_exec()
                for k in range(1, 5)
            ]
            replies = await asyncio.gather(*calls)
            outs = [pb_utils.get_output_tensor_by_name(r, "OUTPUT0") for r in replies]
            total = sum(o.as_numpy() for o in outs)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
"""

BLS_STREAM = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "COUNT")
            stream = pb_utils.InferenceRequest(
                model_name="repeat", inputs=[count], requested_output_names=["OUT"]
            ).exec(decoupled=True)
            values = []
            for reply in stream:
                if reply.has_error():
                    raise pb_utils.TritonModelException(reply.error().message())
                out = pb_utils.get_output_tensor_by_name(reply, "OUT")
                if out is not None:
                    values.append(int(out.as_numpy()[0]))
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("VALUES", np.array(values + [-1], dtype=np.int32))]))
        return responses
"""

REPEAT = """
import json
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            params = json.loads(request.parameters())
            sender = request.get_response_sender()
            if params.get("fail"):
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("asked to fail", pb_utils.TritonError.INVALID_ARG)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            threading.Thread(target=self._send, args=(sender, count,
                             bool(params.get("final_with_last")))).start()
        return None

    def _send(self, sender, count, final_with_last):
        for i in range(count):
            last = final_with_last and i == count - 1
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)
        if not (final_with_last and count):
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""
REPEAT_CONFIG = """max_batch_size: 0
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""

WAIT_CANCEL = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily("parity_cancel_seen", "cancelled requests seen",
                                            pb_utils.MetricFamily.COUNTER)
        self.seen = self.family.Metric(labels={"model": "wait_cancel"})

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._wait, args=(request,)).start()
        return None

    def _wait(self, request):
        sender = request.get_response_sender()
        sender.send(pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", np.array([0], dtype=np.int32))]))
        event = threading.Event()
        for _ in range(3000):
            if request.is_cancelled():
                self.seen.increment(1)
                break
            event.wait(0.01)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

AUTO = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_INT64", "dims": [2]})
        config.add_output({"name": "Y", "data_type": "TYPE_INT64", "dims": [2]})
        config.set_max_batch_size(4)
        config.set_dynamic_batching()
        return config

    def initialize(self, args):
        import json
        self.config = json.loads(args["model_config"])
        self.keys = sorted(args)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 10)]) for r in requests]
"""

AUTO_CONFLICT = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]})
        return config

    def execute(self, requests):
        return []
"""

FEATURES = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.family = family = pb_utils.MetricFamily(
            "parity_requests", "requests seen by the model",
                                       pb_utils.MetricFamily.COUNTER)
        self.counter = family.Metric(labels={"model": args["model_name"], "kind": "all"})
        self.gauge_family = gauge = pb_utils.MetricFamily(
            "parity_last_sum", "sum of the last input",
                                      pb_utils.MetricFamily.GAUGE)
        self.gauge = gauge.Metric(labels={"model": args["model_name"]})
        self.histogram_family = histogram = pb_utils.MetricFamily("parity_sizes", "input sums",
                                          pb_utils.MetricFamily.HISTOGRAM)
        self.histogram = histogram.Metric(labels={"model": args["model_name"]},
                                          buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            self.counter.increment(1)
            self.gauge.set(float(x.sum()))
            self.histogram.observe(float(x.sum()))
            pb_utils.Logger.log_info(f"parity info {params.get('tag', '')}")
            pb_utils.Logger.log_warn("parity warning")
            pb_utils.Logger.log_error("parity error")
            pb_utils.Logger.log_verbose("parity verbose")
            mode = params.get("mode", "")
            if mode == "raise":
                raise RuntimeError("execute failed on purpose")
            if mode == "wrong_count":
                return responses + [None, None, None]
            if mode == "not_a_list":
                return "nope"
            if mode == "error":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "bad input on purpose", pb_utils.TritonError.INVALID_ARG)))
                continue
            if mode == "count":
                x = np.full(x.shape, self.counter.value(), dtype=np.float32)
            names = sorted(request.requested_output_names())
            info = {"params": params, "names": names, "corr": request.correlation_id(),
                    "flags": request.flags(), "cancelled": request.is_cancelled(),
                    "keys": sorted(self.args)}
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", x + 1),
                 pb_utils.Tensor("INFO", np.array([json.dumps(info).encode()], dtype=object))],
                parameters={"echo": str(params.get("tag", "")), "n": 7, "ok": True}))
        return responses
"""
FEATURES_CONFIG = """max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] }
]
"""

INIT_FAIL = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize failed on purpose")

    def execute(self, requests):
        return []
"""

FINALIZE_FAIL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]

    def finalize(self):
        raise RuntimeError("finalize failed on purpose")
"""

# (name, config body, code); config None = no config.pbtxt (auto-complete)
MODELS: dict[str, tuple[str | None, str]] = {
    "bls": ('backend: "python"\n' + IO16, BLS),
    "bls_async": ('backend: "python"\n' + IO16, BLS_ASYNC),
    "bls_stream": (
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "VALUES" data_type: TYPE_INT32 dims: [ -1 ] } ]\n',
        BLS_STREAM,
    ),
    "repeat": ('backend: "python"\n' + REPEAT_CONFIG, REPEAT),
    "wait_cancel": ('backend: "python"\n' + REPEAT_CONFIG, WAIT_CANCEL),
    "auto": ('backend: "python"\n', AUTO),
    "features": ('backend: "python"\n' + FEATURES_CONFIG, FEATURES),
    "finalize_fail": ('backend: "python"\n' + IO16, FINALIZE_FAIL),
}
BROKEN_MODELS: dict[str, tuple[str | None, str]] = {
    "init_fail": ('backend: "python"\n' + IO16, INIT_FAIL),
    "auto_conflict": (
        'backend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n',
        AUTO_CONFLICT,
    ),
}
SAMPLES = ("add_sub",)
ONNX_SAMPLES = ("add_sub_onnx",)


def write_model(repo: Path, name: str, config: str | None, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    (repo / name / "1" / "model.py").write_text(code)


def build_parity_repository(repo: Path, *, onnx: bool = True, broken: bool = True) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    for name in SAMPLES + (ONNX_SAMPLES if onnx else ()):
        shutil.copytree(default_sample_repository() / name, repo / name)
    for name, (config, code) in MODELS.items():
        write_model(repo, name, config, code)
    if broken:
        for name, (config, code) in BROKEN_MODELS.items():
            write_model(repo, name, config, code)
    return repo
