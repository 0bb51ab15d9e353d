"""Models for the scheduling end-to-end tests: the sample ``batcher``/``accumulate``/ensemble
models plus small python models whose outputs reveal how they were scheduled.

``gated`` models return ORDER (how many executions the instance ran so far, warmup included)
and BATCH_SIZE (the batch the request ran in). A request whose INPUT0 is negative holds its
instance until the file ``gate`` exists in the model directory, so a test can keep an instance
busy, queue requests behind it, look at the queue, and then release it: no timing involved.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from repokit.paths import default_sample_repository

SAMPLE_MODELS = ("batcher", "accumulate", "add_sub", "add_sub_onnx", "add_sub_ensemble")

GATED_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.count = 0
        self.gate = os.path.join(args["model_repository"], "gate")

    def execute(self, requests):
        self.count += 1
        xs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        if any((x < 0).any() for x in xs):
            deadline = time.monotonic() + 60
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.002)
        batch = sum(x.shape[0] for x in xs)
        responses = []
        for x in xs:
            rows = x.shape[0]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", x),
                        pb_utils.Tensor("ORDER", np.full((rows, 1), self.count, np.int32)),
                        pb_utils.Tensor("BATCH_SIZE", np.full((rows, 1), batch, np.int32)),
                    ]
                )
            )
        return responses
"""

REFUSING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(error=pb_utils.TritonError("zeros are refused"))
            for _ in requests
        ]
"""

GATED_IO = """
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "ORDER" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "BATCH_SIZE" data_type: TYPE_INT32 dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
"""

WARMUP = """
model_warmup [ {
  name: "zeros" batch_size: 2 count: 3
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
} ]
"""

# name -> (max_batch_size, instance count, scheduling and extra config)
GATED: dict[str, tuple[int, int, str]] = {
    "preferred": (
        32,
        1,
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 60000000 }",
    ),
    "prio": (1, 1, "dynamic_batching { priority_levels: 2 default_priority_level: 2 }"),
    # Triton's largest: L0_model_queue test_max_priority_levels
    "prio_max": (
        1,
        1,
        "dynamic_batching { priority_levels: 18446744073709551615 "
        "default_priority_level: 4294967296 }",
    ),
    "qfull": (8, 1, "dynamic_batching { default_queue_policy { max_queue_size: 2 } }"),
    "timeouts": (
        1,
        1,
        "dynamic_batching { default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 100000 allow_timeout_override: true } }",
    ),
    "one_instance": (8, 1, ""),
    # batches of 2: a full one is final (sent early to a busy instance unless the queue is
    # bounded, as Triton prefetches payloads only without max_queue_size)
    "pairs": (2, 1, "dynamic_batching { }"),
    "pairs_bounded": (2, 1, "dynamic_batching { default_queue_policy { max_queue_size: 2 } }"),
    "gated_sequence": (1, 1, "sequence_batching { max_sequence_idle_microseconds: 60000000 }"),
    "two_instances": (8, 2, ""),
    "warm": (8, 2, WARMUP),
}

NESTED_ENSEMBLE = """
name: "nested_ensemble"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "X" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "Y" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "FOUR_X" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "FOUR_Y" data_type: TYPE_FP32 dims: [ 16 ] }
]
ensemble_scheduling { step [
  { model_name: "add_sub_ensemble" model_version: -1
    input_map { key: "A" value: "X" } input_map { key: "B" value: "Y" }
    output_map { key: "TWICE_A" value: "x2" } output_map { key: "TWICE_B" value: "y2" } },
  { model_name: "add_sub_ensemble" model_version: 1
    input_map { key: "A" value: "x2" } input_map { key: "B" value: "y2" }
    output_map { key: "TWICE_A" value: "FOUR_X" } output_map { key: "TWICE_B" value: "FOUR_Y" } }
] }
"""

# two independent steps: SUM from the onnx model, DIFF from the python one
FAN_ENSEMBLE = """
name: "fan_ensemble"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "DIFF" data_type: TYPE_FP32 dims: [ 16 ] }
]
ensemble_scheduling { step [
  { model_name: "add_sub_onnx" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" } },
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT1" value: "DIFF" } }
] }
"""

# an ensemble without batching over the batching python add_sub (max_batch_size 8)
NOBATCH_ENSEMBLE = """
name: "nobatch_ensemble"
platform: "ensemble"
max_batch_size: 0
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" } }
] }
"""


def _model(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    (repo / name / "1" / "model.py").write_text(code)


# an ensemble whose only step is a model that answers every request with an error
REFUSING_ENSEMBLE = """
name: "refusing_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "refusing" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""


def build_scheduling_repository(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    for name in SAMPLE_MODELS:
        shutil.copytree(default_sample_repository() / name, repo / name)
    for name, (mbs, count, extra) in GATED.items():
        _model(repo, name, GATED_IO.format(mbs=mbs, count=count) + extra, GATED_MODEL)
    _model(repo, "warm_fail", GATED_IO.format(mbs=8, count=1) + WARMUP, REFUSING_MODEL)
    _model(repo, "refusing", GATED_IO.format(mbs=8, count=1), REFUSING_MODEL)
    for name, text in (
        ("nested_ensemble", NESTED_ENSEMBLE),
        ("fan_ensemble", FAN_ENSEMBLE),
        ("refusing_ensemble", REFUSING_ENSEMBLE),
        ("nobatch_ensemble", NOBATCH_ENSEMBLE),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    # add_sub_onnx with two instances on the onnxruntime thread pool
    shutil.copytree(default_sample_repository() / "add_sub_onnx", repo / "add_sub_onnx2")
    config = repo / "add_sub_onnx2" / "config.pbtxt"
    config.write_text(
        config.read_text()
        .replace('name: "add_sub_onnx"', 'name: "add_sub_onnx2"')
        .replace("count: 1", "count: 2")
    )
    return repo


def idle_accumulate(repo: Path, idle_us: int) -> Path:
    """A copy of ``accumulate`` (as ``accumulate_idle``) whose sequences expire after idle_us."""
    target = repo / "accumulate_idle"
    shutil.copytree(default_sample_repository() / "accumulate", target)
    config = target / "config.pbtxt"
    config.write_text(
        config.read_text()
        .replace('name: "accumulate"', 'name: "accumulate_idle"')
        .replace(
            "max_sequence_idle_microseconds: 5000000", f"max_sequence_idle_microseconds: {idle_us}"
        )
    )
    return target
