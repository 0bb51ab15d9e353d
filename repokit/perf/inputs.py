"""Request data: shapes from the model and ``--shape``; zero, random or directory data.

A :class:`DataSet` holds batch-1 samples (one tensor per model input, shaped like the model's
dims without the batch dimension) in streams: a non-sequence model has one stream used round
robin; a sequence model given JSON streams replays one stream per sequence. Synthetic data
(zero/random) is generated once and reused, as perf_analyzer does. :func:`batched` repeats a
sample along a new batch axis for ``-b``.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import RepokitError
from repokit.perf.errors import option_error
from repokit.perf.model_info import ModelInfo, TensorSpec
from repokit.protocol.tensor_codec import array_from_bytes, wire_dtype

Array = npt.NDArray[Any]
RANDOM_INT_HIGH = 64  # random integers are drawn from [0, 64) (safe for index-like inputs)


@dataclass
class Sample:
    tensors: dict[str, Array]
    expected: dict[str, Array] | None = None  # validation_data (flat arrays)


@dataclass
class DataSet:
    streams: list[list[Sample]]
    stream_lengths_from_data: bool = False
    notes: list[str] = field(default_factory=list)

    def flat(self) -> list[Sample]:
        return [s for stream in self.streams for s in stream]


def resolve_shape(
    spec: TensorSpec, shapes: dict[str, list[int]], model: str = ""
) -> tuple[int, ...] | None:
    """The input's batch-1 shape; None while a variable dim has no value."""
    given = shapes.get(spec.name)
    if given is None:
        return None if any(d < 0 for d in spec.dims) else spec.dims
    # the words of the server's refusal (what perf_analyzer, which sends it, then shows)
    unexpected = f"unexpected shape for input '{spec.name}' for model '{model}': " if model else ""
    if len(given) != len(spec.dims) and spec.dims != (-1,):
        raise option_error(
            f"{unexpected}--shape {spec.name}:{','.join(map(str, given))} has {len(given)} dims "
            f"but input '{spec.name}' has {len(spec.dims)} ({list(spec.dims)}, batch dim "
            "excluded)"
        )
    if len(given) == len(spec.dims):
        for model_dim, dim in zip(spec.dims, given, strict=True):
            if model_dim >= 0 and model_dim != dim:
                raise option_error(
                    f"{unexpected}--shape {spec.name}:{','.join(map(str, given))} conflicts "
                    f"with the model's fixed dims {list(spec.dims)}"
                )
    return tuple(given)


def required_shape(spec: TensorSpec, shapes: dict[str, list[int]]) -> tuple[int, ...]:
    shape = resolve_shape(spec, shapes)
    if shape is None:
        raise option_error(
            f"input '{spec.name}' has variable dims {list(spec.dims)}; give its shape with "
            f"--shape {spec.name}:<d1>,<d2>,... (batch dimension excluded)"
        )
    return shape


def check_shape_names(info: ModelInfo, shapes: dict[str, list[int]]) -> None:
    for name in shapes:
        if info.input(name) is None:
            names = ", ".join(t.name for t in info.inputs)
            raise option_error(f"--shape names unknown input '{name}'; model inputs: {names}")
    for spec in info.inputs:
        if spec.name in shapes:
            resolve_shape(spec, shapes, info.name)


def _random_strings(rng: np.random.Generator, count: int, length: int) -> Array:
    letters = np.frombuffer((string.ascii_letters + string.digits).encode(), dtype=np.uint8)
    codes = rng.choice(letters, size=(count, length))
    out = np.empty(count, dtype=object)
    out[:] = [row.tobytes() for row in codes]
    return out


def synthetic_tensor(
    spec: TensorSpec,
    shape: tuple[int, ...],
    kind: str,
    rng: np.random.Generator,
    *,
    string_length: int,
    string_data: str | None,
) -> Array:
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        if string_data is not None:
            out = np.empty(count, dtype=object)
            out[:] = [string_data.encode()] * count
        elif kind == "zero":
            out = np.empty(count, dtype=object)
            out[:] = [b"0" * string_length] * count
        else:
            out = _random_strings(rng, count, string_length)
        return out.reshape(shape)
    dtype = wire_dtype(spec.datatype)
    if kind == "zero":
        return np.zeros(shape, dtype=dtype)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in ("i", "u") and spec.datatype != "BF16":
        return rng.integers(0, RANDOM_INT_HIGH, size=shape).astype(dtype)
    if spec.datatype == "BF16":
        values = rng.random(size=shape, dtype=np.float32)
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return rng.random(size=shape).astype(dtype)


def synthetic_dataset(
    info: ModelInfo,
    kind: str,
    shapes: dict[str, list[int]],
    *,
    string_length: int,
    string_data: str | None,
    seed: int,
) -> DataSet:
    rng = np.random.default_rng(seed)
    tensors = {
        spec.name: synthetic_tensor(
            spec,
            required_shape(spec, shapes),
            kind,
            rng,
            string_length=string_length,
            string_data=string_data,
        )
        for spec in info.inputs
    }
    return DataSet([[Sample(tensors)]])


def directory_dataset(info: ModelInfo, directory: Path, shapes: dict[str, list[int]]) -> DataSet:
    """One file per input, named like the input: raw row-major bytes, or text lines for BYTES."""
    tensors: dict[str, Array] = {}
    for spec in info.inputs:
        path = directory / spec.name
        if not path.is_file():
            raise option_error(
                f"--input-data directory '{directory}' has no file for input "
                f"'{spec.name}' (expected {path})"
            )
        shape = required_shape(spec, shapes)
        if spec.datatype == "BYTES":
            lines = path.read_bytes().splitlines()
            if len(lines) != math.prod(shape):
                raise option_error(
                    f"{path}: input '{spec.name}' needs {math.prod(shape)} lines (one string "
                    f"per element of shape {list(shape)}), found {len(lines)}"
                )
            array = np.empty(len(lines), dtype=object)
            array[:] = lines
            tensors[spec.name] = array.reshape(shape)
            continue
        try:
            tensors[spec.name] = array_from_bytes(
                spec.datatype, shape, path.read_bytes(), input_name=spec.name, model_name=info.name
            )
        except RepokitError as exc:
            raise option_error(f"{path}: {exc.message}") from None
    return DataSet([[Sample(tensors)]])


def batched(tensor: Array, batch_size: int, batching: bool) -> Array:
    if not batching:
        return tensor
    return np.repeat(tensor[np.newaxis, ...], batch_size, axis=0)


def element_shapes(samples: Sequence[Sample]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in samples[0].tensors.items()} if samples else {}
