"""How ``repokit validate`` scales with the number of models.

Generates repositories of 100, 1,000 and 10,000 models (python models with and without dynamic
batching, ONNX models with and without a config, ensembles over python models) in a temporary
directory, times ``validate_repository`` in-process (best of 3) and the ``repokit validate`` CLI
once for 1,000 models, and prints per-model cost and the growth ratio between sizes (linear
growth keeps the per-model cost flat). Run: ``python benchmarks/validate_scale.py``;
``--profile N`` prints a cProfile of one in-process run at N models.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

from repokit.config.report import RepositoryReport, ValidateOptions

MODEL_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
"""

IO = (
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
)


def _onnx_bytes() -> bytes:
    """A real identity ONNX model (IN -> OUT, FP32 [-1, 16])."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["IN"], ["OUT"])],
        "identity",
        [helper.make_tensor_value_info("IN", TensorProto.FLOAT, [-1, 16])],
        [helper.make_tensor_value_info("OUT", TensorProto.FLOAT, [-1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return bytes(model.SerializeToString())


def _write(directory: Path, config: str | None, files: dict[str, bytes]) -> None:
    (directory / "1").mkdir(parents=True)
    if config is not None:
        (directory / "config.pbtxt").write_text(config)
    for name, data in files.items():
        (directory / "1" / name).write_bytes(data)


def generate(root: Path, count: int, onnx_model: bytes) -> None:
    """``count`` models in blocks of 10: 3 python, 3 python + dynamic batching, 2 ONNX with a
    config, 1 ONNX without one (auto-complete), 1 ensemble of two python models of its block."""
    py = {"model.py": MODEL_PY.encode()}
    for block in range(count // 10):
        base = f"b{block:05d}"
        for i in range(3):
            name = f"{base}_py{i}"
            _write(root / name, f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{IO}', py)
        for i in range(3):
            name = f"{base}_dyn{i}"
            config = (
                f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{IO}'
                "dynamic_batching { preferred_batch_size: [ 4, 8 ] "
                "max_queue_delay_microseconds: 100 }\n"
                "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
            )
            _write(root / name, config, py)
        for i in range(2):
            name = f"{base}_onnx{i}"
            config = f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n{IO}'
            _write(root / name, config, {"model.onnx": onnx_model})
        _write(root / f"{base}_auto", None, {"model.onnx": onnx_model})
        steps = (
            f'step [ {{ model_name: "{base}_py0" model_version: -1 '
            'input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "MID" } }, '
            f'{{ model_name: "{base}_dyn0" model_version: -1 '
            'input_map { key: "IN" value: "MID" } output_map { key: "OUT" value: "OUT" } } ]'
        )
        name = f"{base}_ens"
        config = (
            f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{IO}'
            f"ensemble_scheduling {{ {steps} }}\n"
        )
        _write(root / name, config, {})


def _validate(root: Path) -> RepositoryReport:
    from repokit.config.validate import validate_repository

    return validate_repository(root, ValidateOptions())


def time_in_process(root: Path, repeats: int = 3) -> tuple[float, int]:
    best = float("inf")
    errors = 0
    for _ in range(repeats):
        start = time.perf_counter()
        report = _validate(root)
        best = min(best, time.perf_counter() - start)
        errors = report.error_count
    return best, errors


def time_cli(root: Path) -> tuple[float, int]:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "repokit", "validate", str(root)],
        capture_output=True,
        check=False,
    )
    return time.perf_counter() - start, result.returncode


def profile(root: Path) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    _validate(root)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(25)
    stats.sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--cli-size", type=int, default=1_000)
    parser.add_argument("--profile", type=int, default=0, help="profile one run at this size")
    args = parser.parse_args()
    onnx_model = _onnx_bytes()
    with tempfile.TemporaryDirectory(prefix="repokit-scale-") as tmp:
        repos: dict[int, Path] = {}
        for size in sorted(
            set(args.sizes + [args.cli_size] + ([args.profile] if args.profile else []))
        ):
            repos[size] = Path(tmp) / f"repo{size}"
            generate(repos[size], size, onnx_model)
        if args.profile:
            profile(repos[args.profile])
            return
        header = ("models", "best of 3 (s)", "per model (ms)", "growth", "errors")
        print(machine())
        print("{:>8} {:>14} {:>15} {:>8} {:>7}".format(*header))
        previous: tuple[int, float] | None = None
        for size in args.sizes:
            seconds, errors = time_in_process(repos[size])
            growth = ""
            if previous is not None:
                ratio = (seconds / previous[1]) / (size / previous[0])
                growth = f"{ratio:.2f}x"
            print(
                f"{size:>8} {seconds:>14.3f} {seconds / size * 1000:>15.3f} {growth:>8} {errors:>7}"
            )
            previous = (size, seconds)
        print("growth = time ratio / size ratio against the previous row (1.00x = linear)")
        seconds, code = time_cli(repos[args.cli_size])
        print(
            f"CLI `repokit validate` on {args.cli_size} models: {seconds:.3f} s (exit code {code})"
        )


if __name__ == "__main__":
    main()
