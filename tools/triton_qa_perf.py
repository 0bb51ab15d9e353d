#!/usr/bin/env python3
"""Triton 2.51's ``qa/L0_perf_analyzer/test.sh`` command lines, run with ``repokit perf``.

The test drives perf_analyzer against graphdef/savedmodel models and checks exit codes and
greps in perf_analyzer's output. This tool lays out python stand-ins with the same names, inputs,
outputs and configs (the same arithmetic where the test validates outputs), starts
``repokit serve`` and/or real Triton 2.51 (``tools/triton_reference.py``) with the test's flags,
runs each applicable command line with ``repokit perf`` in perf_analyzer's place (with ``-u``
for the server's port; measurement windows shortened to 500 ms) and applies the test's checks.
The input-data JSON files and the ``optional`` / ``repeat_int32`` python models are read at run
time from the git dirs of Triton's server and python_backend repositories; nothing of Triton's is
in this repository.

    python tools/triton_qa_perf.py --server-git DIR --backend-git DIR [--target repokit|triton|both]
        [-k PATTERN] [--list] [--keep --workdir D] [-v]

Cases of the test that cannot run here are listed by ``--list`` with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from repokit.parent_death import popen_tied
from tools.triton_git import extract
from tools.triton_reference import TritonServer, free_ports

REF = "v2.51.0"
BACKEND_REF = "r24.10"
DATA = "qa/common/perf_analyzer_input_data_json"
ERROR_STRING = "error | Request count: 0 | : 0 infer/sec"
NO_ZERO = "error | Request count: 0 | : 0 infer/sec|: 0 usec|Request concurrency: 2"
STABILITY = ["-s", "100"]
NOT_APPLICABLE = {
    "shared memory cuda": "no GPU here (and repokit serve has no CUDA shared memory)",
    "plan_zero_1_float32_int32 (shape tensors)": "TensorRT shape tensors: no TensorRT backend",
    "MPI / --enable-mpi (custom_zero_1_float32)": "needs mpiexec and perf_analyzer's MPI build",
    "HTTPS through nginx": "needs an nginx proxy on port 443 (root)",
    "concurrency 1500:2000:250 with 512 --input-data": "too heavy for a 2-core machine "
    "(run with --heavy)",
}

ADD_SUB = """import json

import numpy as np
import triton_python_backend_utils as pb_utils


def as_int(array):
    if array.dtype == np.object_:
        values = []
        for item in array.flat:
            try:
                values.append(int(item))
            except ValueError:
                values.append(0)
        return np.array(values, dtype=np.int64).reshape(array.shape)
    return array.astype(np.int64)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in config["output"]
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = as_int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            b = as_int(pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy())
            tensors = []
            for (name, dtype), value in zip(self.outputs, (a - b, a + b)):
                if dtype == np.object_:
                    value = np.array([str(v).encode() for v in value.flat], dtype=np.object_)
                    value = value.reshape(a.shape)
                tensors.append(pb_utils.Tensor(name, value.astype(dtype)))
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
"""

ZEROS = """import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        output = config["output"][0]
        self.name = output["name"]
        self.dims = [int(d) for d in output["dims"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            batch = request.inputs()[0].as_numpy().shape[0]
            value = np.zeros([batch] + self.dims, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.name, value)]))
        return responses
"""

# qa's batching sequence models: OUTPUT = INPUT + START when READY, else 0
SEQUENCE = """import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(config["output"][0]["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            if raw.dtype == np.object_:
                # padding of an idle batch slot is b"" (the qa model reads "0" + INPUT)
                value = np.array([int(b"0" + v) for v in raw.flat], dtype=np.int64)
                value = value.reshape(raw.shape)
            else:
                value = raw.astype(np.int64 if raw.dtype.kind in "iu" else np.float64)
            out = np.where(ready.reshape(-1, 1) != 0, value + start.reshape(-1, 1), 0)
            if self.dtype == np.object_:
                out = np.array([str(int(v)).encode() for v in out.flat], dtype=np.object_)
                out = out.reshape(raw.shape)
            else:
                out = out.astype(self.dtype)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return responses
"""


def _io(kind: str, name: str, dtype: str, dims: str) -> str:
    return f'{kind} [ {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }} ]\n'


def _add_sub_config(name: str, batch: int, in_t: str, out0: str, out1: str, dims: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {batch}\n'
        + f'input [ {{ name: "INPUT0" data_type: {in_t} dims: [ {dims} ] }},'
        f' {{ name: "INPUT1" data_type: {in_t} dims: [ {dims} ] }} ]\n'
        + f'output [ {{ name: "OUTPUT0" data_type: {out0} dims: [ {dims} ] }},'
        f' {{ name: "OUTPUT1" data_type: {out1} dims: [ {dims} ] }} ]\n'
    )


def _sequence_config(name: str, dtype: str, dims: str, control: str) -> str:
    field = "fp32_false_true" if control == "TYPE_FP32" else "int32_false_true"
    values = "[ 0, 1 ]"
    controls = ", ".join(
        f'{{ name: "{n}" control [ {{ kind: {k} {field}: {values} }} ] }}'
        for n, k in (("START", "CONTROL_SEQUENCE_START"), ("READY", "CONTROL_SEQUENCE_READY"))
    )
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        f"sequence_batching {{ max_sequence_idle_microseconds: 5000000 "
        f"control_input [ {controls} ] }}\n"
        + _io("input", "INPUT", dtype, dims)
        + _io("output", "OUTPUT", dtype, dims)
    )


def _write_model(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(code)


def build_repository(repo: Path, server_git: Path, backend_git: Path, scratch: Path) -> None:
    """The test's model repository, as python stand-ins (same names, IO and configs)."""
    i32, s, f32 = "TYPE_INT32", "TYPE_STRING", "TYPE_FP32"
    scratch.mkdir(parents=True, exist_ok=True)
    for name, batch, types, dims in (
        ("graphdef_int32_int32_int32", 8, (i32, i32, i32), "16"),
        ("graphdef_nobatch_int32_int32_int32", 0, (i32, i32, i32), "16"),
        ("graphdef_object_object_object", 8, (s, s, s), "16"),
        ("graphdef_nobatch_object_object_object", 0, (s, s, s), "16"),
        ("graphdef_object_int32_int32", 8, (s, i32, i32), "-1, -1"),
        ("graphdef_int32_int32_float32", 8, (i32, i32, f32), "-1, -1, -1"),
    ):
        _write_model(repo, name, _add_sub_config(name, batch, *types, dims), ADD_SUB)
    _write_model(
        repo,
        "inception_v1_graphdef",
        'name: "inception_v1_graphdef"\nbackend: "python"\nmax_batch_size: 128\n'
        + _io("input", "input", f32, "224, 224, 3")
        + _io("output", "InceptionV1/Logits/Predictions/Softmax", f32, "1001"),
        ZEROS,
    )
    _write_model(
        repo,
        "simple_savedmodel_sequence_object",
        _sequence_config("simple_savedmodel_sequence_object", s, "1", i32),
        SEQUENCE,
    )
    _write_model(
        repo,
        "graphdef_sequence_float32",
        _sequence_config("graphdef_sequence_float32", f32, "-1", f32),
        SEQUENCE,
    )
    extract(server_git, REF, ["qa/python_models/optional"], scratch)
    optional = scratch / "qa/python_models/optional"
    config = (
        (optional / "config.pbtxt").read_text().replace("max_batch_size: 0", "max_batch_size: 2")
    )
    _write_model(repo, "optional", config, (optional / "model.py").read_text())
    extract(backend_git, BACKEND_REF, ["examples/decoupled"], scratch)
    decoupled = scratch / "examples/decoupled"
    _write_model(
        repo,
        "repeat_int32",
        (decoupled / "repeat_config.pbtxt").read_text(),
        (decoupled / "repeat_model.py").read_text(),
    )


@dataclasses.dataclass
class Case:
    name: str
    args: list[str]
    expect_success: bool = True
    must_not: str | None = None  # a grep -E pattern that must not match
    must: str | None = None  # a grep -E pattern that must match
    check: str | None = None  # extra check: "trace", "decoupled_export", "server_log"
    timeout: float = 300.0
    keep_interval: bool = False  # the server's trace needs the test's windows (-p 2000)


def _short(args: list[str]) -> list[str]:
    """-pN / -p N as 500 ms windows (added where the test uses the 5 s default)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "-p":
            skip = True
            continue
        if re.fullmatch(r"-p\d+", arg):
            continue
        out.append(arg)
    if "count_windows" in out:
        return out
    return [*out, "-p", "500"]


def cases(data: Path, testdata: Path, schedule: Path, heavy: bool) -> list[Case]:
    seq = f"--input-data={data / 'seq_data.json'}"
    result: list[Case] = [
        Case(
            "unset PROTOCOL: -i -m graphdef_object_object_object fails, no dynamic-shape message",
            ["-v", "-i", "-m", "graphdef_object_object_object", "-p2000", *STABILITY],
            expect_success=False,
            must_not="input INPUT0 contains dynamic shape, provide shapes",
        ),
        Case(
            "grpc streaming sequence -t5, two --input-data",
            [
                "-v",
                "-i",
                "grpc",
                "-m",
                "simple_savedmodel_sequence_object",
                "-p",
                "2000",
                "-t5",
                "--streaming",
                seq,
                seq,
                *STABILITY,
            ],
            must_not=ERROR_STRING,
        ),
        Case(
            "grpc streaming sequence --request-rate-range 100:200:50",
            [
                "-v",
                "-i",
                "grpc",
                "-m",
                "simple_savedmodel_sequence_object",
                "-p",
                "1000",
                "--request-rate-range",
                "100:200:50",
                "--streaming",
                seq,
                *STABILITY,
            ],
            must_not=ERROR_STRING,
            check="server_log",
        ),
    ]
    for protocol in ("grpc", "http"):
        p = ["-v", "-i", protocol]
        for shm in ("none", "system"):
            for model, threads, batch in (
                ("graphdef_int32_int32_int32", "1", "1"),
                ("inception_v1_graphdef", "1", "1"),
                ("inception_v1_graphdef", "2", "64"),
            ):
                for extra in ([], ["-a"]):
                    result.append(
                        Case(
                            " ".join(
                                [protocol, model, "-t", threads, "-b", batch, "shm", shm, *extra]
                            ),
                            [
                                *p,
                                "-m",
                                model,
                                "-t",
                                threads,
                                "-p2000",
                                "-b",
                                batch,
                                f"--shared-memory={shm}",
                                *extra,
                                *STABILITY,
                            ],
                            must_not=ERROR_STRING,
                        )
                    )
        for model in ("graphdef_nobatch_int32_int32_int32", "graphdef_int32_int32_int32"):
            result.append(
                Case(
                    f"{protocol} {model} -b 1",
                    [*p, "-m", model, "-t", "1", "-p2000", "-b", "1", *STABILITY],
                )
            )
            for batch in ("0", "10"):
                result.append(
                    Case(
                        f"{protocol} {model} -b {batch} fails",
                        [*p, "-m", model, "-t", "1", "-p2000", "-b", batch, *STABILITY],
                        expect_success=False,
                    )
                )
        m = ["-m", "graphdef_int32_int32_int32"]
        int_json = f"--input-data={data / 'int_data.json'}"
        result += [
            Case(f"{protocol} defaults", [*p, *m, *STABILITY], must_not=ERROR_STRING),
            Case(
                f"{protocol} --concurrency-range 1:5:2",
                [*p, *m, "--concurrency-range", "1:5:2", *STABILITY],
                must_not=NO_ZERO,
            ),
            Case(
                f"{protocol} --concurrency-range 1:5:2 int_data.json",
                [*p, *m, "--concurrency-range", "1:5:2", int_json, *STABILITY],
                must_not=NO_ZERO,
            ),
            Case(
                f"{protocol} --request-rate-range 1000:2000:500 -a",
                [
                    *p,
                    *m,
                    "--request-rate-range",
                    "1000:2000:500",
                    "-p1000",
                    "-b",
                    "1",
                    "-a",
                    *STABILITY,
                ],
                must_not=ERROR_STRING,
            ),
            Case(
                f"{protocol} --request-rate-range 1000:2000:500 -a int_data.json",
                [
                    *p,
                    *m,
                    "--request-rate-range",
                    "1000:2000:500",
                    int_json,
                    "-p1000",
                    "-b",
                    "1",
                    "-a",
                    *STABILITY,
                ],
                must_not=ERROR_STRING,
            ),
            Case(
                f"{protocol} rate binary search poisson -l 10",
                [
                    *p,
                    *m,
                    "--request-rate-range",
                    "1000:2000:100",
                    "-p1000",
                    "-b",
                    "1",
                    "-a",
                    "--binary-search",
                    "--request-distribution",
                    "poisson",
                    "-l",
                    "10",
                    *STABILITY,
                ],
                must_not=ERROR_STRING,
            ),
            Case(
                f"concurrency binary search (http default, {protocol} loop) does not hang",
                [
                    "-v",
                    "-a",
                    "--request-distribution",
                    "poisson",
                    "--shared-memory",
                    "none",
                    "--percentile",
                    "99",
                    "--binary-search",
                    "--concurrency-range",
                    "1:8:2",
                    "-l",
                    "5",
                    *m,
                    "-b",
                    "1",
                    *STABILITY,
                ],
                expect_success=None,  # type: ignore[arg-type]
                must_not=ERROR_STRING,
                timeout=200,
            ),
        ]
        obj = ["-m", "graphdef_object_object_object"]
        var = ["-m", "graphdef_object_int32_int32"]
        for shm in ("none", "system"):
            shm_arg = f"--shared-memory={shm}"
            string_json = f"--input-data={data / 'string_data.json'}"
            result += [
                Case(
                    f"{protocol} strings --string-data=1 shm {shm}",
                    [*p, *obj, "--string-data=1", "-p2000", shm_arg, *STABILITY],
                    must_not=ERROR_STRING,
                ),
                Case(
                    f"{protocol} strings from a directory shm {shm}",
                    [*p, *obj, f"--input-data={testdata}", "-p2000", shm_arg, *STABILITY],
                    must_not=ERROR_STRING,
                ),
                Case(
                    f"{protocol} strings string_data.json x2 shm {shm}",
                    [*p, *obj, string_json, string_json, "-p2000", shm_arg, *STABILITY],
                    must_not=ERROR_STRING,
                ),
                Case(
                    f"{protocol} variable strings from a directory --shape shm {shm}",
                    [
                        *p,
                        *var,
                        f"--input-data={testdata}",
                        "--shape",
                        "INPUT0:2,8",
                        "--shape",
                        "INPUT1:2,8",
                        "-p2000",
                        shm_arg,
                        *STABILITY,
                    ],
                    must_not=ERROR_STRING,
                ),
                Case(
                    f"{protocol} variable strings string_data_with_shape.json shm {shm}",
                    [
                        *p,
                        *var,
                        f"--input-data={data / 'string_data_with_shape.json'}",
                        "--shape",
                        "INPUT0:2,8",
                        "--shape",
                        "INPUT1:2,8",
                        "-p2000",
                        shm_arg,
                        *STABILITY,
                    ],
                    must_not=ERROR_STRING,
                ),
            ]
        f32 = [
            "-m",
            "graphdef_int32_int32_float32",
            "--shape",
            "INPUT0:2,8,2",
            "--shape",
            "INPUT1:2,8,2",
        ]
        result.append(
            Case(
                f"{protocol} variable int32 --shape",
                [*p, *f32, "-p2000", *STABILITY],
                must_not=ERROR_STRING,
            )
        )
        for shm in ("none", "system"):
            result.append(
                Case(
                    f"{protocol} JSON shapes unlike --shape fail (-b 4, shm {shm})",
                    [
                        *p,
                        *f32,
                        "-p2000",
                        "-b",
                        "4",
                        f"--shared-memory={shm}",
                        f"--input-data={data / 'int_data_diff_shape.json'}",
                        *STABILITY,
                    ],
                    expect_success=False,
                    must="The supplied shape .+ is incompatible with the model's input shape",
                )
            )
        sq = ["-m", "simple_savedmodel_sequence_object"]
        result += [
            Case(
                f"{protocol} sequence -t5 --sync",
                [*p, *sq, "-p", "2000", "-t5", "--sync", seq, *STABILITY],
                must_not=ERROR_STRING,
            ),
            Case(
                f"{protocol} sequence --request-rate-range 100:200:50 --sync",
                [
                    *p,
                    *sq,
                    "-p",
                    "1000",
                    "--request-rate-range",
                    "100:200:50",
                    "--sync",
                    seq,
                    *STABILITY,
                ],
                must_not=ERROR_STRING,
            ),
        ]
        for shm in ("none", "system"):
            float_json = f"--input-data={data / 'float_data_with_shape.json'}"
            result.append(
                Case(
                    f"grpc variable sequence shapes unlike --shape fail ({protocol} loop, {shm})",
                    [
                        "-v",
                        "-i",
                        "grpc",
                        "-m",
                        "graphdef_sequence_float32",
                        "--shape",
                        "INPUT:2",
                        float_json,
                        float_json,
                        "-p2000",
                        f"--shared-memory={shm}",
                        *STABILITY,
                    ],
                    expect_success=False,
                    must="The supplied shape .+ is incompatible with the model's input shape",
                )
            )
        result += [
            Case(
                f"{protocol} --trace-level TIMESTAMPS writes the server's trace",
                [
                    *p,
                    *sq,
                    "-p",
                    "2000",
                    "-t5",
                    "--sync",
                    "--trace-level",
                    "TIMESTAMPS",
                    "--trace-rate",
                    "1000",
                    "--trace-count",
                    "100",
                    "--log-frequency",
                    "10",
                    seq,
                    *STABILITY,
                ],
                must_not=ERROR_STRING,
                check="trace",
                keep_interval=True,
            ),
            Case(
                f"{protocol} --trace-file is refused",
                [*p, *sq, "--trace-file", "trace.json"],
                expect_success=False,
            ),
        ]
    m = ["-v", "-m", "graphdef_int32_int32_int32"]
    sq_grpc = ["-v", "-m", "simple_savedmodel_sequence_object", "-i", "grpc", "--streaming"]
    optional = [
        "-v",
        "-m",
        "optional",
        "--measurement-mode",
        "count_windows",
        f"--input-data={data / 'int_data_optional.json'}",
        *STABILITY,
    ]
    result += [
        Case(
            "validation_data not aligned",
            [*m, f"--input-data={data / 'non_aligned_output.json'}", *STABILITY],
            expect_success=False,
            must="The 'validation_data' field doesn't align with 'data' field in the json file",
        ),
        Case(
            "validation_data of the wrong size",
            [*m, f"--input-data={data / 'wrong_output.json'}", *STABILITY],
            expect_success=False,
            must="mismatch in the data provided",
        ),
        Case(
            "validation_data that differs",
            [*m, f"--input-data={data / 'wrong_output_2.json'}", *STABILITY],
            expect_success=False,
            must="Output doesn't match expected output",
        ),
        Case(
            "validation_data that matches",
            [*m, f"--input-data={data / 'output.json'}", *STABILITY],
            must_not=ERROR_STRING,
        ),
        Case(
            "sequence validation_data that differs",
            [*sq_grpc, f"--input-data={data / 'seq_wrong_output.json'}", *STABILITY],
            expect_success=False,
            must="Output doesn't match expected output",
        ),
        Case(
            "sequence validation_data that matches",
            [*sq_grpc, f"--input-data={data / 'seq_output.json'}", *STABILITY],
            must_not=ERROR_STRING,
        ),
        Case(
            "count_windows: a wrong --shape fails with the server's error",
            [
                "-v",
                "-m",
                "graphdef_object_int32_int32",
                "--measurement-mode",
                "count_windows",
                "--shape",
                "INPUT0:1,8,100",
                "--shape",
                "INPUT1:2,8",
                "--string-data=1",
                *STABILITY,
            ],
            expect_success=False,
            must="unexpected shape for input 'INPUT0' for model",
        ),
        Case(
            "count_windows with --shape",
            [
                "-v",
                "-m",
                "graphdef_object_int32_int32",
                "--measurement-mode",
                "count_windows",
                "--shape",
                "INPUT0:2,8",
                "--shape",
                "INPUT1:2,8",
                "--string-data=1",
                *STABILITY,
            ],
            must_not=ERROR_STRING,
        ),
        Case("optional inputs missing", optional),
        Case(
            "optional inputs missing with -b 2 fail",
            [*optional, "-b", "2"],
            expect_success=False,
            must="For batch sizes larger than 1, the same set of|inputs must be specified for "
            "each batch. You cannot use different set of|optional inputs for each individual "
            "batch.",
        ),
        Case(
            "--request-intervals",
            ["-v", "-i", "grpc", *m[1:], "--request-intervals", str(schedule)],
            must_not=ERROR_STRING,
            must="Request Rate: 40",
        ),
        Case(
            "--serial-sequences --request-rate-range",
            [
                "-v",
                "-i",
                "http",
                "-m",
                "simple_savedmodel_sequence_object",
                "-p",
                "1000",
                "--request-rate-range",
                "100:200:50",
                "--serial-sequences",
                seq,
                *STABILITY,
            ],
            must_not=ERROR_STRING,
        ),
        Case(
            "--serial-sequences --request-intervals",
            [
                "-v",
                "-i",
                "http",
                "-m",
                "simple_savedmodel_sequence_object",
                "-p",
                "1000",
                "--request-intervals",
                str(schedule),
                "--serial-sequences",
                seq,
                *STABILITY,
            ],
            must_not=ERROR_STRING,
        ),
        Case(
            "decoupled repeat_int32 --async --streaming exports several responses",
            [
                "-v",
                "-m",
                "repeat_int32",
                f"--input-data={data / 'repeat_int32_data.json'}",
                "--profile-export-file",
                "profile_export.json",
                "-i",
                "grpc",
                "--async",
                "--streaming",
                *STABILITY,
            ],
            check="decoupled_export",
        ),
        Case("defaults (the no-MPI run)", [*m, *STABILITY]),
    ]
    if heavy:
        many = [f"--input-data={data / 'seq_data.json'}"] * 512
        result.append(
            Case(
                "concurrency 1500:2000:250 with 512 --input-data",
                [
                    "-v",
                    "-m",
                    "simple_savedmodel_sequence_object",
                    "-p",
                    "10000",
                    "--concurrency-range",
                    "1500:2000:250",
                    "-i",
                    "grpc",
                    "--streaming",
                    *many,
                    *STABILITY,
                ],
                must_not=ERROR_STRING,
                timeout=900,
            )
        )
    return result


@dataclasses.dataclass
class Server:
    kind: str
    http: int
    grpc: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    triton: TritonServer | None = None

    def stop(self) -> None:
        if self.triton is not None:
            self.triton.stop()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _ready(http: int, models: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://localhost:{http}/v2/health/ready", timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return False


@contextmanager
def server(kind: str, repo: Path, flags: list[str], workdir: Path) -> Iterator[Server]:
    log = workdir / f"{kind}.log"
    if kind == "triton":
        triton = TritonServer(repo, log, flags)
        triton.start()
        srv = Server(kind, triton.http_port, triton.grpc_port, log, triton=triton)
    else:
        http, grpc, metrics = free_ports(3)
        command = [
            sys.executable,
            "-m",
            "repokit",
            "serve",
            "--model-repository",
            str(repo),
            f"--http-port={http}",
            f"--grpc-port={grpc}",
            f"--metrics-port={metrics}",
            "--allow-client-shm=true",
            *flags,
        ]
        with log.open("wb") as out:
            process = popen_tied(command, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
        srv = Server(kind, http, grpc, log, process=process)
    try:
        if not _ready(srv.http, 0, 180):
            raise RuntimeError(f"{kind} did not become ready:\n{srv.log_text()[-3000:]}")
        yield srv
    finally:
        srv.stop()


def with_url(args: list[str], srv: Server) -> list[str]:
    protocol = args[args.index("-i") + 1] if "-i" in args else "http"
    port = srv.grpc if protocol == "grpc" else srv.http
    return [*args, "-u", f"localhost:{port}"]


def run_case(case: Case, srv: Server, workdir: Path, verbose: bool) -> tuple[bool, str]:
    args = case.args if case.keep_interval else _short(case.args)
    command = [sys.executable, "-m", "repokit", "perf", *with_url(args, srv)]
    trace_files = list(workdir.glob("trace.json*"))
    for path in trace_files:
        path.unlink()
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=case.timeout,
            env={**os.environ, "COLUMNS": "200"},
        )
    except subprocess.TimeoutExpired:
        return False, f"still running after {case.timeout:.0f} s"
    output = done.stdout + done.stderr
    took = time.monotonic() - started
    problems: list[str] = []
    if case.expect_success is True and done.returncode != 0:
        problems.append(f"exit {done.returncode}, expected 0")
    if case.expect_success is False and done.returncode == 0:
        problems.append("exit 0, expected a failure")
    if case.must_not and re.search(case.must_not, output):
        problems.append(f"output matches '{case.must_not}'")
    if case.must and not re.search(case.must, output):
        problems.append(f"output lacks '{case.must}'")
    if (
        case.check == "server_log"
        and "The previous sequence did not end before this sequence start" in srv.log_text()
    ):
        problems.append("server logged a sequence conflict")
    if case.check == "trace":
        text = "".join(p.read_text(errors="replace") for p in workdir.glob("trace.json*"))
        if "REQUEST_START" not in text:
            problems.append("no REQUEST_START in the server's trace file")
        _trace_off(srv)
    if case.check == "decoupled_export":
        try:
            export = json.loads((workdir / "profile_export.json").read_text())
            requests = export["experiments"][0]["requests"]
            if not any(len(r["response_timestamps"]) > 1 for r in requests):
                problems.append("no request with several response_timestamps in the export")
        except (OSError, ValueError, KeyError, IndexError) as error:
            problems.append(f"profile export unusable: {error!r}")
    detail = "; ".join(problems) or f"exit {done.returncode}"
    if verbose or problems:
        tail = "\n".join(output.strip().splitlines()[-6:])
        detail += f" ({took:.1f} s)\n      " + tail.replace("\n", "\n      ")
    return not problems, detail


def _trace_off(srv: Server) -> None:
    request = urllib.request.Request(
        f"http://localhost:{srv.http}/v2/trace/setting",
        data=b'{"trace_level":["OFF"]}',
        method="POST",
    )
    with contextlib.suppress(OSError):
        urllib.request.urlopen(request, timeout=5).read()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-git", type=Path, default=os.environ.get("TRITON_SERVER_GIT"))
    parser.add_argument(
        "--backend-git", type=Path, default=os.environ.get("TRITON_PYTHON_BACKEND_GIT")
    )
    parser.add_argument("--target", choices=("repokit", "triton", "both"), default="repokit")
    parser.add_argument("-k", action="append", default=[], help="run cases whose name has this")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--heavy", action="store_true", help="also the 1500-2000 concurrency case")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path, help="write {target: {case: passed}} here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="qa_perf_"))
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / DATA
    testdata = workdir / "test_data"
    schedule = testdata / "custom.schedule"
    selected = [
        c
        for c in cases(data, testdata, schedule, args.heavy)
        if not args.k or any(k in c.name for k in args.k)
    ]
    if args.list:
        for case in selected:
            print(case.name)
        for name, reason in NOT_APPLICABLE.items():
            print(f"not applicable: {name}: {reason}")
        return 0
    if args.server_git is None or args.backend_git is None:
        parser.error("--server-git and --backend-git (or their environment variables) are needed")
    try:
        extract(args.server_git, REF, [DATA], workdir)
        testdata.mkdir(exist_ok=True)
        for name in ("INPUT0", "INPUT1"):
            (testdata / name).write_text("1\n" * 16)
        schedule.write_text("30000\n10000\n40000\n20000\n25000\n")
        repo = workdir / "models"
        build_repository(repo, args.server_git, args.backend_git, workdir / "scratch")
        flags = ["--trace-config", f"triton,file={workdir / 'trace.json'}"]
        targets = ["triton", "repokit"] if args.target == "both" else [args.target]
        results: dict[str, dict[str, bool]] = {}
        for kind in targets:
            results[kind] = {}
            with server(kind, repo, flags, workdir) as srv:
                for case in selected:
                    passed, detail = run_case(case, srv, workdir, args.verbose)
                    results[kind][case.name] = passed
                    print(
                        f"{kind:8} {'PASS' if passed else 'FAIL'}  {case.name}: {detail}",
                        flush=True,
                    )
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
        for kind, outcome in results.items():
            print(f"{kind}: {sum(outcome.values())}/{len(outcome)} passed")
        return 0 if all(all(o.values()) for o in results.values()) else 1
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
