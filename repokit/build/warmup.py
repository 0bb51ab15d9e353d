"""Warmup samples for a compiled model: ``model_warmup`` entries plus their data files.

One sample per optimization profile at its opt shape (Triton keeps one execution context per
profile, and a request at a profile's opt selects that profile), plus batch 1 and
max_batch_size, without duplicates. Each sample feeds every input from a file under
``<model>/warmup/`` holding exactly one batch-1 request (Triton reads that many bytes per
request): zeros, or seeded random values (floats in [-1, 1), integers in [0, 4), random bools),
or, with ``--sample-data``, the first request's values for every input whose element count fits.
BYTES elements are 4-byte little-endian lengths followed by the bytes. Triton's own ``zero_data``
for TYPE_STRING is empty strings, which a model that parses its text as numbers (Triton's
``simple_string`` example) cannot cast; so zero data writes the string "0" and random data short
digit strings ("0" to "3"), text every model that takes strings accepts or parses. The build
runs every sample through the model (``repokit.build.warmup_check``) and points at
``--sample-data`` when the model still rejects them. Shape-tensor inputs hold
their values (the profile's opt values), because zeros are not a valid shape.

Never for ensembles (Triton refuses model_warmup there).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from repokit.build.profiles import EngineInput, OptimizationProfile
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc

WARMUP_DIR = "warmup"
WarmupData = Literal["zero", "random"]
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_DIGITS = (b"0", b"1", b"2", b"3")  # random BYTES elements


@dataclass(frozen=True)
class WarmupPlan:
    """One sample: its name, batch size and, per input, non-batch dims (values for shape
    tensors)."""

    name: str
    batch_size: int
    dims: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class WarmupFile:
    sample: str
    input: str
    file: str  # relative to <model>/warmup/
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"sample": self.sample, "input": self.input, "file": self.file, "bytes": self.bytes}


def plan_warmup(
    profiles: Sequence[OptimizationProfile], inputs: Sequence[EngineInput], max_batch_size: int
) -> list[WarmupPlan]:
    """Samples at every profile's opt, then batch 1 and max_batch_size (deduplicated)."""
    batching = max_batch_size > 0
    plans: list[WarmupPlan] = []
    seen: set[tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]] = set()

    def add(name: str, profile: OptimizationProfile, batch: int) -> None:
        dims: dict[str, tuple[int, ...]] = {}
        for tensor in inputs:
            opt = profile.tensor(tensor.name).opt
            dims[tensor.name] = opt[1:] if batching else opt
            if tensor.request_dims is not None and not tensor.shape_tensor:
                if any(d < 0 for d in tensor.request_dims):
                    raise ValueError(
                        f"input '{tensor.name}' has a reshape and variable dims "
                        f"{list(tensor.request_dims)}; warmup needs fixed request dims"
                    )
                dims[tensor.name] = tensor.request_dims
        key = (batch, tuple(sorted(dims.items())))
        if key not in seen:
            seen.add(key)
            plans.append(WarmupPlan(name, batch, dims))

    for profile in profiles:
        batch = profile.batch[1] if profile.batch is not None else 1
        add(f"profile_{profile.index}_opt", profile, batch)
    if profiles:
        add("batch_1", profiles[0], 1)
        if batching:
            last = max(profiles, key=lambda p: p.batch[2] if p.batch is not None else 0)
            add(f"batch_{max_batch_size}", last, max_batch_size)
    return plans


def _file_name(sample: str, index: int, name: str) -> str:
    return f"{sample}__{index}_{_UNSAFE.sub('_', name)}.bin"


def _length_prefixed(elements: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def _given_bytes(found: datatypes.DataType, given: Any, count: int) -> bytes | None:
    """A ``--sample-data`` value as the file's bytes, or None when it does not fit the sample."""
    if isinstance(given, bytes):  # b64 content: raw bytes of a fixed-size type
        size = found.itemsize
        return given if size and len(given) == count * size else None
    if not isinstance(given, list) or len(given) != count:
        return None
    if found.protocol == "BYTES":
        return _length_prefixed(
            [v.encode() if isinstance(v, str) else str(v).encode() for v in given]
        )
    try:
        if found.numpy is None:  # BF16 as its raw 16-bit words
            return np.asarray(given, dtype="<u2").tobytes()
        return np.asarray(given, dtype=found.numpy).tobytes()
    except (TypeError, ValueError, OverflowError):
        return None


def _tensor_bytes(
    tensor: EngineInput,
    shape: tuple[int, ...],
    data: WarmupData,
    rng: np.random.Generator,
    given: Any = None,
) -> bytes:
    found = datatypes.from_config(tensor.data_type)
    if found is None:
        raise ValueError(f"input '{tensor.name}' has no warmup data type")
    if tensor.shape_tensor:  # the values themselves
        np_dtype = found.numpy if found.numpy is not None else np.dtype("<i8")
        return np.asarray(shape, dtype=np_dtype).tobytes()
    count = math.prod(shape)
    if given is not None:
        fitted = _given_bytes(found, given, count)
        if fitted is not None:
            return fitted
    if found.protocol == "BYTES":
        if data == "zero":
            return (struct.pack("<I", 1) + b"0") * count
        return _length_prefixed([_DIGITS[i] for i in rng.integers(0, len(_DIGITS), size=count)])
    if found.numpy is None:  # BF16: raw 2-byte words
        if data == "zero":
            return bytes(2 * count)
        return rng.integers(0, 1 << 16, size=count, dtype=np.uint16).astype("<u2").tobytes()
    np_dtype = found.numpy
    if data == "zero":
        return np.zeros(count, dtype=np_dtype).tobytes()
    if np_dtype == np.bool_:
        return rng.integers(0, 2, size=count).astype(np.bool_).tobytes()
    if np_dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, size=count).astype(np_dtype).tobytes()
    return rng.integers(0, 4, size=count).astype(np_dtype).tobytes()


def write_warmup(
    config: mc.ModelConfig,
    model_dir: Path,
    plans: Sequence[WarmupPlan],
    inputs: Sequence[EngineInput],
    data: WarmupData = "zero",
    seed: int = 0,
    given: dict[str, Any] | None = None,
) -> list[WarmupFile]:
    """Replace ``config.model_warmup`` with ``plans`` and write their files (the warmup folder
    is recreated); returns what was written. ``given``: per input, ``--sample-data`` values
    (a flat list, or raw bytes) used wherever their element count fits the sample."""
    if config.platform == "ensemble":
        raise ValueError(f"model_warmup can not be specified for ensemble '{config.name}'")
    folder = model_dir / WARMUP_DIR
    if folder.exists():
        for old in folder.iterdir():
            if old.is_file():
                old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written: list[WarmupFile] = []
    del config.model_warmup[:]
    for plan in plans:
        sample = config.model_warmup.add()
        sample.name = plan.name
        sample.batch_size = plan.batch_size
        for index, tensor in enumerate(inputs):
            shape = plan.dims[tensor.name]
            entry: Any = sample.inputs[tensor.name]
            entry.data_type = tensor.data_type
            if tensor.shape_tensor:
                entry.dims.extend([len(shape)])
            else:
                entry.dims.extend(shape)
            value = given.get(tensor.name) if given else None
            payload = _tensor_bytes(tensor, shape, data, rng, value)
            name = _file_name(plan.name, index, tensor.name)
            (folder / name).write_bytes(payload)
            entry.input_data_file = name
            written.append(WarmupFile(plan.name, tensor.name, name, len(payload)))
    return written
