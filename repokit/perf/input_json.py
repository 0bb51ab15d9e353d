"""perf_analyzer's ``--input-data`` JSON files, validated with
``schemas/perf_input_data.schema.json`` and then against the model.

Errors name the file and the JSON path (``$.data[3].INPUT0``) and exit 3. Values go through
repokit's protocol codecs: plain lists through the KServe JSON rules
(:func:`repokit.protocol.json_codec.array_from_json`), ``{"b64": ...}`` through the binary tensor
codec. Lists of lists under ``data`` are sequences (one stream per correlation ID).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from repokit.errors import RepokitError
from repokit.paths import schemas_dir
from repokit.perf.errors import option_error
from repokit.perf.inputs import Array, DataSet, Sample, resolve_shape
from repokit.perf.model_info import ModelInfo, TensorSpec
from repokit.protocol.json_codec import array_from_json
from repokit.protocol.tensor_codec import array_from_bytes, wire_dtype

SCHEMA_FILE = "perf_input_data.schema.json"


@cache
def _validator() -> Any:
    schema = json.loads((schemas_dir() / SCHEMA_FILE).read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def _json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def load_json_file(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise option_error(f"--input-data file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise option_error(f"--input-data file '{path}' cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise option_error(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        raise option_error(
            f"{path}: {_json_path(error.absolute_path)}: {error.message} "
            "(expected perf_analyzer's input-data format)"
        )
    assert isinstance(document, dict)
    return document


def _shape_text(shape: Any) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _check_supplied_shape(
    shape: tuple[int, ...], spec: TensorSpec, shapes: dict[str, list[int]], where: str
) -> None:
    """A shape in the file must fit the model's input shape with --shape applied (-1 fits
    any size), in perf_analyzer's words."""
    model_shape = tuple(shapes.get(spec.name, spec.dims))
    if len(shape) != len(model_shape) or any(
        m >= 0 and m != d for m, d in zip(model_shape, shape, strict=True)
    ):
        raise option_error(
            f'{where}: The supplied shape of {_shape_text(shape)} for input "{spec.name}" is '
            f"incompatible with the model's input shape of {_shape_text(model_shape)}"
        )


def _tensor(
    value: Any, spec: TensorSpec, shapes: dict[str, list[int]], where: str, model: str
) -> Array:
    shape_given = value.get("shape") if isinstance(value, dict) else None
    if shape_given is not None:
        _check_supplied_shape(tuple(shape_given), spec, shapes, where)
    shape = tuple(shape_given) if shape_given is not None else resolve_shape(spec, shapes)
    try:
        if isinstance(value, dict) and "b64" in value:
            try:
                raw = base64.b64decode(value["b64"], validate=True)
            except binascii.Error as exc:
                raise option_error(f"{where}.b64: not valid base64 ({exc})") from None
            if shape is None:
                shape = _infer_shape(spec, _b64_count(spec, raw), where)
            return array_from_bytes(
                spec.datatype, shape, raw, input_name=spec.name, model_name=model
            )
        content = value["content"] if isinstance(value, dict) else value
        if shape is None:
            shape = _infer_shape(spec, _count(content), where)
        return array_from_json(spec.datatype, shape, content, input_name=spec.name)
    except RepokitError as exc:
        raise option_error(f"{where}: {exc.message} (shape {list(shape or ())})") from None


def _count(content: Any) -> int:
    if isinstance(content, list):
        return sum(_count(c) for c in content)
    return 1


def _b64_count(spec: TensorSpec, raw: bytes) -> int:
    if spec.datatype == "BYTES":
        return -1
    return len(raw) // max(wire_dtype(spec.datatype).itemsize, 1)


def _infer_shape(spec: TensorSpec, count: int, where: str) -> tuple[int, ...]:
    variable = [i for i, d in enumerate(spec.dims) if d < 0]
    fixed = math.prod(d for d in spec.dims if d >= 0)
    if len(variable) != 1 or count < 0 or fixed == 0 or count % fixed:
        raise option_error(
            f"{where}: input '{spec.name}' has variable dims {list(spec.dims)}; give "
            f'"shape" in the file or --shape {spec.name}:<dims>'
        )
    dims = list(spec.dims)
    dims[variable[0]] = count // fixed
    return tuple(dims)


def _step(
    entry: dict[str, Any], info: ModelInfo, shapes: dict[str, list[int]], where: str
) -> dict[str, Array]:
    names = {t.name for t in info.inputs}
    for name in entry:
        if name not in names:
            raise option_error(
                f"{where}: unknown input '{name}'; model '{info.name}' has inputs "
                f"{', '.join(sorted(names))}"
            )
    tensors: dict[str, Array] = {}
    for spec in info.inputs:
        if spec.name not in entry:
            if spec.name in info.optional_inputs:
                continue
            raise option_error(f"{where}: input '{spec.name}' is missing")
        tensors[spec.name] = _tensor(
            entry[spec.name], spec, shapes, f"{where}.{spec.name}", info.name
        )
    return tensors


def _expected(entry: dict[str, Any], info: ModelInfo, where: str) -> dict[str, Array]:
    outputs = {t.name: t for t in info.outputs}
    out: dict[str, Array] = {}
    for name, value in entry.items():
        spec = outputs.get(name)
        if spec is None:
            raise option_error(
                f"{where}: unknown output '{name}'; model '{info.name}' has "
                f"outputs {', '.join(sorted(outputs))}"
            )
        content = value.get("content", value) if isinstance(value, dict) else value
        if isinstance(value, dict) and "b64" in value:
            raise option_error(f"{where}.{name}: validation_data must be values, not b64")
        count = _count(content)
        if spec.datatype != "BYTES" and spec.dims and min(spec.dims) >= 0:
            itemsize = wire_dtype(spec.datatype).itemsize
            want = math.prod(spec.dims)
            if count != want:  # perf_analyzer's words, in batch-1 bytes
                raise option_error(
                    f"{where}: mismatch in the data provided for {name}. Expected: "
                    f"{want * itemsize} bytes, Got: {count * itemsize} bytes (output "
                    f"'{name}' has shape {list(spec.dims)})"
                )
        try:
            out[name] = array_from_json(spec.datatype, (count,), content, input_name=name).reshape(
                -1
            )
        except RepokitError as exc:
            raise option_error(f"{where}.{name}: {exc.message}") from None
    return out


NOT_ALIGNED = "The 'validation_data' field doesn't align with 'data' field in the json file"


def _check_aligned(path: Path, data: list[Any], validation: list[Any] | None) -> None:
    """validation_data has one entry per data entry (and per step of a sequence)."""
    if validation is None:
        return
    if len(validation) != len(data):
        raise option_error(
            f"{path}: {NOT_ALIGNED}: $.validation_data has {len(validation)} entries but "
            f"$.data has {len(data)}"
        )
    for i, (item, expected) in enumerate(zip(data, validation, strict=True)):
        if isinstance(item, list) != isinstance(expected, list) or (
            isinstance(item, list) and len(item) != len(expected)
        ):
            raise option_error(
                f"{path}: {NOT_ALIGNED}: $.validation_data[{i}] does not match the steps of "
                f"$.data[{i}]"
            )


def check_batchable(streams: list[list[Sample]], batch_size: int) -> None:
    """perf_analyzer batches consecutive entries: with -b above 1 each entry must give the same
    inputs (an optional input left out of some entries cannot be batched)."""
    if batch_size <= 1:
        return
    names = {frozenset(s.tensors) for stream in streams for s in stream}
    if len(names) > 1:
        raise option_error(
            "For batch sizes larger than 1, the same set of inputs must be specified for each "
            "batch. You cannot use different set of optional inputs for each individual batch."
        )


def json_dataset(paths: list[Path], info: ModelInfo, shapes: dict[str, list[int]]) -> DataSet:
    streams: list[list[Sample]] = []
    sequences = False
    for path in paths:
        document = load_json_file(path)
        data = document["data"]
        validation = document.get("validation_data")
        _check_aligned(path, data, validation)
        for i, item in enumerate(data):
            expected_item = validation[i] if validation is not None else None
            if isinstance(item, list):
                sequences = True
                stream = []
                for j, step in enumerate(item):
                    sample = Sample(_step(step, info, shapes, f"{path}: $.data[{i}][{j}]"))
                    if isinstance(expected_item, list) and j < len(expected_item):
                        sample.expected = _expected(
                            expected_item[j], info, f"{path}: $.validation_data[{i}][{j}]"
                        )
                    stream.append(sample)
                streams.append(stream)
            else:
                sample = Sample(_step(item, info, shapes, f"{path}: $.data[{i}]"))
                if isinstance(expected_item, dict):
                    sample.expected = _expected(
                        expected_item, info, f"{path}: $.validation_data[{i}]"
                    )
                streams.append([sample])
    if not sequences:
        streams = [[s for stream in streams for s in stream]]
    return DataSet(streams, stream_lengths_from_data=sequences)
