"""The inputs and outputs of a TensorFlow SavedModel (``model.savedmodel/saved_model.pb``), read
without TensorFlow, and what Triton's tensorflow backend refuses when it loads one.

Only what the backend reads is described (a message type built at run time with protobuf's
descriptor API, field numbers after TensorFlow's ``saved_model.proto``, ``meta_graph.proto``
and ``tensor_shape.proto``): the meta graph tagged ``serve`` and its ``serving_default``
signature, whose input and output keys are the tensor names a config uses, each with its
datatype and shape. Everything else in the file is skipped as unknown fields.

Unless ``--strict``, the backend completes what a config leaves out from the signature (all
tensors when none is listed, a missing ``data_type`` or ``dims`` otherwise); the completed
config is then held against the signature with Triton's words (:class:`TensorChecker` with
``triton_words``): the input count, unknown names, datatypes, the shape rules of
:mod:`repokit.config.onnx_shapes`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.graphdef_io import (
    _OPTIONAL,
    _REPEATED,
    _T,
    _add_message,
    _add_shape_types,
    _config_type,
    _dims,
)
from repokit.config.onnx_io import (
    DEFAULT_MAX_BATCH_SIZE,
    DYNAMIC,
    OnnxModelError,
    OnnxTensor,
    TensorChecker,
)
from repokit.protocol.generated import model_config_pb2 as mc

_PACKAGE = "repokit.graphdef"  # _add_message names types in this package
SERVE_TAG = "serve"
SIGNATURE = "serving_default"


def _saved_model_class() -> Any:
    """The SavedModel message class (a fresh descriptor pool per call: no module-level state)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="repokit_savedmodel.proto", package=_PACKAGE, syntax="proto3"
    )
    types = file.message_type
    message, string = _T.TYPE_MESSAGE, _T.TYPE_STRING
    _add_shape_types(types)
    _add_message(
        types,
        "TensorInfo",
        [
            ("name", 1, string, _OPTIONAL, ""),
            ("dtype", 2, _T.TYPE_UINT32, _OPTIONAL, ""),
            ("tensor_shape", 3, message, _OPTIONAL, "TensorShape"),
        ],
    )
    signature = _add_message(
        types,
        "SignatureDef",
        [
            ("inputs", 1, message, _REPEATED, "SignatureDef.InputsEntry"),
            ("outputs", 2, message, _REPEATED, "SignatureDef.OutputsEntry"),
        ],
    )
    for entry_name in ("InputsEntry", "OutputsEntry"):
        entry = _add_message(
            signature.nested_type,
            entry_name,
            [("key", 1, string, _OPTIONAL, ""), ("value", 2, message, _OPTIONAL, "TensorInfo")],
        )
        entry.options.map_entry = True
    _add_message(types, "MetaInfoDef", [("tags", 4, string, _REPEATED, "")])
    meta = _add_message(
        types,
        "MetaGraphDef",
        [
            ("meta_info_def", 1, message, _OPTIONAL, "MetaInfoDef"),
            ("signature_def", 5, message, _REPEATED, "MetaGraphDef.SignatureDefEntry"),
        ],
    )
    entry = _add_message(
        meta.nested_type,
        "SignatureDefEntry",
        [("key", 1, string, _OPTIONAL, ""), ("value", 2, message, _OPTIONAL, "SignatureDef")],
    )
    entry.options.map_entry = True
    _add_message(types, "SavedModel", [("meta_graphs", 2, message, _REPEATED, "MetaGraphDef")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)  # type: ignore[no-untyped-call]
    saved = pool.FindMessageTypeByName(f"{_PACKAGE}.SavedModel")  # type: ignore[no-untyped-call]
    return message_factory.GetMessageClass(saved)


def _tensors(entries: Any) -> tuple[OnnxTensor, ...]:
    found = []
    for key in sorted(entries):
        info = entries[key]
        dims = _dims(info.tensor_shape) if info.HasField("tensor_shape") else None
        found.append(
            OnnxTensor(
                str(key), _config_type(int(info.dtype)), dims or (), rank_known=dims is not None
            )
        )
    return tuple(found)


def read_savedmodel_signature(path: Path) -> tuple[tuple[OnnxTensor, ...], tuple[OnnxTensor, ...]]:
    """The inputs and outputs of the ``serving_default`` signature of the ``serve`` meta graph
    of the SavedModel at ``path`` (its folder or its ``saved_model.pb``)."""
    pb = path / "saved_model.pb" if path.is_dir() else path
    try:
        data = pb.read_bytes()
    except FileNotFoundError:
        raise OnnxModelError(f"'{pb}' does not exist") from None
    except OSError as exc:
        raise OnnxModelError(f"'{pb}' cannot be read: {exc.strerror}") from None
    saved = _saved_model_class()()
    try:
        saved.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise OnnxModelError(f"'{pb}' is not a TensorFlow SavedModel: {exc}") from None
    graphs = [g for g in saved.meta_graphs if SERVE_TAG in g.meta_info_def.tags]
    for graph in graphs or list(saved.meta_graphs):
        if SIGNATURE in graph.signature_def:
            signature = graph.signature_def[SIGNATURE]
            return _tensors(signature.inputs), _tensors(signature.outputs)
    raise OnnxModelError(f"'{pb}' has no '{SIGNATURE}' signature in a '{SERVE_TAG}' meta graph")


def _complete(
    tensors: Iterable[Any], found: tuple[OnnxTensor, ...], batching: bool, add: Any
) -> None:
    """The backend's auto-complete of one side: every tensor when the config lists none, else
    each listed tensor's missing ``data_type`` and ``dims``."""
    listed = list(tensors)
    by_name = {t.name: t for t in found}
    if not listed:
        for each in found:
            if each.rank_known:
                add(name=each.name, data_type=each.data_type, dims=_config_dims(each, batching))
        return
    for io in listed:
        known = by_name.get(io.name)
        if known is None:
            continue
        if io.data_type == mc.TYPE_INVALID:
            io.data_type = known.data_type
        if not io.dims and known.rank_known:
            io.dims.extend(_config_dims(known, batching))


def _batching(
    config: mc.ModelConfig, inputs: tuple[OnnxTensor, ...], outputs: tuple[OnnxTensor, ...]
) -> bool | None:
    """Whether the backend's auto-complete takes the model as batching; None when the
    config's tensors contradict each other. A listed tensor with dims hints by its rank: the
    model's rank means no batch dimension, one less means one. Without a hint the model
    batches when every input's first dimension is dynamic."""
    by_name = {t.name: t for t in (*inputs, *outputs)}
    hints: set[bool] = set()
    listed: list[Any] = [*config.input, *config.output]
    for io in listed:
        model = by_name.get(io.name)
        if model is None or not model.rank_known or not io.dims:
            continue
        if len(io.dims) == len(model.dims):
            hints.add(False)
        elif len(io.dims) + 1 == len(model.dims):
            hints.add(True)
    if len(hints) > 1:
        return None
    if hints:
        return hints.pop()
    return bool(inputs) and all(t.rank_known and t.dims[:1] == (DYNAMIC,) for t in inputs)


def _config_dims(tensor: OnnxTensor, batching: bool) -> list[int]:
    dims = list(tensor.dims[1:] if batching and tensor.dims else tensor.dims)
    return dims or [1]


def check_savedmodel_config(
    config: mc.ModelConfig,
    model_path: Path,
    model: str = "",
    file: str = "",
    strict: bool = False,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> list[Diagnostic]:
    """What Triton's tensorflow backend refuses when it loads the SavedModel at ``model_path``
    (rule ids start with ``tensorflow-``). ``config`` itself is not modified."""
    name = model or config.name
    try:
        inputs, outputs = read_savedmodel_signature(model_path)
    except OnnxModelError as exc:
        return [Diagnostic("tensorflow-model-unreadable", Severity.ERROR, name, str(exc), file)]
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    if not strict:
        batches = _batching(completed, inputs, outputs)
        if batches is None:
            message = (
                f"unable to autofill for '{name}', model tensor configurations are "
                "contradicting each other in terms of whether batching is supported"
            )
            return [
                Diagnostic(
                    "tensorflow-autofill-failed", Severity.ERROR, name, message, file, "input"
                )
            ]
        if completed.max_batch_size == 0 and batches:
            completed.max_batch_size = default_max_batch_size
        batching = completed.max_batch_size > 0
        _complete(completed.input, inputs, batching, completed.input.add)
        _complete(completed.output, outputs, batching, completed.output.add)
    checker = TensorChecker(completed, name, file, prefix="tensorflow", triton_words=True)
    checker.unfed_inputs_allowed = True
    checker.check_side("input", completed.input, inputs)
    checker.check_side("output", completed.output, outputs)
    return checker.found
