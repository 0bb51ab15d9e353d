"""What an operator reads about a model load, against real Triton 2.51: python models that fail
in different ways (a label file or warmup file that is missing, model.py that does not compile
or defines no TritonPythonModel, initialize raising, warmup samples that fail Triton's request
checks) give, through the load API (HTTP and gRPC), the same status and
error text, the same repository index rows, and the same model lifecycle lines in the server
log (``loading: m:1``, ``failed to load 'm' version 1: <status>: <reason>``, ``failed to load
'm'``; ``successfully loaded``/``unloaded`` for a model that loads). At startup (explicit
``--load-model`` and poll mode, ``--exit-on-error false``) the same lines, and the one error
tritonserver logs after its options table.

Triton loads the versions of a start in parallel, so the order of lines across models (and
the order of the models in the startup error) varies: those are compared as multisets."""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.cli.serve_process import PORT_FLAGS, ServeProcess
from tests.differential.server_log_lines import (
    INSTANCE_FAILURE,
    Record,
    file_reader,
    lifecycle,
    records,
    wait_for_text,
)
from tests.differential.triton_reference import TritonReference, running_triton

pytestmark = [pytest.mark.triton, pytest.mark.timeout(600)]  # ~30 loads into each server

ECHO = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
                )
                for r in requests
            ]
""")
INIT_RAISING = textwrap.dedent("""
    class TritonPythonModel:
        def initialize(self, args):
            raise ValueError("no resource")

        def execute(self, requests):
            return []
""")
SYNTAX_ERROR = "class TritonPythonModel:\n    def execute(self, requests)\n        return []\n"
NO_CLASS = "x = 1\n"


def _config(
    max_batch_size: int = 0,
    output: str = "",
    warmup: str = "",
    inputs: str = '{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }',
    extra: str = "",
) -> str:
    sample = f'model_warmup [ {{ name: "w" {warmup} }} ]\n' if warmup else ""
    return (
        f'backend: "python"\nmax_batch_size: {max_batch_size}\ninput [ {inputs} ]\n'
        f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] {output} }} ]\n{sample}{extra}'
    )


def _sample(batch_size: int = 1, dims: str = "4", data: str = "zero_data: true") -> str:
    return (
        f'batch_size: {batch_size} inputs {{ key: "X" value: {{ data_type: TYPE_FP32 '
        f"dims: [ {dims} ] {data} }} }}"
    )


# name -> (config, model.py); every one but "ok" fails to load
MODELS: dict[str, tuple[str, str]] = {
    "ok": (_config(), ECHO),
    "label_missing": (_config(output='label_filename: "labels.txt"'), ECHO),
    "syntax_bad": (_config(), SYNTAX_ERROR),
    "no_class": (_config(), NO_CLASS),
    "init_raise": (_config(), INIT_RAISING),
    "warmup_file": (_config(warmup=_sample(data='input_data_file: "missing.bin"')), ECHO),
    "warmup_shape": (_config(max_batch_size=4, warmup=_sample(dims="5")), ECHO),
    "warmup_inputs": (
        _config(
            warmup=_sample(),
            inputs='{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }, '
            '{ name: "Z" data_type: TYPE_FP32 dims: [ 4 ] }',
        ),
        ECHO,
    ),
    "two_versions": (
        _config(output='label_filename: "sub/../l.txt"', extra="version_policy: { all { } }\n"),
        ECHO,
    ),
}
# Not here: warmup samples that reach the model and fail there (it refuses them, execute()
# raises, a batch_size above what it takes): Triton 2.51 answers "failed to run warmup sample
# 'w': <error>; " once per request (measured), but now and then segfaults while doing so. The
# texts are asserted in tests/e2e/test_load_log_lines.py and tests/config/test_triton_load_words.py.
# the models a start loads (Triton 2.51 dies now and then when warmups fail while it starts)
STARTUP = ("ok", "label_missing", "syntax_bad", "init_raise")
OVER_GRPC = ("label_missing", "init_raise", "warmup_shape")


def _write(root: Path, names: tuple[str, ...] | list[str]) -> Path:
    for name in names:
        config, source = MODELS[name]
        versions = (1, 2) if name == "two_versions" else (1,)
        for version in versions:
            (root / name / str(version)).mkdir(parents=True)
            (root / name / str(version) / "model.py").write_text(source)
        (root / name / "config.pbtxt").write_text(config)
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("load_log") / "models", list(MODELS))


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonReference]:
    workdir = tmp_path_factory.mktemp("triton_load_log")
    with running_triton(repository, workdir, ["--model-control-mode=explicit"]) as server:
        yield server


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(str(repository), *PORT_FLAGS, "--model-control-mode", "explicit")
    try:
        yield server
    finally:
        server.kill()


SEGMENT = re.compile(r"(?:^|;)(?=version \d+ is at )")


def _versions_apart(message: str) -> tuple[str, list[str]]:
    """A load error's frame and its version segments, sorted: Triton joins the versions in
    the order their loads finish."""
    head, _, body = message.partition(": ")
    return head, sorted(s.rstrip(";\n") for s in SEGMENT.split(body) if s)


def _http_load(base: str, model: str) -> tuple[int, tuple[str, list[str]]]:
    response = requests.post(f"{base}/v2/repository/models/{model}/load", timeout=120)
    error = response.json().get("error", "") if response.content else ""
    return response.status_code, _versions_apart(str(error))


def _grpc_load(address: str, model: str) -> tuple[str, tuple[str, list[str]]]:
    client = grpcclient.InferenceServerClient(address)
    try:
        client.load_model(model, client_timeout=120)
    except InferenceServerException as exc:
        return str(exc.status()), _versions_apart(str(exc.message()))
    finally:
        client.close()
    return "OK", ("", [])


def _index_rows(base: str, model: str) -> list[tuple[str, str, str]]:
    entries = requests.post(f"{base}/v2/repository/index", json={}, timeout=30).json()
    return sorted(
        (e.get("version", ""), e.get("state", ""), e.get("reason", ""))
        for e in entries
        if e["name"] == model
    )


def _final_lines(text: str, model: str) -> int:
    """How many loads of ``model`` the log has finished (its OnLoadFinal line)."""
    return sum(
        message in (f"failed to load '{model}'", f"successfully loaded '{model}'")
        for _, message in lifecycle(records(text), model)
    )


def _load_everything(http: str, grpc: str) -> dict[str, object]:
    answers: dict[str, object] = {}
    for model in MODELS:
        answers[model] = [_http_load(http, model), _index_rows(http, model)]
    for model in OVER_GRPC:  # a failed load is tried again in full
        answers[f"{model} (gRPC)"] = _grpc_load(grpc, model)
    return answers


def test_load_api_answers_index_and_log_lines(
    triton: TritonReference, repokit: ServeProcess
) -> None:
    theirs = _load_everything(triton.url, triton.grpc_url)
    ours = _load_everything(
        f"http://{repokit.url('HTTPService')}", repokit.url("GRPCInferenceService")
    )
    assert ours == theirs
    assert theirs["ok"] == [(200, ("", [])), [("1", "READY", "")]]
    assert all(theirs[m] != theirs["ok"] for m in MODELS if m != "ok")

    loads = {m: 1 + (m in OVER_GRPC) for m in MODELS}
    triton_text = wait_for_text(
        file_reader(triton.log_path),
        lambda text: all(_final_lines(text, m) >= n for m, n in loads.items()),
        60,
    )
    repokit.wait_for(lambda: all(_final_lines(repokit.text, m) >= n for m, n in loads.items()), 60)
    for model in MODELS:  # the versions of a load finish in any order
        expected = lifecycle(records(triton_text), model, sequential=True)
        got = lifecycle(records(repokit.text), model, sequential=True)
        assert sorted(got) == sorted(expected), model
        assert (got[0], got[-1]) == (expected[0], expected[-1]), model
        assert expected[0] == ("I", f"loading: {model}:1")
    for model in ("init_raise", "warmup_shape", "warmup_file"):  # an instance failed
        lines = lifecycle(records(triton_text), model, sequential=True)
        assert any(message.startswith(INSTANCE_FAILURE) for _, message in lines), model


def _startup_logs(
    repository: Path, workdir: Path, triton_flags: list[str], repokit_flags: list[str]
) -> tuple[str, str]:
    """Both servers' logs of a start on ``repository``, once every model's load finished."""

    def finished(text: str) -> bool:
        return all(_final_lines(text, m) >= 1 for m in STARTUP)

    with running_triton(repository, workdir, triton_flags) as server:
        triton_text = wait_for_text(file_reader(server.log_path), finished, 60)
    ours = ServeProcess(str(repository), *PORT_FLAGS, *repokit_flags)
    try:
        ours.wait_for(lambda: finished(ours.text), 60)
        repokit_text = ours.text
    finally:
        ours.kill()
    return triton_text, repokit_text


def _until_started(text: str) -> list[Record]:
    """The records up to the error logged after the options table (Triton's poll thread
    polls once at once after that, loading the models again)."""
    found = records(text)
    ends = [i for i, (level, _, message) in enumerate(found) if _is_startup_error(level, message)]
    return found[: ends[0] + 1] if ends else found


def _is_startup_error(level: str, message: str) -> bool:
    return level == "E" and message.startswith(("Invalid argument: ", "Internal: failed"))


def _instance_failures(text: str) -> Counter[tuple[str, str]]:
    return Counter(
        (level, message)
        for level, _, message in _until_started(text)
        if message.startswith(INSTANCE_FAILURE)
    )


def _startup_error(text: str) -> Counter[str]:
    """The error logged after the options table, cut into its models' load errors."""
    errors = [message for level, _, message in records(text) if _is_startup_error(level, message)]
    assert len(errors) == 1, errors
    head, _, body = errors[0].partition(": ")
    parts = body.split("load failed for model ")
    return Counter([head, *(f"load failed for model {p}" for p in parts[1:]), parts[0]])


@pytest.mark.parametrize("mode", ["explicit", "poll"])
def test_a_start_logs_the_failed_loads_as_triton(tmp_path: Path, mode: str) -> None:
    repository = _write(tmp_path / "models", list(STARTUP))
    if mode == "explicit":
        triton_flags = ["--model-control-mode=explicit"]
        triton_flags += [f"--load-model={m}" for m in STARTUP]
        repokit_flags = ["--model-control-mode", "explicit"]
        repokit_flags += [flag for m in STARTUP for flag in ("--load-model", m)]
    else:  # no poll while the test reads the logs
        triton_flags = ["--model-control-mode=poll", "--repository-poll-secs=3600"]
        repokit_flags = ["--model-control-mode", "poll", "--repository-poll-secs", "3600"]
    theirs, ours = _startup_logs(
        repository,
        tmp_path / "triton",
        [*triton_flags, "--exit-on-error=false"],
        [*repokit_flags, "--exit-on-error", "false"],
    )
    for model in STARTUP:
        assert Counter(lifecycle(_until_started(ours), model)) == Counter(
            lifecycle(_until_started(theirs), model)
        ), model
    assert _instance_failures(ours) == _instance_failures(theirs)
    assert _startup_error(ours) == _startup_error(theirs)
    if mode == "poll":
        assert _startup_error(ours) == Counter(["Internal", "failed to load all models"])
