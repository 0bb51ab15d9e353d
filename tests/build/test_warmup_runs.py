"""The build runs every warmup sample it writes through the model before keeping it.

Stand-ins for Triton's example repository (docs/examples/model_repository): its models are
TensorFlow graphs, so ``simple_string`` is built here as an ONNX model and as a python model with
the same IO (two TYPE_STRING [16] inputs holding numbers, their sum and difference as strings).
``repokit build --profile`` of that repository must write a repository ``repokit serve`` loads.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from repokit.build.builder import build_repository
from repokit.build.report import BuildOptions
from repokit.build.warmup_check import check_warmup
from repokit.config.parse import parse_file, parse_text
from tests.build import models
from tests.build.test_builder import NO_TRT
from tests.frontends.http.server_thread import running_server

STRING_IO = """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] } ]
"""
PYTHON_STRING_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            a = np.vectorize(int)(a.astype(np.bytes_))  # int(b"") raises, as the real one does
            b = np.vectorize(int)(b.astype(np.bytes_))
            out0 = np.array([str(v).encode() for v in (a + b).flat], dtype=object)
            out1 = np.array([str(v).encode() for v in (a - b).flat], dtype=object)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", out0.reshape(a.shape)),
                pb_utils.Tensor("OUTPUT1", out1.reshape(a.shape)),
            ]))
        return responses
"""
# a python model that takes only words it knows: no generated data fits it
PYTHON_WORDS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

KNOWN = {b"hello": 1, b"world": 2}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            words = pb_utils.get_input_tensor_by_name(request, "WORD").as_numpy()
            ids = np.array([KNOWN[w] for w in words.flat], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("ID", ids.reshape(words.shape))]))
        return responses
"""
WORDS_CONFIG = """
name: "words"
backend: "python"
max_batch_size: 4
input [ { name: "WORD" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "ID" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""


def simple_string_onnx(path: Path) -> Path:
    """Triton's simple_string as ONNX: Cast the strings to INT32, add and subtract, Cast back
    (Cast of an empty string fails, like the TensorFlow original)."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.STRING, ["batch", 16])
              for n in ("INPUT0", "INPUT1")]  # fmt: skip
    outputs = [helper.make_tensor_value_info(n, TensorProto.STRING, ["batch", 16])
               for n in ("OUTPUT0", "OUTPUT1")]  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
        helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Sub", ["a", "b"], ["difference"]),
        helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
        helper.make_node("Cast", ["difference"], ["OUTPUT1"], to=TensorProto.STRING),
    ]
    graph = helper.make_graph(nodes, "simple_string", inputs, outputs)
    model = helper.make_model(graph, opset_imports=models.OPSET)
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def triton_examples(root: Path) -> Path:
    """The example repository's layout with stand-ins that run here; densenet_onnx keeps no
    model file (Triton's fetch script downloads it), as in a fresh checkout."""
    root.mkdir(parents=True)
    onnx_config = 'name: "simple_string"\nplatform: "onnxruntime_onnx"\n' + STRING_IO
    models.write_model(root, "simple_string", onnx_config, simple_string_onnx)
    python = root / "simple_string_python"
    (python / "1").mkdir(parents=True)
    (python / "1" / "model.py").write_text(PYTHON_STRING_MODEL)
    (python / "config.pbtxt").write_text(
        'name: "simple_string_python"\nbackend: "python"\n' + STRING_IO
    )
    models.write_model(root, "simple", None, models.add_sub)
    (root / "densenet_onnx").mkdir()
    (root / "densenet_onnx" / "config.pbtxt").write_text(
        'name: "densenet_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
    )
    return root


@pytest.mark.parametrize("data", ["zero", "random"])
def test_examples_build_then_every_present_model_serves(tmp_path: Path, data: str) -> None:
    source = triton_examples(tmp_path / "src")
    out = tmp_path / "out"
    options = BuildOptions(profile=True, warmup_data=data)  # type: ignore[arg-type]
    report = build_repository(source, out, options, tensorrt=NO_TRT)
    status = {m.name: m.status for m in report.models}
    assert status == {
        "densenet_onnx": "failed",  # no model file: nothing to serve
        "simple": "built",
        "simple_string": "built",
        "simple_string_python": "built",
    }, [(m.name, m.reason) for m in report.models]
    written = parse_file(out / "simple_string" / "config.pbtxt")
    samples = [(w.name, w.batch_size) for w in written.model_warmup]
    assert samples == [("profile_0_opt", 8), ("batch_1", 1)]
    with running_server(out) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
        assert index == {n: "READY" for n in ("simple", "simple_string", "simple_string_python")}
        for name in ("simple_string", "simple_string_python"):
            a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
            b = np.ones((1, 16), dtype=object) * b"1"
            inputs = [httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
                      httpclient.InferInput("INPUT1", [1, 16], "BYTES")]  # fmt: skip
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer(name, inputs)
            sums = [int(v) for v in result.as_numpy("OUTPUT0").flat]
            assert sums == [i + 1 for i in range(16)], name


def test_triton_zero_data_for_strings_does_not_run(tmp_path: Path) -> None:
    """What the issue saw: Triton's zero_data for TYPE_STRING is empty strings, which
    simple_string cannot cast; the check reports it the way the server fails the load."""
    model = tmp_path / "simple_string"
    simple_string_onnx(model / "1" / "model.onnx")
    config = parse_text(
        'name: "simple_string" backend: "onnxruntime" platform: "onnxruntime_onnx"' + STRING_IO
        + 'model_warmup [{ name: "empty" batch_size: 1 inputs [ '
        '{ key: "INPUT0" value: { data_type: TYPE_STRING dims: [16] zero_data: true } }, '
        '{ key: "INPUT1" value: { data_type: TYPE_STRING dims: [16] zero_data: true } } ] }]'
    )  # fmt: skip
    failure = check_warmup(config, model, [1])
    assert failure is not None and "failed to run warmup sample 'empty'" in failure
    assert failure.startswith("version 1: ")


def _words_repository(root: Path) -> Path:
    (root / "words" / "1").mkdir(parents=True)
    (root / "words" / "1" / "model.py").write_text(PYTHON_WORDS_MODEL)
    (root / "words" / "config.pbtxt").write_text(WORDS_CONFIG)
    return root


def test_a_sample_the_model_rejects_fails_the_model_with_the_way_out(tmp_path: Path) -> None:
    source = _words_repository(tmp_path / "src")
    out = tmp_path / "out"
    report = build_repository(source, out, BuildOptions(profile=True), tensorrt=NO_TRT)
    [words] = report.models
    assert words.status == "failed" and report.exit_code == 1
    assert words.reason.startswith("a warmup sample does not run: version 1: failed to run "
                                   "warmup sample 'profile_0_opt': ")  # fmt: skip
    assert "b'0'" in words.reason  # the model's own KeyError
    assert "--sample-data" in words.reason
    assert [d.rule for d in words.diagnostics] == ["warmup-failed"]
    assert not (out / "words").exists()  # nothing the server would refuse is written

    samples = tmp_path / "words.json"
    samples.write_text(json.dumps({"data": [{"WORD": ["hello", "world"]}]}))
    options = BuildOptions(profile=True, sample_data=samples)
    fixed = build_repository(source, out, options, tensorrt=NO_TRT)
    assert fixed.models[0].status == "built", fixed.models[0].reason
    first = parse_file(out / "words" / "config.pbtxt").model_warmup[0]
    raw = (out / "words" / "warmup" / first.inputs["WORD"].input_data_file).read_bytes()
    assert raw == struct.pack("<I", 5) + b"hello" + struct.pack("<I", 5) + b"world"

    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"data": [{"WORD": ["hello", "moon"]}]}))
    options = BuildOptions(profile=True, sample_data=wrong)
    still = build_repository(source, out, options, tensorrt=NO_TRT)
    assert still.models[0].status == "failed"
    assert f"the values from {wrong} do not run either" in still.models[0].reason


PYTHON_BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inner = pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
            ).exec()
            if inner.has_error():
                raise pb_utils.TritonModelException(inner.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", pb_utils.get_output_tensor_by_name(
                    inner, "OUTPUT0").as_numpy())]))
        return responses
"""


def test_a_model_that_calls_other_models_is_kept_with_a_note(tmp_path: Path) -> None:
    """BLS needs the server around the model: the build cannot judge such samples and says so
    instead of failing a model that serves fine."""
    source = tmp_path / "src"
    (source / "caller" / "1").mkdir(parents=True)
    (source / "caller" / "1" / "model.py").write_text(PYTHON_BLS_MODEL)
    (source / "caller" / "config.pbtxt").write_text(
        'name: "caller"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    )
    report = build_repository(source, tmp_path / "out", BuildOptions(profile=True), tensorrt=NO_TRT)
    [caller] = report.models
    assert caller.status == "built", caller.reason
    assert any(
        note.startswith("the warmup samples were not run at build time: the model calls other "
                        "models (BLS)")
        for note in caller.notes
    ), caller.notes  # fmt: skip
