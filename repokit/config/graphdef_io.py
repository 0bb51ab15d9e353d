"""The inputs and outputs of a TensorFlow GraphDef (``model.graphdef``), read without TensorFlow.

A GraphDef is a protobuf message; only the part Triton's tensorflow backend looks at when it
loads a graphdef model is described here (nodes with their name, op and attributes), as a
message type built at run time with protobuf's descriptor API: field numbers and types follow
TensorFlow's ``graph.proto``, ``node_def.proto``, ``attr_value.proto``, ``tensor_shape.proto``
and ``types.proto``. Everything else in the file is skipped as unknown fields.

Inputs are the ``Placeholder`` nodes (their ``dtype`` and ``shape`` attributes); outputs are
looked up by name, with the type from their ``T``/``dtype`` attribute and the shape from
``_output_shapes`` when the graph records it (dynamic otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from repokit.config.diagnostics import Diagnostic, Severity
from repokit.config.onnx_io import DYNAMIC, OnnxModelError, OnnxTensor, TensorChecker
from repokit.protocol.generated import model_config_pb2 as mc

_PACKAGE = "repokit.graphdef"
_INPUT_OPS = {"Placeholder", "PlaceholderV2"}
# tensorflow DataType values -> model config TYPE_*
_TF_TO_CONFIG: dict[int, int] = {
    1: mc.TYPE_FP32,
    2: mc.TYPE_FP64,
    3: mc.TYPE_INT32,
    4: mc.TYPE_UINT8,
    5: mc.TYPE_INT16,
    6: mc.TYPE_INT8,
    7: mc.TYPE_STRING,
    9: mc.TYPE_INT64,
    10: mc.TYPE_BOOL,
    14: mc.TYPE_BF16,
    17: mc.TYPE_UINT16,
    19: mc.TYPE_FP16,
    22: mc.TYPE_UINT32,
    23: mc.TYPE_UINT64,
}
_REFERENCE_OFFSET = 100  # DT_*_REF types: the base type plus 100

_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_T = descriptor_pb2.FieldDescriptorProto


def _add_message(
    container: Any, name: str, fields: list[tuple[str, int, int, int, str]]
) -> descriptor_pb2.DescriptorProto:
    """Add message ``name`` to ``container`` (a file or a message's nested types)."""
    message: descriptor_pb2.DescriptorProto = container.add(name=name)
    for field_name, number, kind, label, type_name in fields:
        field = message.field.add(name=field_name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = f".{_PACKAGE}.{type_name}"
    return message


def _add_shape_types(types: Any) -> None:
    """TensorFlow's ``TensorShapeProto`` (as ``TensorShape``, with its ``Dim``)."""
    _add_message(
        types,
        "Dim",
        [("size", 1, _T.TYPE_INT64, _OPTIONAL, ""), ("name", 2, _T.TYPE_STRING, _OPTIONAL, "")],
    )
    _add_message(
        types,
        "TensorShape",
        [
            ("dim", 2, _T.TYPE_MESSAGE, _REPEATED, "Dim"),
            ("unknown_rank", 3, _T.TYPE_BOOL, _OPTIONAL, ""),
        ],
    )


def _graphdef_class() -> Any:
    """The GraphDef message class (a fresh descriptor pool per call: no module-level state)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="repokit_graphdef.proto", package=_PACKAGE, syntax="proto3"
    )
    types = file.message_type
    message, string = _T.TYPE_MESSAGE, _T.TYPE_STRING
    enum = _T.TYPE_UINT32  # a DataType enum value, read as its number
    _add_shape_types(types)
    _add_message(
        types,
        "ListValue",
        [("type", 6, enum, _REPEATED, ""), ("shape", 7, message, _REPEATED, "TensorShape")],
    )
    _add_message(
        types,
        "AttrValue",
        [
            ("list", 1, message, _OPTIONAL, "ListValue"),
            ("s", 2, _T.TYPE_BYTES, _OPTIONAL, ""),
            ("type", 6, enum, _OPTIONAL, ""),
            ("shape", 7, message, _OPTIONAL, "TensorShape"),
        ],
    )
    node = _add_message(
        types,
        "NodeDef",
        [
            ("name", 1, string, _OPTIONAL, ""),
            ("op", 2, string, _OPTIONAL, ""),
            ("input", 3, string, _REPEATED, ""),
            ("attr", 5, message, _REPEATED, "NodeDef.AttrEntry"),
        ],
    )
    entry = _add_message(
        node.nested_type,
        "AttrEntry",
        [("key", 1, string, _OPTIONAL, ""), ("value", 2, message, _OPTIONAL, "AttrValue")],
    )
    entry.options.map_entry = True
    _add_message(types, "GraphDef", [("node", 1, message, _REPEATED, "NodeDef")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)  # type: ignore[no-untyped-call]
    graph = pool.FindMessageTypeByName(f"{_PACKAGE}.GraphDef")  # type: ignore[no-untyped-call]
    return message_factory.GetMessageClass(graph)


def _config_type(tf_type: int) -> int:
    if tf_type > _REFERENCE_OFFSET:
        tf_type -= _REFERENCE_OFFSET
    return _TF_TO_CONFIG.get(tf_type, mc.TYPE_INVALID)


def _dims(shape: Any) -> tuple[int, ...] | None:
    """A TensorShape as dims (-1 for unknown sizes); None when even the rank is unknown."""
    if shape.unknown_rank:
        return None
    return tuple(DYNAMIC if d.size < 0 else int(d.size) for d in shape.dim)


class GraphDefSignature:
    """Placeholders (the inputs) and every node of a graph, by name."""

    def __init__(self, graph: Any) -> None:
        self.nodes = {str(node.name): node for node in graph.node}
        self.inputs = tuple(_tensor(node) for node in graph.node if node.op in _INPUT_OPS)

    def input(self, name: str) -> OnnxTensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> OnnxTensor | None:
        node = self.nodes.get(name.split(":", 1)[0])
        return None if node is None else _tensor(node)

    @property
    def node_names(self) -> list[str]:
        return list(self.nodes)


def _tensor(node: Any) -> OnnxTensor:
    """A node's (first) output as a tensor; ``rank_known`` is False when the graph does not
    record its shape."""
    attrs = node.attr
    tf_type = 0
    for key in ("dtype", "T"):
        if key in attrs and attrs[key].type:
            tf_type = int(attrs[key].type)
            break
    dims: tuple[int, ...] | None = None
    if "shape" in attrs and attrs["shape"].HasField("shape"):
        dims = _dims(attrs["shape"].shape)
    elif "_output_shapes" in attrs and attrs["_output_shapes"].list.shape:
        dims = _dims(attrs["_output_shapes"].list.shape[0])
    return OnnxTensor(
        str(node.name), _config_type(tf_type), dims or (), rank_known=dims is not None
    )


def read_graphdef_signature(path: Path) -> GraphDefSignature:
    """Parse ``path`` (a GraphDef file) and return its inputs and nodes."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise OnnxModelError(f"'{path}' does not exist") from None
    except OSError as exc:
        raise OnnxModelError(f"'{path}' cannot be read: {exc.strerror}") from None
    graph = _graphdef_class()()
    try:
        graph.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise OnnxModelError(f"'{path}' is not a TensorFlow GraphDef: {exc}") from None
    if not graph.node:
        raise OnnxModelError(f"'{path}' is not a TensorFlow GraphDef: it holds no nodes")
    return GraphDefSignature(graph)


def check_graphdef_config(
    config: mc.ModelConfig, model_path: Path, model: str = "", file: str = ""
) -> list[Diagnostic]:
    """What Triton's tensorflow backend refuses when it loads a graphdef: a config input that
    is not a placeholder of the graph, an output that is no node of it, a datatype or a shape
    that differs from the graph's (rule ids start with ``tensorflow-``). The backend does not
    auto-complete graphdef configs, so ``config`` is compared as it is."""
    name = model or config.name
    try:
        signature = read_graphdef_signature(model_path)
    except OnnxModelError as exc:
        return [Diagnostic("tensorflow-model-unreadable", Severity.ERROR, name, str(exc), file)]
    checker = TensorChecker(config, name, file, prefix="tensorflow")
    input_names = [t.name for t in signature.inputs]
    checker.check_tensors("input", config.input, signature.input, input_names, list_names=True)
    checker.check_tensors(
        "output", config.output, signature.output, signature.node_names, list_names=False
    )
    return checker.found
