"""``--sample-data``: perf_analyzer input-data JSON, validated with
``schemas/perf_input_data.schema.json``, turned into the shapes each input was seen with.

Each request in ``data`` is one batch-1 request, so a shape here never includes the batch
dimension. A tensor's shape is its ``"shape"`` when given; otherwise the input's dims when they
are fixed, or, with exactly one variable dimension, what the element count implies. For shape
tensors the *values* are what matters (they become ``set_shape_input`` ranges), so those are
collected instead. Problems raise SampleDataError naming the file and the JSON path.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from repokit.build.profiles import EngineInput
from repokit.paths import schemas_dir
from repokit.protocol import datatypes

SCHEMA_FILE = "perf_input_data.schema.json"


class SampleDataError(Exception):
    """The sample data file is unreadable, not perf_analyzer's format, or does not fit."""


@dataclass
class SampleShapes:
    """Per input: the non-batch shapes seen (values, for shape tensors)."""

    shapes: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)


def _json_path(parts: Sequence[Any]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def load_sample_document(path: Path) -> dict[str, Any]:
    """The parsed, schema-checked document."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SampleDataError(f"--sample-data file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SampleDataError(f"--sample-data file '{path}' cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SampleDataError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"
        ) from None
    schema = json.loads((schemas_dir() / SCHEMA_FILE).read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        raise SampleDataError(
            f"{path}: {_json_path(list(error.absolute_path))}: {error.message} (expected "
            'perf_analyzer\'s input-data format: {"data": [{"INPUT": [...]}, ...]})'
        )
    assert isinstance(document, dict)
    return document


def _flatten(values: Any) -> list[Any]:
    if isinstance(values, list):
        out: list[Any] = []
        for item in values:
            out.extend(_flatten(item))
        return out
    return [values]


def _element_count(tensor: EngineInput, value: Any, where: str) -> int:
    content = value.get("content", value) if isinstance(value, dict) else value
    b64 = content.get("b64") if isinstance(content, dict) else None
    if b64 is None and isinstance(value, dict):
        b64 = value.get("b64")
    if b64 is None:
        return len(_flatten(content))
    try:
        raw = base64.b64decode(b64, validate=True)
    except binascii.Error as exc:
        raise SampleDataError(f"{where}.b64: not valid base64 ({exc})") from None
    found = datatypes.from_config(tensor.data_type)
    if found is None or found.itemsize == 0:
        raise SampleDataError(
            f"{where}: give \"shape\" for b64 data of input '{tensor.name}' (variable-size type)"
        )
    return len(raw) // found.itemsize


def _shape_of(tensor: EngineInput, value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, dict) and "shape" in value:
        return tuple(int(d) for d in value["shape"])
    variable = tensor.dynamic_axes
    if not variable:
        return tensor.dims
    count = _element_count(tensor, value, where)
    fixed = math.prod(d for d in tensor.dims if d >= 0)
    if len(variable) != 1 or fixed == 0 or count % fixed:
        raise SampleDataError(
            f"{where}: input '{tensor.name}' has variable dims {list(tensor.dims)}; give \"shape\" "
            'with "content" for this tensor'
        )
    dims = list(tensor.dims)
    dims[variable[0]] = count // fixed
    return tuple(dims)


def _values_of(tensor: EngineInput, value: Any, where: str) -> tuple[int, ...]:
    content = value.get("content", value) if isinstance(value, dict) else value
    if isinstance(content, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in _flatten(content)
    ):
        raise SampleDataError(
            f"{where}: input '{tensor.name}' is a shape tensor; give its values as a list of "
            "integers"
        )
    return tuple(int(v) for v in _flatten(content))


def sample_shapes(
    document: dict[str, Any], inputs: Sequence[EngineInput], source: str
) -> SampleShapes:
    """Shapes (or shape-tensor values) per input over every request in ``data``."""
    by_name = {t.name: t for t in inputs}
    out = SampleShapes({t.name: [] for t in inputs})
    requests: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(document["data"]):
        if isinstance(item, list):
            requests.extend((f"$.data[{i}][{j}]", step) for j, step in enumerate(item))
        else:
            requests.append((f"$.data[{i}]", item))
    for where, request in requests:
        for name, value in request.items():
            tensor = by_name.get(name)
            if tensor is None:
                known = ", ".join(sorted(by_name)) or "(none)"
                raise SampleDataError(f"{source}: {where}: unknown input '{name}'; inputs: {known}")
            place = f"{source}: {where}.{name}"
            if tensor.shape_tensor:
                values = _values_of(tensor, value, place)
                if len(values) != tensor.width:
                    raise SampleDataError(
                        f"{place}: shape tensor '{name}' needs {tensor.width} values, got "
                        f"{len(values)}"
                    )
                out.shapes[name].append(values)
            else:
                shape = _shape_of(tensor, value, place)
                if len(shape) != len(tensor.dims):
                    raise SampleDataError(
                        f"{place}: shape {list(shape)} has {len(shape)} dims but input "
                        f"'{name}' has {len(tensor.dims)} non-batch dims {list(tensor.dims)}"
                    )
                out.shapes[name].append(shape)
    return out


def first_request_values(document: dict[str, Any]) -> dict[str, Any]:
    """Per input of the document's first request: its values as a flat list, or the raw bytes
    of ``b64`` content (what warmup files are written from)."""
    steps = document["data"]
    if not steps:
        return {}
    first = steps[0][0] if isinstance(steps[0], list) and steps[0] else steps[0]
    if not isinstance(first, dict):
        return {}
    out: dict[str, Any] = {}
    for name, value in first.items():
        content = value.get("content", value) if isinstance(value, dict) else value
        b64 = content.get("b64") if isinstance(content, dict) else None
        if b64 is None and isinstance(value, dict):
            b64 = value.get("b64")
        if b64 is not None:
            try:
                out[name] = base64.b64decode(b64, validate=True)
            except binascii.Error:
                continue  # sample_shapes reports it where the shapes are needed
        elif not isinstance(content, dict):
            out[name] = _flatten(content)
    return out
