"""TensorRT optimization profiles derived from a model config (plus the ONNX model, --shape and
sample data), checked for coverage, turned into polygraphy ``Profile`` objects and JSON.

Rules (TensorRT's, see tensorrt-profiles.md §1.1 and §3; and Triton's profile selection):

* every input is in every profile (dynamic inputs must be; static ones are listed with
  min = opt = max so that polygraphy never pins a forgotten input to 1);
* the batch dimension (max_batch_size > 0) spans 1..max_batch_size over the profiles, in
  contiguous, gap-free ranges (``batch_ranges``);
* ``opt`` of a batch range is the largest ``preferred_batch_size`` the config gives inside the
  range, otherwise the top of the range: the dynamic batcher fills batches toward the top, and
  TensorRT's kernels tuned for ``opt`` stay valid for the whole range;
* non-batch dynamic dimensions come from ``--shape NAME:MIN,OPT,MAX`` or from sample data
  (min, median, max over the samples); there is no default, because a guess pins the engine;
* shape tensors (``is_shape_tensor``, or an int input that the ONNX graph uses as a shape) get
  value ranges (``set_shape_input``); with batching their first value is the batch size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from repokit.config.onnx_io import DYNAMIC, OnnxSignature
from repokit.protocol.generated import model_config_pb2 as mc

PROFILES_FILE = "profiles.json"
PROFILES_FORMAT = "repokit-profiles/1"


class ProfileError(Exception):
    """Profiles cannot be derived (missing shapes, bad --shape values, bad batch split)."""


@dataclass(frozen=True)
class ShapeSpec:
    """One ``--shape NAME:MIN,OPT,MAX``: non-batch shapes (or values, for shape tensors).

    Each of MIN/OPT/MAX is ``AxBxC`` (a full non-batch shape) or one integer applied to every
    dynamic dimension."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


def parse_shape_option(text: str) -> ShapeSpec:
    name, sep, ranges = text.rpartition(":")
    if not sep or not name:
        raise ProfileError(f"--shape '{text}': expected NAME:MIN,OPT,MAX (e.g. x:1,64,256)")
    parts = ranges.split(",")
    if len(parts) != 3:
        raise ProfileError(
            f"--shape '{text}': expected three comma-separated parts MIN,OPT,MAX, got {len(parts)}"
        )
    shapes: list[tuple[int, ...]] = []
    for label, part in zip(("MIN", "OPT", "MAX"), parts, strict=True):
        try:
            dims = tuple(int(d) for d in part.strip().lower().split("x"))
        except ValueError:
            raise ProfileError(
                f"--shape '{text}': {label} '{part}' is not an integer or AxBxC shape"
            ) from None
        if any(d < 0 for d in dims):
            raise ProfileError(f"--shape '{text}': {label} '{part}' has a negative dimension")
        shapes.append(dims)
    return ShapeSpec(name, shapes[0], shapes[1], shapes[2])


@dataclass(frozen=True)
class EngineInput:
    """One input as the engine sees it: non-batch dims (reshape applied), -1 = dynamic."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    shape_tensor: bool = False
    request_dims: tuple[int, ...] | None = None  # the config dims when a reshape differs

    @property
    def dynamic_axes(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.dims) if d == DYNAMIC)

    @property
    def width(self) -> int:
        """Entries of min/opt/max without batch: the rank, or the value count of a shape tensor."""
        return math.prod(self.dims) if self.shape_tensor else len(self.dims)


def engine_inputs(config: mc.ModelConfig, signature: OnnxSignature | None) -> list[EngineInput]:
    """The config's inputs with the engine's view of their shapes; fixed ONNX dims fill the
    config's -1 dims, and ONNX shape operands count as shape tensors."""
    batching = config.max_batch_size > 0
    out: list[EngineInput] = []
    for io in config.input:
        dims = list(io.reshape.shape) if io.HasField("reshape") else list(io.dims)
        shape_tensor = io.is_shape_tensor
        onnx_tensor = signature.input(io.name) if signature is not None else None
        if onnx_tensor is not None:
            model_dims = onnx_tensor.dims[1:] if batching else onnx_tensor.dims
            if len(model_dims) == len(dims):
                dims = [
                    m if d == DYNAMIC and m != DYNAMIC else d
                    for d, m in zip(dims, model_dims, strict=True)
                ]
            shape_tensor = shape_tensor or onnx_tensor.shape_operand
        request = tuple(io.dims) if io.HasField("reshape") else None
        out.append(EngineInput(io.name, io.data_type, tuple(dims), shape_tensor, request))
    return out


@dataclass(frozen=True)
class TensorProfile:
    """min/opt/max of one input: full engine shapes (batch first), or values for shape tensors."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]
    shape_tensor: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "min": list(self.min),
            "opt": list(self.opt),
            "max": list(self.max),
            "shape_tensor": self.shape_tensor,
        }


@dataclass(frozen=True)
class OptimizationProfile:
    index: int
    batch: tuple[int, int, int] | None  # (min, opt, max); None when the model does not batch
    tensors: tuple[TensorProfile, ...]

    def tensor(self, name: str) -> TensorProfile:
        return next(t for t in self.tensors if t.name == name)

    def to_polygraphy(self) -> Any:
        """A ``polygraphy.backend.trt.Profile`` (importable without tensorrt)."""
        from polygraphy.backend.trt import Profile

        profile = Profile()
        for tensor in self.tensors:
            profile.add(tensor.name, min=tensor.min, opt=tensor.opt, max=tensor.max)
        return profile

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "batch": list(self.batch) if self.batch is not None else None,
            "inputs": {t.name: t.to_dict() for t in self.tensors},
        }


@dataclass(frozen=True)
class ProfileRequest:
    """What the user asked for: the number of profiles or a split at the preferred sizes,
    --shape ranges and the shapes/values seen in sample data."""

    count: int = 1
    split_at_preferred: bool = False
    shapes: Mapping[str, ShapeSpec] = field(default_factory=dict)
    sample_shapes: Mapping[str, Sequence[tuple[int, ...]]] = field(default_factory=dict)


def _split_geometric(max_batch_size: int, count: int) -> list[int]:
    """Upper ends of ``count`` contiguous ranges over 1..max, spaced geometrically."""
    ends: list[int] = []
    for i in range(1, count + 1):
        end = round(max_batch_size ** (i / count))
        low = (ends[-1] + 1) if ends else 1
        ends.append(min(max(end, low), max_batch_size - (count - i)))
    return ends


def batch_ranges(
    max_batch_size: int, preferred: Sequence[int], count: int, split_at_preferred: bool
) -> list[tuple[int, int, int]]:
    """Contiguous, gap-free (min, opt, max) batch ranges covering 1..max_batch_size."""
    if max_batch_size <= 0:
        raise ProfileError("the model does not batch (max_batch_size 0); it has no batch ranges")
    sizes = sorted({p for p in preferred if 0 < p <= max_batch_size})
    if split_at_preferred:
        if not sizes:
            raise ProfileError(
                "--split-at-preferred needs dynamic_batching { preferred_batch_size: [...] } in "
                "the config"
            )
        ends = sizes if sizes[-1] == max_batch_size else [*sizes, max_batch_size]
    else:
        if count < 1:
            raise ProfileError(f"--profiles must be at least 1, got {count}")
        if count > max_batch_size:
            raise ProfileError(
                f"--profiles {count} asks for more batch ranges than there are batch sizes "
                f"(1..{max_batch_size})"
            )
        ends = _split_geometric(max_batch_size, count)
    ranges: list[tuple[int, int, int]] = []
    low = 1
    for high in ends:
        inside = [p for p in sizes if low <= p <= high]
        ranges.append((low, inside[-1] if inside else high, high))
        low = high + 1
    return ranges


def _median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _resolve(
    spec_part: tuple[int, ...], tensor: EngineInput, label: str, spec: ShapeSpec
) -> tuple[int, ...]:
    dims = tensor.dims
    if tensor.shape_tensor:
        if len(spec_part) == 1:
            return spec_part * tensor.width
        if len(spec_part) != tensor.width:
            raise ProfileError(
                f"--shape {spec.name}: {label} has {len(spec_part)} values but shape tensor "
                f"'{tensor.name}' holds {tensor.width}"
            )
        return spec_part
    if len(spec_part) == 1 and len(dims) != 1:
        return tuple(spec_part[0] if d == DYNAMIC else d for d in dims)
    if len(spec_part) != len(dims):
        raise ProfileError(
            f"--shape {spec.name}: {label} has {len(spec_part)} dims but input '{tensor.name}' has "
            f"{len(dims)} non-batch dims {list(dims)}"
        )
    if not tensor.shape_tensor:
        for axis, (given, fixed) in enumerate(zip(spec_part, dims, strict=True)):
            if fixed != DYNAMIC and given != fixed:
                raise ProfileError(
                    f"--shape {spec.name}: {label} gives {given} for dimension {axis}, which is "
                    f"fixed at {fixed}"
                )
    return spec_part


def _non_batch_range(
    tensor: EngineInput, request: ProfileRequest
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    spec = request.shapes.get(tensor.name)
    if spec is not None:
        low = _resolve(spec.min, tensor, "MIN", spec)
        mid = _resolve(spec.opt, tensor, "OPT", spec)
        high = _resolve(spec.max, tensor, "MAX", spec)
        if not all(a <= b <= c for a, b, c in zip(low, mid, high, strict=True)):
            raise ProfileError(
                f"--shape {spec.name}: MIN {list(low)} <= OPT {list(mid)} <= MAX {list(high)} "
                "must hold in every dimension"
            )
        return low, mid, high
    samples = [s for s in request.sample_shapes.get(tensor.name, ()) if len(s) == tensor.width]
    if samples:
        columns = list(zip(*samples, strict=True))
        return (
            tuple(min(c) for c in columns),
            tuple(_median(c) for c in columns),
            tuple(max(c) for c in columns),
        )
    if tensor.shape_tensor:
        raise ProfileError(
            f"input '{tensor.name}' is a shape tensor: give its values with --shape "
            f"{tensor.name}:MIN,OPT,MAX or in --sample-data"
        )
    if tensor.dynamic_axes:
        axes = ", ".join(str(a) for a in tensor.dynamic_axes)
        raise ProfileError(
            f"input '{tensor.name}' has dynamic dimension(s) {axes} in {list(tensor.dims)}: give "
            f"their range with --shape {tensor.name}:MIN,OPT,MAX or --sample-data"
        )
    return tensor.dims, tensor.dims, tensor.dims


def derive_profiles(
    config: mc.ModelConfig,
    inputs: Sequence[EngineInput],
    request: ProfileRequest,
    preferred: Sequence[int] = (),
) -> list[OptimizationProfile]:
    """The profiles for ``config``; ProfileError says what is missing or inconsistent."""
    unknown = sorted(set(request.shapes) - {t.name for t in inputs})
    if unknown:
        known = ", ".join(t.name for t in inputs)
        raise ProfileError(f"--shape names unknown input(s) {', '.join(unknown)}; inputs: {known}")
    batching = config.max_batch_size > 0
    ranges: list[tuple[int, int, int] | None]
    if batching:
        ranges = list(
            batch_ranges(
                config.max_batch_size, preferred, request.count, request.split_at_preferred
            )
        )
    else:
        ranges = [None]
    non_batch = {t.name: _non_batch_range(t, request) for t in inputs}
    profiles: list[OptimizationProfile] = []
    for index, batch in enumerate(ranges):
        tensors: list[TensorProfile] = []
        for tensor in inputs:
            low, mid, high = non_batch[tensor.name]
            if batch is not None:
                low, mid, high = (batch[0], *low), (batch[1], *mid), (batch[2], *high)
            tensors.append(TensorProfile(tensor.name, low, mid, high, tensor.shape_tensor))
        profiles.append(OptimizationProfile(index, batch, tuple(tensors)))
    return profiles


def check_profiles(
    profiles: Sequence[OptimizationProfile], inputs: Sequence[EngineInput], max_batch_size: int
) -> list[str]:
    """Coverage and consistency problems ([] when the profiles are sound)."""
    problems: list[str] = []
    if not profiles:
        return ["there is no optimization profile"]
    batching = max_batch_size > 0
    for profile in profiles:
        names = {t.name for t in profile.tensors}
        for tensor in inputs:
            if tensor.name not in names:
                problems.append(f"profile {profile.index} does not list input '{tensor.name}'")
                continue
            entry = profile.tensor(tensor.name)
            expected_rank = tensor.width + (1 if batching else 0)
            if len({len(entry.min), len(entry.opt), len(entry.max), expected_rank}) != 1:
                problems.append(
                    f"profile {profile.index} input '{tensor.name}': min/opt/max must all have "
                    f"{expected_rank} entries"
                )
                continue
            if not all(
                a <= b <= c for a, b, c in zip(entry.min, entry.opt, entry.max, strict=True)
            ):
                problems.append(
                    f"profile {profile.index} input '{tensor.name}': min {list(entry.min)} <= opt "
                    f"{list(entry.opt)} <= max {list(entry.max)} does not hold"
                )
            offset = 1 if batching else 0
            if not tensor.shape_tensor:
                for axis, fixed in enumerate(tensor.dims):
                    got = {
                        entry.min[axis + offset],
                        entry.opt[axis + offset],
                        entry.max[axis + offset],
                    }
                    if fixed != DYNAMIC and got != {fixed}:
                        problems.append(
                            f"profile {profile.index} input '{tensor.name}': dimension "
                            f"{axis + offset} is fixed at {fixed} but the profile gives "
                            f"{sorted(got)}"
                        )
    if batching:
        problems.extend(_batch_coverage(profiles, max_batch_size))
    return problems


def _batch_coverage(profiles: Sequence[OptimizationProfile], max_batch_size: int) -> list[str]:
    spans = sorted((p.batch[0], p.batch[2]) for p in profiles if p.batch is not None)
    if len(spans) != len(profiles):
        return ["a batching model needs a batch range in every profile"]
    problems: list[str] = []
    covered = 0
    for low, high in spans:
        if low > covered + 1:
            problems.append(f"batch sizes {covered + 1}..{low - 1} are in no profile")
        covered = max(covered, high)
    if covered < max_batch_size:
        problems.append(
            f"batch sizes {covered + 1}..{max_batch_size} are in no profile (max_batch_size "
            f"{max_batch_size})"
        )
    return problems


def profiles_document(
    model: str, max_batch_size: int, profiles: Sequence[OptimizationProfile], target: str
) -> dict[str, Any]:
    """The JSON written beside the model (``profiles.json``)."""
    return {
        "format": PROFILES_FORMAT,
        "model": model,
        "target": target,
        "max_batch_size": max_batch_size,
        "profiles": [p.to_dict() for p in profiles],
    }


def optimal_batch_note(ranges: Sequence[tuple[int, int, int]]) -> str:
    """One line describing the batch split, for reports."""
    return ", ".join(f"{lo}..{hi} (opt {mid})" for lo, mid, hi in ranges) or "no batching"
