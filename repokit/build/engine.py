"""TensorRT engines through polygraphy; nothing here imports ``tensorrt`` at module import.

``probe_tensorrt`` says whether an engine can be built here (the module imports and a builder
can be created, which needs an NVIDIA GPU and driver) and, if not, why. ``engine_loaders``
wires polygraphy's lazy loaders: ``NetworkFromOnnxPath`` -> ``CreateConfig`` (the profiles, a
workspace limit, a timing cache kept in the output repository, precision flags allowed by the
TensorRT version) -> ``EngineFromNetwork`` -> ``SaveEngine``; calling the last one builds.
``verify_engine`` runs TensorRT and ONNX Runtime on the same inputs at every profile's opt shape
and compares them with polygraphy's Comparator.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from repokit.build.profiles import OptimizationProfile
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc

INSTALL_HINT = (
    "install it with `pip install repokit[tensorrt]` on a machine with an NVIDIA GPU and driver"
)
FP16_REMOVED_MAJOR = 11  # TensorRT 11 removed the weak-typing precision builder flags


@dataclass(frozen=True)
class TensorRTStatus:
    available: bool
    version: str = ""
    reason: str = ""  # why an engine cannot be built here ("" when available)


def probe_tensorrt() -> TensorRTStatus:
    """Import tensorrt and create a builder; the reason says what failed."""
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError as exc:
        return TensorRTStatus(False, "", f"the Python module 'tensorrt' is not installed ({exc}); "
                              f"{INSTALL_HINT}")  # fmt: skip
    except OSError as exc:  # the wheel is there but its libraries are not
        return TensorRTStatus(
            False, "", f"tensorrt cannot load its libraries ({exc}); {INSTALL_HINT}"
        )
    version = str(getattr(trt, "__version__", ""))
    try:
        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
        del builder
    except Exception as exc:
        return TensorRTStatus(
            False,
            version,
            f"TensorRT {version} is installed but cannot create a builder, which needs an NVIDIA "
            f"GPU and driver ({type(exc).__name__}: {exc})",
        )
    return TensorRTStatus(True, version, "")


def skipped_message(status: TensorRTStatus) -> str:
    return (
        f"engine build skipped: {status.reason}. The model stays ONNX (runs with ONNX Runtime); "
        "its profiles and warmup samples were still written"
    )


def precision_flags(version: str, fp16: bool) -> tuple[dict[str, bool], list[str]]:
    """CreateConfig keyword arguments for the requested precision, gated on the version."""
    if not fp16:
        return {}, []
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major >= FP16_REMOVED_MAJOR:
        return {}, [
            f"--fp16 ignored: TensorRT {version} has no FP16 builder flag (every network is "
            "strongly typed); convert the ONNX model to mixed precision first"
        ]
    return {"fp16": True}, []


@contextlib.contextmanager
def quiet_polygraphy() -> Iterator[None]:
    """Keep polygraphy's info/warning lines off stdout (JSON reports go there)."""
    from polygraphy.logger import G_LOGGER

    with contextlib.redirect_stdout(sys.stderr), G_LOGGER.verbosity(G_LOGGER.ERROR):
        yield


@dataclass(frozen=True)
class EngineRecipe:
    onnx_path: Path
    plan_path: Path
    timing_cache: Path
    profiles: tuple[OptimizationProfile, ...]
    workspace_bytes: int
    fp16: bool = False


@dataclass
class EngineLoaders:
    """polygraphy's loader chain; calling ``save()`` builds and writes the plan."""

    network: Any
    config: Any
    engine: Any
    save: Any
    notes: list[str] = field(default_factory=list)


def engine_loaders(recipe: EngineRecipe, memory_pool_key: Any, version: str) -> EngineLoaders:
    """The loaders for ``recipe``; ``memory_pool_key`` is ``trt.MemoryPoolType.WORKSPACE``."""
    from polygraphy.backend.trt import (
        CreateConfig,
        EngineFromNetwork,
        NetworkFromOnnxPath,
        SaveEngine,
    )

    flags, notes = precision_flags(version, recipe.fp16)
    with quiet_polygraphy():
        network = NetworkFromOnnxPath(str(recipe.onnx_path))
        config = CreateConfig(
            profiles=[p.to_polygraphy() for p in recipe.profiles],
            memory_pool_limits={memory_pool_key: recipe.workspace_bytes},
            load_timing_cache=str(recipe.timing_cache),
            **flags,
        )
        engine = EngineFromNetwork(
            network, config=config, save_timing_cache=str(recipe.timing_cache)
        )
        save = SaveEngine(engine, path=str(recipe.plan_path))
    return EngineLoaders(network, config, engine, save, notes)


def run_loaders(loaders: EngineLoaders) -> None:
    """The TensorRT build itself (needs a GPU)."""
    with quiet_polygraphy():
        loaders.save()


@dataclass
class EngineResult:
    plan_sha256: str
    plan_bytes: int
    notes: list[str]


def build_engine(
    recipe: EngineRecipe,
    trt: Any,
    version: str,
    run: Callable[[EngineLoaders], None] = run_loaders,
) -> EngineResult:
    """Build ``recipe.plan_path``; raises RuntimeError with TensorRT's reason on failure."""
    loaders = engine_loaders(recipe, trt.MemoryPoolType.WORKSPACE, version)
    recipe.plan_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        run(loaders)
    except Exception as exc:
        raise RuntimeError(f"TensorRT engine build failed: {type(exc).__name__}: {exc}") from exc
    if not recipe.plan_path.is_file():
        raise RuntimeError(f"TensorRT engine build wrote no plan at {recipe.plan_path}")
    data = recipe.plan_path.read_bytes()
    return EngineResult(hashlib.sha256(data).hexdigest(), len(data), loaders.notes)


# --- verification -----------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyResult:
    passed: bool
    detail: str


def _feed(
    profile: OptimizationProfile, data_types: Mapping[str, int], rng: np.random.Generator
) -> dict[str, np.ndarray[Any, Any]]:
    feed: dict[str, np.ndarray[Any, Any]] = {}
    for tensor in profile.tensors:
        found = datatypes.from_config(data_types.get(tensor.name, mc.TYPE_FP32))
        np_dtype = found.numpy if found is not None and found.numpy is not None else np.float32
        if tensor.shape_tensor:
            feed[tensor.name] = np.asarray(tensor.opt, dtype=np_dtype)
        elif np.dtype(np_dtype).kind == "f":
            feed[tensor.name] = rng.uniform(-1, 1, size=tensor.opt).astype(np_dtype)
        else:
            feed[tensor.name] = rng.integers(0, 4, size=tensor.opt).astype(np_dtype)
    return feed


def tensorrt_runner(plan_path: Path, profile_index: int) -> Any:
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    return TrtRunner(EngineFromBytes(plan_path.read_bytes()), optimization_profile=profile_index)


def verify_engine(
    recipe: EngineRecipe,
    data_types: Mapping[str, int],
    make_trt_runner: Callable[[Path, int], Any] = tensorrt_runner,
    atol: float = 1e-3,
    rtol: float = 1e-3,
) -> VerifyResult:
    """Compare TensorRT with ONNX Runtime at each profile's opt shape (seeded inputs)."""
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.comparator import Comparator, SimpleCompareFunc

    rng = np.random.default_rng(0)
    failures: list[str] = []
    with quiet_polygraphy():
        for profile in recipe.profiles:
            feeds = [_feed(profile, data_types, rng)]
            runners = [
                make_trt_runner(recipe.plan_path, profile.index),
                OnnxrtRunner(SessionFromOnnx(str(recipe.onnx_path), providers=["cpu"])),
            ]
            try:
                results = Comparator.run(runners, data_loader=feeds)
                accuracy = Comparator.compare_accuracy(
                    results, compare_func=SimpleCompareFunc(atol=atol, rtol=rtol)
                )
            except Exception as exc:
                failures.append(f"profile {profile.index}: {type(exc).__name__}: {exc}")
                continue
            if not bool(accuracy):
                failures.append(
                    f"profile {profile.index}: outputs differ beyond atol={atol} rtol={rtol}"
                )
    if failures:
        return VerifyResult(False, "; ".join(failures))
    return VerifyResult(True, f"{len(recipe.profiles)} profile(s) match ONNX Runtime")


def read_engine_profiles(plan_path: Path, trt: Any) -> list[OptimizationProfile]:
    """The optimization profiles stored in a plan (needs TensorRT and its GPU)."""
    from repokit.build.profiles import TensorProfile

    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    engine = runtime.deserialize_cuda_engine(plan_path.read_bytes())
    if engine is None:
        raise RuntimeError(f"TensorRT cannot deserialize {plan_path}")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    profiles: list[OptimizationProfile] = []
    for index in range(engine.num_optimization_profiles):
        tensors = []
        for name in inputs:
            shape_tensor = bool(engine.is_shape_inference_io(name))
            if shape_tensor:
                low, mid, high = engine.get_tensor_profile_values(index, name)
            else:
                low, mid, high = engine.get_tensor_profile_shape(name, index)
            tensors.append(TensorProfile(name, tuple(low), tuple(mid), tuple(high), shape_tensor))
        first = tensors[0] if tensors else None
        batch = (first.min[0], first.opt[0], first.max[0]) if first and first.min else None
        profiles.append(OptimizationProfile(index, batch, tuple(tensors)))
    return profiles


def profiles_for_plan(profiles: Sequence[OptimizationProfile]) -> list[str]:
    """instance_group.profile entries for ``profiles`` (indices as strings)."""
    return [str(p.index) for p in profiles]
