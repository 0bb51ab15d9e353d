"""Model warmup: the requests of ``model_warmup`` samples, and running them on an instance.

Follows Triton's ``GenerateWarmupData`` / ``WarmUp`` (core ``backend_model_instance.cc``):

* a sample with ``batch_size`` 0 is skipped; otherwise it is ``batch_size`` batch-1 requests
  executed together, ``count`` times (0 = once);
* every input needs fixed dims and a data kind: ``zero_data``, ``random_data`` (random bytes;
  STRING falls back to zeros, i.e. empty strings) or ``input_data_file`` read from
  ``<model_dir>/warmup/<file>``, which must hold at least the input's byte size (for STRING the
  whole file is used, as 4-byte length-prefixed elements);
* inputs that are model inputs get the batch dimension when the model batches; other names
  (control or state inputs) are passed as given;
* a failing execution fails the load: ``failed to run warmup sample '<name>': <error>;``.

The core builds the samples once per model version (``build_warmup_samples``) and calls
``run_warmup`` for every instance before the model becomes READY.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.base import Backend, BackendRequest
from repokit.errors import Code, ConfigError, RepokitError
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor

_log = logging.getLogger(__name__)

WARMUP_FOLDER = "warmup"


@dataclass(frozen=True)
class WarmupSample:
    name: str
    requests: tuple[BackendRequest, ...]  # batch_size requests of batch 1
    count: int  # executions, at least 1


def parse_length_prefixed(raw: bytes, count: int, file_name: str) -> npt.NDArray[Any]:
    """``count`` BYTES elements from 4-byte little-endian length-prefixed data."""
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + 4 > len(raw):
            raise ConfigError(
                f"expected {count} length-prefixed string elements in {file_name}, found {i}"
            )
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise ConfigError(
                f"string element {i} in {file_name} claims {length} bytes but only "
                f"{len(raw) - offset} remain"
            )
        out[i] = raw[offset : offset + length]
        offset += length
    return out


def build_warmup_samples(config: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """Every runnable sample of the config; ConfigError with Triton's message on bad settings."""
    model_inputs = {i.name for i in config.input}
    batching = config.max_batch_size > 0
    samples: list[WarmupSample] = []
    rng = np.random.default_rng()
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            continue
        tensors: dict[str, InferTensor] = {}
        for name in sorted(setting.inputs):
            meta = setting.inputs[name]
            if any(d < 0 for d in meta.dims):
                raise ConfigError(
                    "warmup setting expects all variable-size dimensions are specified for "
                    f"input '{name}'"
                )
            dims = tuple(int(d) for d in meta.dims)
            shape = (1, *dims) if batching and name in model_inputs else dims
            data = _sample_data(meta, name, shape, model_dir, rng)
            dt = datatypes.protocol_name(meta.data_type)
            tensors[name] = InferTensor(name, dt, shape, data)
        requests = tuple(
            BackendRequest(inputs=dict(tensors), requested_outputs=())
            for _ in range(setting.batch_size)
        )
        samples.append(WarmupSample(setting.name, requests, max(1, int(setting.count))))
    return samples


def _sample_data(
    meta: mc.ModelWarmup.Input,
    name: str,
    shape: tuple[int, ...],
    model_dir: Path,
    rng: np.random.Generator,
) -> npt.NDArray[Any]:
    kind = meta.WhichOneof("input_data_type")
    dt = datatypes.from_config(meta.data_type)
    if dt is None:
        raise ConfigError(f"warmup setting has an invalid data type for input '{name}'")
    count = int(np.prod(shape)) if shape else 1
    is_string = dt.protocol == "BYTES"
    np_dtype = dt.numpy if dt.numpy is not None else np.dtype(np.uint16)
    if kind is None:
        raise ConfigError(f"warmup setting expects input '{name}' to have input_data_type set")
    if kind == "zero_data" or (kind == "random_data" and is_string):
        if is_string:
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, dtype=np_dtype)
    if kind == "random_data":
        if np_dtype == np.bool_:
            return rng.integers(0, 2, size=shape).astype(np.bool_)
        raw = rng.integers(0, 256, size=count * np_dtype.itemsize, dtype=np.uint8)
        return raw.view(np_dtype).reshape(shape)
    file_name = meta.input_data_file
    path = model_dir / WARMUP_FOLDER / file_name
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"failed to open text file for read {path}: {exc.strerror}") from exc
    if is_string:
        return parse_length_prefixed(content, count, file_name).reshape(shape)
    expected = count * np_dtype.itemsize
    if len(content) < expected:
        raise ConfigError(
            f"warmup setting expects {expected} bytes, but the data provided from "
            f"{file_name}only has {len(content)} bytes"
        )
    return np.frombuffer(content, dtype=np_dtype, count=count).reshape(shape)


async def run_warmup(
    backend: Backend,
    instance: int,
    samples: list[WarmupSample],
    model: str = "",
    instance_name: str = "",
) -> None:
    """Execute every sample on one instance; the first failing sample fails the load. Each run
    is logged at verbose level 1 as Triton logs it (``model '<m>' instance <name> is running
    warmup sample '<sample>' for iteration <n>``)."""
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            if _log.isEnabledFor(logging.DEBUG):  # --log-verbose 1
                _log.debug(
                    "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                    model,
                    instance_name or instance,
                    sample.name,
                    iteration,
                )
            try:
                results, _timing = await backend.execute(instance, list(sample.requests))
                errors = [r.error.message for r in results if r.error is not None]
            except RepokitError as exc:
                errors = [exc.message]
            except Exception as exc:  # a backend bug still fails the load, not the server
                errors = [f"{type(exc).__name__}: {exc}"]
            if errors:
                detail = "".join(f"{e}; " for e in errors)  # as Triton: "; " after each
                raise RepokitError(
                    Code.INVALID_ARG, f"failed to run warmup sample '{sample.name}': {detail}"
                )
