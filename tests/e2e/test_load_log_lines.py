"""The model lifecycle lines of the server log, as Triton 2.51's ``model_lifecycle.cc`` writes
them, for loads through the load API and at startup: ``loading: m:N`` for every version before
any of them loads, ``failed to load 'm' version N: <status>: <reason>`` (error) for each failed
attempt (--model-load-retry-count), then ``failed to load 'm'`` or ``successfully loaded 'm'``.
A failure found before the backend runs (a missing label file) is logged as one the backend
hit (initialize raising). A start logs no further line for those models (Triton does not).

Every line is written before the load is answered (and a start before it serves), so the
tests read the log once the answer is in."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.frontends.http.server_thread import running_server

ECHO = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""
INIT_RAISING = """class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("no resource")

    def execute(self, requests):
        return []
"""
REFUSING = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(error=pb_utils.TritonError("no")) for r in requests]
"""
WARMUP = """model_warmup [ { name: "w" batch_size: 1 inputs { key: "X" value: {
  data_type: TYPE_FP32 dims: [ %d ] zero_data: true } } } ]
"""
CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] %s } ]
version_policy: { all { } }
"""


def _model(root: Path, name: str, source: str, output: str = "", versions: int = 1) -> None:
    for version in range(1, versions + 1):
        (root / name / str(version)).mkdir(parents=True)
        (root / name / str(version) / "model.py").write_text(source)
    (root / name / "config.pbtxt").write_text(CONFIG % output)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    _model(root, "ok", ECHO, versions=2)
    _model(root, "no_labels", ECHO, output='label_filename: "labels.txt"', versions=2)
    _model(root, "init_raise", INIT_RAISING)
    _model(root, "warmup_refused", REFUSING)
    _model(root, "warmup_shape", ECHO)
    for name, dims in (("warmup_refused", 1), ("warmup_shape", 2)):
        with (root / name / "config.pbtxt").open("a") as config:
            config.write(WARMUP % dims)
    return root


INSTANCE = "ERROR: Failed to create instance: "


def _lines(caplog: pytest.LogCaptureFixture, model: str) -> list[tuple[str, str]]:
    """The model's lifecycle lines, and the instance failures logged while it loaded (the
    tests load one model at a time)."""
    heads = (f"loading: {model}:", f"failed to load '{model}'", f"successfully loaded '{model}'")
    lines, loading = [], ""
    for record in caplog.records:
        message = record.getMessage()
        if not record.name.startswith("repokit"):
            continue
        if message.startswith("loading: "):
            loading = message.removeprefix("loading: ").rpartition(":")[0]
        if message.startswith(heads) or (loading == model and message.startswith(INSTANCE)):
            lines.append((record.levelname, message))
    return lines


def _load_fails(client: httpclient.InferenceServerClient, model: str) -> str:
    with pytest.raises(InferenceServerException) as failure:
        client.load_model(model)
    assert failure.value.status() == "400"
    return str(failure.value.message())


@pytest.mark.parametrize("retries", [0, 1])
def test_load_api_failures_log_triton_s_lifecycle_lines(
    repo: Path, caplog: pytest.LogCaptureFixture, retries: int
) -> None:
    caplog.set_level(logging.INFO, logger="repokit")
    with running_server(
        repo, model_control_mode="explicit", model_load_retry_count=retries
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            client.load_model("ok")
            message = _load_fails(client, "no_labels")
            _load_fails(client, "init_raise")
        finally:
            client.close()
    assert _lines(caplog, "ok") == [
        ("INFO", "loading: ok:1"),
        ("INFO", "loading: ok:2"),
        ("INFO", "successfully loaded 'ok'"),
    ]
    missing = repo / "no_labels" / "labels.txt"
    reason = f"Internal: failed to open text file for read {missing}: No such file or directory"
    assert message == (
        f"load failed for model 'no_labels': version 1 is at UNAVAILABLE state: {reason};"
        f"version 2 is at UNAVAILABLE state: {reason};\n"
    )
    attempts = retries + 1
    assert _lines(caplog, "no_labels") == [
        ("INFO", "loading: no_labels:1"),
        ("INFO", "loading: no_labels:2"),
        *[("ERROR", f"failed to load 'no_labels' version 1: {reason}")] * attempts,
        *[("ERROR", f"failed to load 'no_labels' version 2: {reason}")] * attempts,
        ("INFO", "failed to load 'no_labels'"),
    ]
    lines = _lines(caplog, "init_raise")
    assert lines[0] == ("INFO", "loading: init_raise:1")
    assert [level for level, _ in lines[1:-1]] == ["ERROR"] * 2 * attempts
    for instance, failed in zip(lines[1:-1:2], lines[2:-1:2], strict=True):
        assert instance[1].startswith(f"{INSTANCE}ValueError: no resource")
        assert failed[1] == "failed to load 'init_raise' version 1: Internal: " + instance[
            1
        ].removeprefix(INSTANCE)
    assert lines[-1] == ("INFO", "failed to load 'init_raise'")


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("warmup_refused", "failed to run warmup sample 'w': no; "),
        (
            "warmup_shape",
            "[request id: <id_unknown>] unexpected shape for input 'X' for model "
            "'warmup_shape'. Expected [1], got [2]. ",
        ),
    ],
)
def test_a_failing_warmup_logs_the_instance_failure_first(
    repo: Path, caplog: pytest.LogCaptureFixture, model: str, reason: str
) -> None:
    """The sample the model refuses fails on the instance; the one Triton's request checks
    refuse is found before any instance runs and logged all the same."""
    caplog.set_level(logging.INFO, logger="repokit")
    with running_server(repo, model_control_mode="explicit") as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            message = _load_fails(client, model)
        finally:
            client.close()
    assert message == (
        f"load failed for model '{model}': version 1 is at UNAVAILABLE state: "
        f"Invalid argument: {reason};\n"
    )
    assert _lines(caplog, model) == [
        ("INFO", f"loading: {model}:1"),
        ("ERROR", f"{INSTANCE}{reason}"),
        ("ERROR", f"failed to load '{model}' version 1: Invalid argument: {reason}"),
        ("INFO", f"failed to load '{model}'"),
    ]


def test_a_start_logs_each_failed_load_once(repo: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No ``failed to load 'm': load failed for model 'm': ...`` line of repokit's own after
    the lifecycle lines (the CLI logs tritonserver's one startup error: tests/cli)."""
    caplog.set_level(logging.INFO, logger="repokit")
    with running_server(repo, model_control_mode="explicit", load_models=["*"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert client.is_model_ready("ok")
            assert not client.is_model_ready("no_labels")
        finally:
            client.close()
    assert _lines(caplog, "no_labels")[-1] == ("INFO", "failed to load 'no_labels'")
    assert _lines(caplog, "init_raise")[-1] == ("INFO", "failed to load 'init_raise'")
    assert not [r for r in caplog.records if "': load failed for model" in r.getMessage()]
