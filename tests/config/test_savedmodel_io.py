"""`repokit validate` reads a TensorFlow SavedModel's serving signature (no TensorFlow: the
tests write the file with the same run-time message types) and refuses what Triton 2.51's
tensorflow backend refuses, after its auto-completion (Triton's qa L0_model_config
autofill_noplatform/tensorflow_savedmodel cases, with their texts)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from repokit.config.report import ValidateOptions
from repokit.config.savedmodel_io import _saved_model_class
from repokit.config.validate import validate_repository

INT32, INT8 = 3, 6  # tensorflow DataType values


def _write_saved_model(folder: Path, signature_name: str = "serving_default") -> None:
    saved = _saved_model_class()()
    graph = saved.meta_graphs.add()
    graph.meta_info_def.tags.append("serve")
    signature = graph.signature_def[signature_name]
    for side, names, dtype in (
        (signature.inputs, ("INPUT0", "INPUT1"), INT32),
        (signature.outputs, ("OUTPUT0", "OUTPUT1"), INT8),
    ):
        for name in names:
            info = side[name]
            info.name = f"{name.lower()}:0"
            info.dtype = dtype
            info.tensor_shape.dim.add(size=-1)
            info.tensor_shape.dim.add(size=16)
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(saved.SerializeToString())


def _tensor(name: str, kind: str = "", dims: str = "dims: [ 16 ]") -> str:
    datatype = f"data_type: {kind}" if kind else ""
    return f'{{ name: "{name}" {datatype} {dims} }}'


def _repo(tmp_path: Path, body: str) -> Path:
    model = tmp_path / "m"
    _write_saved_model(model / "1" / "model.savedmodel")
    (model / "config.pbtxt").write_text(f'platform: "tensorflow_savedmodel"\n{body}\n')
    return tmp_path


def _errors(repo: Path, strict: bool = False) -> list[tuple[str, str]]:
    report = validate_repository(repo, ValidateOptions(deep=True, strict=strict))
    return [(d.rule, d.message) for d in report.models["m"].diagnostics if d.is_error]


IO = (
    "input [ " + _tensor("INPUT0", "TYPE_INT32") + ", " + _tensor("INPUT1", "TYPE_INT32") + " ]\n"
    "output [ " + _tensor("OUTPUT0", "TYPE_INT8") + ", " + _tensor("OUTPUT1", "TYPE_INT8") + " ]"
)


def test_a_config_that_matches_the_signature_loads(tmp_path: Path) -> None:
    assert _errors(_repo(tmp_path, "max_batch_size: 4\n" + IO)) == []


@pytest.mark.parametrize(
    ("change", "rule", "message"),
    [
        (
            ('INPUT1" data_type: TYPE_INT32', 'INPUT1" data_type: TYPE_FP32'),
            "tensorflow-input-data-type-mismatch",
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for input "
            "'INPUT1', model provides TYPE_INT32",
        ),
        (
            ('"INPUT1"', '"INPUT_UNKNOWN"'),
            "tensorflow-input-unknown",
            "unexpected inference input 'INPUT_UNKNOWN', allowed inputs are: INPUT0, INPUT1",
        ),
        (
            (
                'OUTPUT1" data_type: TYPE_INT8 dims: [ 16 ]',
                'OUTPUT1" data_type: TYPE_INT8 dims: [ 1 ]',
            ),
            "tensorflow-output-dims-mismatch",
            "model 'm', tensor 'OUTPUT1': the model expects 2 dimensions (shape [-1,16]) but the "
            "model configuration specifies 2 dimensions (an initial batch dimension because "
            "max_batch_size > 0 followed by the explicit tensor shape, making complete shape "
            "[-1,1])",
        ),
        (
            ("input [ ", 'input [ { name: "INPUT_EXTRA" data_type: TYPE_INT32 dims: [ 16 ] }, '),
            "tensorflow-input-unknown",
            "unable to load model 'm', configuration expects 3 inputs, model provides 2",
        ),
        (
            (
                'INPUT0" data_type: TYPE_INT32 dims: [ 16 ]',
                'INPUT0" data_type: TYPE_INT32 dims: [ 16, 1 ]',
            ),
            "tensorflow-autofill-failed",
            "unable to autofill for 'm', model tensor configurations are contradicting each "
            "other in terms of whether batching is supported",
        ),
    ],
)
def test_what_the_tensorflow_backend_refuses(
    tmp_path: Path, change: tuple[str, str], rule: str, message: str
) -> None:
    body = "max_batch_size: 1\n" + IO.replace(*change)
    errors = _errors(_repo(tmp_path, body))
    assert [r for r, _ in errors] == [rule], errors
    assert errors[0][1].startswith(message), errors


def test_the_backend_completes_what_the_config_leaves_out(tmp_path: Path) -> None:
    # qa autofill_noplatform_success/tensorflow_savedmodel/incomplete_input: a datatype and the
    # dims are left out; INPUT1's rank says the model batches, so max_batch_size is completed
    body = "input [ " + _tensor("INPUT0", "TYPE_INT32", "") + ", " + _tensor("INPUT1") + " ]"
    repo = _repo(tmp_path, body)
    assert _errors(repo) == []
    assert _errors(repo, strict=True)  # --strict: nothing is completed
    # a model input the config leaves out is allowed (qa too_few_inputs loads)
    (repo / "m" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\nmax_batch_size: 1\ninput [ '
        + _tensor("INPUT1", "TYPE_INT32")
        + " ]"
    )
    assert _errors(repo) == []


def test_an_unreadable_saved_model_is_an_error(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "max_batch_size: 4\n" + IO)
    (repo / "m" / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"\x0a\xff\xff")
    [(rule, message)] = _errors(repo)
    assert rule == "tensorflow-model-unreadable" and "is not a TensorFlow SavedModel" in message
    shutil.rmtree(repo / "m" / "1" / "model.savedmodel")
    _write_saved_model(repo / "m" / "1" / "model.savedmodel", signature_name="predict")
    [(rule, message)] = _errors(repo)
    assert rule == "tensorflow-model-unreadable"
    assert "has no 'serving_default' signature in a 'serve' meta graph" in message
