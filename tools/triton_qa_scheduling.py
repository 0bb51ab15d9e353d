"""Triton's qa suites of the schedulers (queues, priorities, rate limiter, sequence batchers,
implicit state, cancellation) as ``triton_qa.py`` scenarios.

Triton's test-only backends (``identity`` with ``execute_delay_ms``, ``sequence``,
``dyna_sequence``) are not in its python package: their models run as python stand-ins with
the same configs, on both servers. Nothing here is Triton's text: test files and configs are
read from a git dir at run time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tools.triton_examples import ACCUMULATOR
from tools.triton_qa_suites import (
    SEQUENCE_DELAYED,
    SEQUENCE_NO_DELAY,
    SEQUENCE_TRIALS,
    Layout,
    LogCheck,
    PytestRun,
    Scenario,
    _delayed_identity,
    append,
    sed,
)

MQ = "L0_model_queue"

# test.sh's dynamic_batching block per test (appended to custom_zero_1_float32's config)
MODEL_QUEUE_BATCHING = {
    "test_max_queue_size": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8 ]",
        "    default_queue_policy {",
        "        max_queue_size: 8",
        "    }",
        "}",
        "parameters [",
        '{ key: "execute_delay_ms"; value: { string_value: "5000" }}',
        "]",
    ),
    "test_policy_delay": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8 ]",
        "    max_queue_delay_microseconds: 10000000",
        "    default_queue_policy {",
        "        timeout_action: DELAY",
        "        default_timeout_microseconds: 100000",
        "    }",
        "}",
    ),
    "test_policy_reject": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8 ]",
        "    max_queue_delay_microseconds: 10000000",
        "    default_queue_policy {",
        "        default_timeout_microseconds: 100000",
        "    }",
        "}",
    ),
    "test_timeout_override": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8 ]",
        "    max_queue_delay_microseconds: 10000000",
        "    default_queue_policy {",
        "        allow_timeout_override: true",
        "        default_timeout_microseconds: 1000000",
        "    }",
        "}",
    ),
    "test_priority_levels": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8 ]",
        "    max_queue_delay_microseconds: 10000000",
        "    priority_levels: 2",
        "    default_priority_level: 2",
        "}",
    ),
    "test_max_priority_levels": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8 ]",
        "    max_queue_delay_microseconds: 10000000",
        "    priority_levels: 18446744073709551615",
        "    default_priority_level: 4294967296",
        "}",
    ),
    "test_priority_with_policy": (
        "dynamic_batching { ",
        "    preferred_batch_size: [ 4, 8, 32 ]",
        "    max_queue_delay_microseconds: 10000000",
        "    priority_levels: 2",
        "    default_priority_level: 2",
        "    default_queue_policy {",
        "        timeout_action: DELAY",
        "        allow_timeout_override: true",
        "        default_timeout_microseconds: 11000000",
        "    }",
        "    priority_queue_policy {",
        "        key: 2",
        "        value: {",
        "            timeout_action: REJECT",
        "            allow_timeout_override: true",
        "            default_timeout_microseconds: 11000000",
        "        }",
        "    }",
        "}",
    ),
}


def _model_queue_models(lines: tuple[str, ...]) -> Layout:
    """test.sh's models: its ensemble_zero_1_float32 over custom_zero_1_float32 (dims [-1],
    batches of up to 32, one CPU instance, the test's dynamic_batching block); the identity
    model with its execute_delay_ms is a python stand-in."""

    def lay(qa: Path, repo: Path) -> None:
        ensemble = repo / "ensemble_zero_1_float32"
        shutil.copytree(qa / MQ / "ensemble_zero_1_float32", ensemble)
        (ensemble / "1").mkdir(exist_ok=True)
        folder = repo / "custom_zero_1_float32"
        shutil.copytree(qa / "custom_models" / "custom_zero_1_float32", folder)
        config = folder / "config.pbtxt"
        sed(config, r"dims:.*\[.*\]", "dims: [ -1 ]")
        sed(config, r"max_batch_size:.*", "max_batch_size: 32")
        append(config, "instance_group [ { kind: KIND_CPU count: 1 }]", *lines)
        _delayed_identity(folder)

    return lay


def model_queue() -> list[Scenario]:
    """L0_model_queue: one server per test, as test.sh runs them."""
    return [
        Scenario(
            f"{MQ}/{test}",
            MQ,
            _model_queue_models(lines),
            [PytestRun(f"model_queue_test.py::ModelQueueTest::{test}", runner="unittest")],
            verbose=False,
        )
        for test, lines in MODEL_QUEUE_BATCHING.items()
    ]


RC = "L0_request_cancellation"


def _identity_model(name: str, *lines: str) -> Layout:
    """``mkdir -p models/NAME/1`` and test.sh's ``echo``ed config of an identity model
    (a python stand-in, with its execute_delay_ms)."""

    def lay(qa: Path, repo: Path) -> None:
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(
            "\n".join((f'name: "{name}"', 'backend: "identity"', *lines)) + "\n"
        )
        if 'backend: "identity"' in (folder / "config.pbtxt").read_text():
            _delayed_identity(folder)

    return lay


def _io(dtype: str) -> tuple[str, str]:
    return (
        f'input [{{ name: "INPUT0" \n data_type: {dtype} \n dims: [ -1 ] }}]',
        f'output [{{ name: "OUTPUT0" \n data_type: {dtype} \n dims: [ -1 ] }}]',
    )


def _delay(ms: int) -> str:
    return f'parameters [{{ key: "execute_delay_ms" \n value: {{ string_value: "{ms}" }} }}]'


def _cancellation_models(qa: Path, repo: Path) -> None:
    """test.sh's models for scheduler_test.py: a dynamic batcher, a direct and an oldest
    sequence batcher (6 s executions) and an ensemble of two dynamic_batch steps."""
    one = "instance_group [{ count: 1 \n kind: KIND_CPU }]"
    _identity_model(
        "dynamic_batch",
        "max_batch_size: 2",
        *_io("TYPE_FP32"),
        one,
        "dynamic_batching { max_queue_delay_microseconds: 600000 }",
        _delay(6000),
    )(qa, repo)
    for name, strategy in (
        ("sequence_direct", "direct { }"),
        ("sequence_oldest", "oldest { max_candidate_sequences: 1 }"),
    ):
        _identity_model(
            name,
            "max_batch_size: 1",
            *_io("TYPE_FP32"),
            one,
            f"sequence_batching {{ {strategy} \n max_sequence_idle_microseconds: 6000000 }}",
            _delay(6000),
        )(qa, repo)
    ensemble = repo / "ensemble_model"
    (ensemble / "1").mkdir(parents=True)
    step = (
        '{{ model_name: "dynamic_batch" \n model_version: -1 \n input_map {{ key: "INPUT0"'
        ' \n value: "{0}" }} \n output_map {{ key: "OUTPUT0" \n value: "{1}" }} }}'
    )
    (ensemble / "config.pbtxt").write_text(
        "\n".join(
            (
                'name: "ensemble_model"',
                'platform: "ensemble"',
                "max_batch_size: 1",
                *_io("TYPE_FP32"),
                "ensemble_scheduling { step [",
                step.format("INPUT0", "out") + ",",
                step.format("out", "OUTPUT0"),
                "] }",
            )
        )
        + "\n"
    )


GRPC_CANCELLATION = (
    "test_grpc_async_infer",
    "test_grpc_stream_infer",
    "test_aio_grpc_async_infer",
    "test_aio_grpc_stream_infer",
)


def request_cancellation() -> list[Scenario]:
    """L0_request_cancellation's python parts: the gRPC client cancellations against a 10 s
    identity model (one server per test, test.sh's log grep) and scheduler_test.py. Its
    request_cancellation_test is a C API program and implicit_state_test a torch model."""
    identity = _identity_model(
        "custom_identity_int32",
        "max_batch_size: 1024",
        *_io("TYPE_INT32"),
        "instance_group [{ kind: KIND_CPU }]",
        _delay(10000),
    )
    found = [
        Scenario(
            f"{RC}/{test}",
            RC,
            identity,
            [
                PytestRun(
                    f"grpc_cancellation_test.py::GrpcCancellationTest::{test}",
                    runner="unittest",
                )
            ],
            log_checks=[LogCheck("cancellation_logged", "Cancellation notification received for")],
        )
        for test in GRPC_CANCELLATION
    ]
    found.append(
        Scenario(
            f"{RC}/scheduler_test",
            RC,
            _cancellation_models,
            [PytestRun("scheduler_test.py", runner="unittest")],
            flags=["--log-verbose=2"],
            verbose=False,
        )
    )
    return found


RL = "L0_rate_limiter"

# Triton's test-only ``sequence`` backend as a python model: one accumulator per instance
# (the test's models batch one sequence at a time): START resets it to INPUT, else INPUT is
# added; OUTPUT is the accumulator, after execute_delay_ms.
SEQUENCE_STAND_IN = """import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        delay = config.get("parameters", {}).get("execute_delay_ms", {})
        self.delay_s = int(delay.get("string_value", "0")) / 1000
        self.total = None

    def execute(self, requests):
        time.sleep(self.delay_s)
        responses = []
        for request in requests:
            given = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            if self.total is None or start.flatten()[0] != 0:
                self.total = np.zeros_like(given)
            self.total = self.total + given
            output = pb_utils.Tensor("OUTPUT", self.total.astype(given.dtype))
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""


def _sequence_stand_in(folder: Path) -> None:
    config = folder / "config.pbtxt"
    sed(config, r'^backend: "sequence"', 'backend: "python"')
    sed(config, r"^default_model_filename:.*", "")
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(SEQUENCE_STAND_IN)


RESOURCE_V2 = (
    'rate_limiter { resources [{name: "resource1" count: 2 }, {name: "resource2" global: True'
    " count: 2 }] priority: 2}"
)


def _rate_limiter_models(
    *,
    v2: bool = True,
    v3: bool = False,
    second_instance: bool = False,
    batching: bool = False,
    sequence: bool = False,
) -> Layout:
    """test.sh's custom_models at one of its stages: custom_zero_1_float32 (4 of resource1,
    100 ms executions), custom_zero_1_float32_v2 (2 of resource1, 2 of the global resource2,
    priority 2) or a second instance like it, v3 (resource2 both global and not), the
    dynamic-batching stage (1 s executions) and the sequence stage (custom_sequence_int32
    with three instance groups). Instances are on the CPU (test.sh: KIND_GPU); the identity
    and sequence backends are python stand-ins."""

    def lay(qa: Path, repo: Path) -> None:
        zero = qa / "custom_models" / "custom_zero_1_float32"
        shutil.copytree(zero, repo / "custom_zero_1_float32")
        shutil.copytree(
            qa / "custom_models" / "custom_sequence_int32", repo / "custom_sequence_int32"
        )
        names = ["custom_zero_1_float32"]
        if v2:
            names.append("custom_zero_1_float32_v2")
        if v3:
            names.append("custom_zero_1_float32_v3")
        for name in names:
            folder = repo / name
            if name != "custom_zero_1_float32":
                shutil.copytree(zero, folder)
            config = folder / "config.pbtxt"
            sed(config, "custom_zero_1_float32", name)
            sed(config, r"dims:.*\[.*\]", "dims: [ -1 ]")
            sed(config, r"max_batch_size:.*", "max_batch_size: 4")
            resource = (
                'rate_limiter { resources [{name: "resource1" count: 4 }]}'
                if name == "custom_zero_1_float32"
                else RESOURCE_V2.replace("True", "False" if name.endswith("v3") else "True")
            )
            delay = "1000" if batching else "100"
            append(
                config,
                "instance_group [{",
                "kind: KIND_CPU count: 1",
                resource,
                "}]",
                "parameters [",
                f'{{ key: "execute_delay_ms"; value: {{ string_value: "{delay}" }}}}',
                "]",
            )
            if name == "custom_zero_1_float32" and second_instance:
                append(config, "instance_group [{", "kind: KIND_CPU count: 1", RESOURCE_V2, "}]")
            if batching:
                append(
                    config,
                    "dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ]",
                    " max_queue_delay_microseconds: 5000000 }",
                )
            _delayed_identity(folder)
        folder = repo / "custom_sequence_int32"
        if sequence:
            config = folder / "config.pbtxt"
            first = 'rate_limiter { resources [{name: "resource1" count: 4 }]}'
            sed(
                config,
                "max_sequence_idle_microseconds:.*",
                "max_sequence_idle_microseconds: 1000000",
            )
            sed(config, r"^max_batch_size:.*", "max_batch_size: 1")
            sed(config, "kind: KIND_CPU", f"kind: KIND_CPU\ncount: 1 \n{first}")
            for priority, count in ((2, 1), (3, 2)):
                append(
                    config,
                    "instance_group [{",
                    f"kind: KIND_CPU count: {count}",
                    RESOURCE_V2.replace("priority: 2", f"priority: {priority}"),
                    "}]",
                )
        _sequence_stand_in(folder)

    return lay


def _refusal(name: str, layout: Layout, flags: list[str], message: str) -> Scenario:
    return Scenario(
        f"{RL}/{name}",
        RL,
        layout,
        flags=["--rate-limit=execution_count", *flags],
        log_checks=[LogCheck("load_error", message)],
        expect_start=False,
        repo_dir="custom_models",
    )


def _limited_resource(count: str) -> str:
    return (
        f'Resource count for "resource1" is limited to {count} which will prevent scheduling'
        " of one or more model instances, the minimum required count is 4"
    )


def _rate_limiter_run(name: str, test: str, layout: Layout, flags: list[str]) -> Scenario:
    return Scenario(
        f"{RL}/{name}",
        RL,
        layout,
        [PytestRun(f"rate_limiter_test.py::RateLimiterTest::{test}", runner="unittest")],
        flags=["--rate-limit=execution_count", *flags],
        repo_dir="custom_models",
        verbose=False,
        env={"TRITONSERVER_DELAY_SCHEDULER": "8"} if "dynamic" in test else {},
    )


def rate_limiter() -> list[Scenario]:
    """L0_rate_limiter: the servers that must refuse to start (with test.sh's log greps) and
    the stress tests, in test.sh's order of repositories."""
    two = _rate_limiter_models()
    single = _rate_limiter_models(v2=False, second_instance=True)
    r1 = "--rate-limit-resource=resource1:"
    r2 = "--rate-limit-resource=resource2:2"
    return [
        _refusal("refuses_resource1_1", two, [f"{r1}1"], _limited_resource("1")),
        _refusal("refuses_resource1_3", two, [f"{r1}3", r2], _limited_resource("3")),
        _refusal("refuses_other_device", two, [f"{r1}10:10", r2], _limited_resource("0")),
        _refusal(
            "refuses_conflicting_resource",
            _rate_limiter_models(v3=True),
            [],
            'Resource "resource2" is present as both global and device-specific resource in'
            " the model configuration.",
        ),
        _rate_limiter_run(
            "cross_model_explicit_limited",
            "test_cross_model_prioritization_limited_resource",
            two,
            [f"{r1}4", r2],
        ),
        _rate_limiter_run(
            "cross_model_implicit_limited",
            "test_cross_model_prioritization_limited_resource",
            two,
            [],
        ),
        _rate_limiter_run(
            "cross_model_plenty",
            "test_cross_model_prioritization_plenty_resource",
            two,
            [f"{r1}6", r2],
        ),
        _rate_limiter_run("single_model_limited", "test_single_model", single, []),
        _rate_limiter_run("single_model_plenty", "test_single_model", single, [f"{r1}6", r2]),
        _refusal("refuses_instances_resource1_3", single, [f"{r1}3", r2], _limited_resource("3")),
        _rate_limiter_run(
            "dynamic_batching",
            "test_single_model_dynamic_batching",
            _rate_limiter_models(v2=False, second_instance=True, batching=True),
            [],
        ),
        _rate_limiter_run(
            "sequence_batching",
            "test_single_model_sequence_batching",
            _rate_limiter_models(v2=False, second_instance=True, batching=True, sequence=True),
            [],
        ),
    ]


DS = "L0_dyna_sequence_batcher"
DYNA_NO_BATCHING = ("test_simple_sequence", "test_length1_sequence")
DYNA_BATCHING = (
    "test_multi_sequence_different_shape",
    "test_multi_sequence",
    "test_multi_parallel_sequence",
    "test_backlog",
    "test_backlog_fill",
    "test_backlog_fill_no_end",
    "test_backlog_sequence_timeout",
)


def _generated(qa: Path, script: str, into: Path) -> None:
    """One of Triton's qa/common generators with ``--onnx`` (its DATADIR's repositories)."""
    shutil.rmtree(into, ignore_errors=True)
    subprocess.run(
        [sys.executable, script, "--onnx", "--models_dir", str(into)],
        cwd=qa / "common",
        check=True,
        capture_output=True,
    )


def _custom_dyna(folder: Path) -> None:
    sed(folder / "config.pbtxt", r'^backend: "dyna_sequence"', 'backend: "python"')
    sed(folder / "config.pbtxt", r"^default_model_filename:.*", "")
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(ACCUMULATOR.lstrip())


def _dyna_models(
    *, onnx: bool, custom: bool, batching: bool, ragged: bool = False, implicit: bool = False
) -> Layout:
    """test.sh's models (or ragged_models): the generated onnx dyna-sequence models (implicit
    state ones for L0_dyna_implicit_state) and/or custom_dyna_sequence_int32 with its
    TYPE_STRING CORRID copy (the dyna_sequence backend as a python stand-in), one instance
    each; ``batching``: after test.sh's max_candidate_sequences / queue delay edits."""

    def lay(qa: Path, repo: Path) -> None:
        folders: list[Path] = []
        if onnx:
            kind = "implicit_" if implicit else ""
            generated = repo.parent / f"qa_dyna_sequence_{kind}model_repository"
            _generated(qa, f"gen_qa_dyna_sequence_{kind}models.py", generated)
            for source in sorted(generated.iterdir()):
                shutil.copytree(source, repo / source.name)
                folders.append(repo / source.name)
        if custom:
            folder = repo / "custom_dyna_sequence_int32"
            shutil.copytree(qa / "custom_models" / "custom_dyna_sequence_int32", folder)
            _custom_dyna(folder)
            folders.append(folder)
            if ragged:
                sed(
                    folder / "config.pbtxt",
                    r'name:.*"INPUT"',
                    'name: "INPUT"\nallow_ragged_batch: true',
                )
            else:
                copy = repo / "custom_string_dyna_sequence_int32"
                shutil.copytree(folder, copy)
                config = copy / "config.pbtxt"
                sed(config, "custom_dyna_sequence_int32", "custom_string_dyna_sequence_int32")
                text = config.read_text()
                config.write_text(
                    re.sub(
                        r"(CONTROL_SEQUENCE_CORRID\n\s*)data_type:.*",
                        r"\1data_type: TYPE_STRING",
                        text,
                    )
                )
                folders.append(copy)
        for folder in folders:
            config = folder / "config.pbtxt"
            sed(config, "kind: KIND_CPU", "kind: KIND_CPU\ncount: 1")
            if batching:
                sed(config, "max_candidate_sequences:.*", "max_candidate_sequences:4")
                sed(
                    config,
                    "max_queue_delay_microseconds:.*",
                    "max_queue_delay_microseconds:5000000",
                )

    return lay


def _dyna_runs(suite: str, backends: str, *, onnx: bool, implicit: bool = False) -> list[Scenario]:
    custom = "custom" in backends  # custom or custom_string: the stand-ins are laid out
    env = {"BACKENDS": backends, "IMPLICIT_STATE": "1" if implicit else "0"}
    tag = backends.replace(" ", ",")
    found = []
    for tests, batching in ((DYNA_NO_BATCHING, False), (DYNA_BATCHING, True)):
        layout = _dyna_models(onnx=onnx, custom=custom, batching=batching, implicit=implicit)
        found += [
            Scenario(
                f"{suite}/{test}[{tag}]",
                DS,
                layout,
                [
                    PytestRun(
                        f"dyna_sequence_batcher_test.py::DynaSequenceBatcherTest::{test}",
                        runner="unittest",
                        env={**env, "NO_BATCHING": "0" if batching else "1"},
                    )
                ],
                verbose=False,
            )
            for test in tests
        ]
    if "custom" in backends.split() and not implicit:  # the ragged test uses custom only
        test = "test_multi_sequence_different_shape_allow_ragged"
        found.append(
            Scenario(
                f"{suite}/{test}[{tag}]",
                DS,
                _dyna_models(onnx=False, custom=True, batching=True, ragged=True),
                [
                    PytestRun(
                        f"dyna_sequence_batcher_test.py::DynaSequenceBatcherTest::{test}",
                        runner="unittest",
                        env={**env, "NO_BATCHING": "0"},
                    )
                ],
                repo_dir="ragged_models",
                verbose=False,
            )
        )
    return found


def dyna_sequence() -> list[Scenario]:
    """L0_dyna_sequence_batcher with BACKENDS=custom (the dyna_sequence backend's python
    stand-in, on both servers), and onnx plus custom_string (repokit only: this Triton has no
    onnxruntime, and its python backend refuses a TYPE_STRING CORRID control); L0_dyna_implicit
    _state: the same tests with IMPLICIT_STATE=1 on the generated onnx implicit-state models
    (repokit only)."""
    return [
        *_dyna_runs(DS, "custom", onnx=False),
        *_dyna_runs(DS, "onnx custom_string", onnx=True),
        *_dyna_runs("L0_dyna_implicit_state", "onnx", onnx=True, implicit=True),
    ]


CB = "L0_sequence_corrid_batcher"
CORRID_TRIALS = ("savedmodel", "graphdef", "plan", "onnx")

# What Triton's generated dyna-sequence models compute (qa/common/gen_qa_dyna_sequence_models.py;
# the expected results of the corrid test): OUTPUT = INPUT + START + END * CORRID per request.
DYNA_SEQUENCE_STAND_IN = """import numpy as np
import triton_python_backend_utils as pb_utils


def value(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().astype(np.int64)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = value(request, "INPUT") + value(request, "START")
            total = total + value(request, "END") * value(request, "CORRID")
            output = pb_utils.Tensor("OUTPUT", total.astype(np.int32))
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""


def _corrid_models(*, onnx: bool) -> Layout:
    """test.sh's models4: the graphdef, savedmodel, plan, onnx and libtorch int32 dyna-sequence
    models without their Oldest block (Direct), batches of 1, four instances. Those this
    machine cannot run (all of them on Triton, all but onnx on repokit with ``onnx``) are
    python stand-ins with the onnx model's config; libtorch is left out (the test does not
    use it)."""

    def lay(qa: Path, repo: Path) -> None:
        generated = repo.parent / "qa_dyna_sequence_model_repository"
        _generated(qa, "gen_qa_dyna_sequence_models.py", generated)
        source = generated / "onnx_dyna_sequence_int32"
        for trial in CORRID_TRIALS:
            folder = repo / f"{trial}_dyna_sequence_int32"
            shutil.copytree(source, folder)
            config = folder / "config.pbtxt"
            text = re.sub(
                r"oldest.*\{.*\}.*control_input", "control_input", config.read_text(), flags=re.S
            )
            config.write_text(text.replace("onnx_dyna_sequence_int32", folder.name))
            sed(config, r"^max_batch_size:.*", "max_batch_size: 1")
            sed(config, "kind: KIND_CPU", "kind: KIND_CPU\ncount: 4")
            if trial == "onnx" and onnx:
                continue
            sed(config, r"^platform:.*", 'backend: "python"')
            for old in folder.iterdir():
                if old.is_dir():
                    shutil.rmtree(old)
            (folder / "1").mkdir()
            (folder / "1" / "model.py").write_text(DYNA_SEQUENCE_STAND_IN)

    return lay


def corrid_batcher() -> list[Scenario]:
    """L0_sequence_corrid_batcher's test_skip_batch (four sequences, two shorter, on four
    instances of one slot; the scheduler held until 12 requests wait): every model a python
    stand-in on both servers, and with the real onnx model on repokit."""
    env = {
        "NO_BATCHING": "0",
        "MODEL_INSTANCES": "4",
        "TRITONSERVER_DELAY_SCHEDULER": "12",
        "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "0",
    }
    test = "sequence_corrid_batcher_test.py::SequenceCorrIDBatcherTest::test_skip_batch"
    return [
        Scenario(
            f"{CB}/test_skip_batch[{kind}]",
            CB,
            _corrid_models(onnx=onnx),
            [PytestRun(test, runner="unittest")],
            repo_dir="models4",
            env=env,
            verbose=False,
        )
        for kind, onnx in (("stand-ins", False), ("onnx", True))
    ]


IS = "L0_implicit_state"


def _implicit_state_models(qa: Path, repo: Path) -> None:
    """test.sh's onnx models (BACKENDS=onnx): the generated onnx_nobatch_sequence_int32 with
    implicit state, and its copy ``_output`` that lists OUTPUT_STATE as an output."""
    generated = repo.parent / "qa_sequence_implicit_model_repository"
    _generated(qa, "gen_qa_implicit_models.py", generated)
    name = "onnx_nobatch_sequence_int32"
    allowed = repo / f"{name}_output"
    for folder in (repo / name, allowed):
        shutil.copytree(generated / name, folder)
        sed(folder / "config.pbtxt", r"kind: KIND_GPU", "kind: KIND_CPU")  # no GPU here
    config = allowed / "config.pbtxt"
    sed(config, r"^name:.*", f'name: "{allowed.name}"')
    append(config, 'output [{ name: "OUTPUT_STATE" \n data_type: TYPE_INT32 \n dims: [ 1 ] }]')


def implicit_state() -> list[Scenario]:
    """L0_implicit_state's onnx tests (repokit only: this Triton has no onnxruntime); its other
    tests use libtriton_implicit_state, a C++ test backend built with Triton."""
    return [
        Scenario(
            f"{IS}/{test}",
            IS,
            _implicit_state_models,
            [PytestRun(f"implicit_state.py::ImplicitStateTest::{test}", runner="unittest")],
            env={"BACKENDS": "onnx", "IMPLICIT_STATE": "1"},
            verbose=False,
        )
        for test in ("test_request_output_not_allowed", "test_request_output")
    ]


def _onnx_implicit_sequence_models(trial: str) -> Layout:
    """L0_sequence_batcher's repository for one model trial with BACKENDS=onnx and
    IMPLICIT_STATE=1 (as L0_implicit_state runs it): the generated implicit-state onnx sequence
    models (object, int32, bool; nobatch ones for models0, variable shapes for modelsv) with
    test.sh's max_batch_size and instance count, on the CPU."""

    def lay(qa: Path, repo: Path) -> None:
        _repository, batch, count, nobatch = SEQUENCE_TRIALS[trial]
        variable = trial == "v"
        kind = "variable_" if variable else ""
        generated = repo.parent / f"qa_{kind}sequence_implicit_model_repository"
        shutil.rmtree(generated, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                "gen_qa_implicit_models.py",
                "--onnx",
                *(["--variable"] if variable else []),
                "--models_dir",
                str(generated),
            ],
            cwd=qa / "common",
            check=True,
            capture_output=True,
        )
        for dtype in ("object", "int32", "bool"):
            name = f"onnx_{'nobatch_' if nobatch else ''}sequence_{dtype}"
            shutil.copytree(generated / name, repo / name)
            config = repo / name / "config.pbtxt"
            if batch is not None:
                sed(config, r"^max_batch_size:.*", f"max_batch_size: {batch}")
            sed(config, r"kind: KIND_GPU", "kind: KIND_CPU")
            sed(config, r"kind: KIND_CPU", f"kind: KIND_CPU\ncount: {count}")

    return lay


def implicit_sequence_batcher() -> list[Scenario]:
    """L0_implicit_state's run of L0_sequence_batcher (IMPLICIT_STATE=1) for its onnx models,
    one server per test and model trial (repokit only)."""
    found: list[Scenario] = []
    for trial, (repo_dir, *_rest) in SEQUENCE_TRIALS.items():
        layout = _onnx_implicit_sequence_models(trial)
        runs = [(test, 0, -1) for test in SEQUENCE_NO_DELAY] + list(SEQUENCE_DELAYED)
        for test, delay, backlog in runs:
            env = {
                "BACKENDS": "onnx",
                "ENSEMBLES": "0",
                "IMPLICIT_STATE": "1",
                "INITIAL_STATE_FILE": "0",
                "INITIAL_STATE_ZERO": "0",
                "USE_SINGLE_BUFFER": "0",
                "NO_BATCHING": "1" if trial == "0" else "0",
                "MODEL_INSTANCES": {"0": "4", "v": "1"}.get(trial, trial),
                "BATCHER_TYPE": "VARIABLE" if trial == "v" else "FIXED",
            }
            if delay:
                env["TRITONSERVER_DELAY_SCHEDULER"] = str(delay)
            if backlog >= 0:
                env["TRITONSERVER_BACKLOG_DELAY_SCHEDULER"] = str(backlog)
            found.append(
                Scenario(
                    f"{IS}/sequence_batcher/{test}[{repo_dir},onnx]",
                    "L0_sequence_batcher",
                    layout,
                    [
                        PytestRun(
                            f"sequence_batcher_test.py::SequenceBatcherTest::{test}",
                            runner="unittest",
                        )
                    ],
                    repo_dir=repo_dir,
                    env=env,
                    verbose=False,
                )
            )
    return found


def scheduling() -> list[Scenario]:
    return [
        *model_queue(),
        *request_cancellation(),
        *rate_limiter(),
        *dyna_sequence(),
        *corrid_batcher(),
        *implicit_state(),
        *implicit_sequence_batcher(),
    ]
