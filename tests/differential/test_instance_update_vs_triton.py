"""Scaling a loaded python model against real Triton 2.51: the same loads of the same
repository give the same instance starts and stops (which instances stay, which are new and
how they are named), the same statistics (kept through an update, restarted by a reload),
the same refusal of an invalid new instance group with the version serving on, and the same
repository index."""

from __future__ import annotations

import compileall
import re
import time
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.core.server_log import VERBOSE_DETAIL
from repokit.core.settings import LogSettings
from tests.differential.triton_reference import running_triton
from tests.e2e.test_instance_update import MODEL, _config, _events, _infer
from tests.frontends.http.server_thread import running_server

pytestmark = pytest.mark.triton


def _repository(root: Path) -> Path:
    folder = root / "models" / "scaled"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    _config(folder, "{ count: 1 kind: KIND_CPU }")
    # Triton 2.51's stub here writes __pycache__ into the version it loads (a changed version:
    # the next load would reload it); with the bytecode there already it writes nothing
    compileall.compile_dir(folder, quiet=1)
    return root / "models"


def _settled(repo: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 60
    while len(_events(repo)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return _events(repo)


def _transcript(url: str, repo: Path) -> list[Any]:
    """What one server does for the same loads."""
    client = httpclient.InferenceServerClient(url)
    seen: list[Any] = []
    folder = repo / "scaled"

    def load(groups: str, extra: str = "", expected_events: int = 0) -> None:
        _config(folder, groups, extra)
        time.sleep(0.05)  # a modification time after the previous load's
        try:
            client.load_model("scaled")
            seen.append("loaded")
        except InferenceServerException as exc:
            seen.append((exc.status(), exc.message()))
        before = len(_events(repo))
        events = _settled(repo, max(before, expected_events))
        # which of two new instances a later update keeps depends on which initialize ended
        # last in Triton: the instances that start, and how many stop
        seen.append(sorted(e for e in events if e.startswith("init")))
        seen.append(sum(e.startswith("fini") for e in events))
        seen.append(client.get_model_repository_index())
        stats = client.get_inference_statistics("scaled")["model_stats"][0]
        seen.append(int(stats["inference_count"]))
        seen.append(client.get_model_config("scaled")["instance_group"])

    def served() -> tuple[int, str]:
        return _infer(client)

    seen.append([served() for _ in range(3)])
    load("{ count: 3 kind: KIND_CPU }", expected_events=3)
    load("{ count: 1 kind: KIND_CPU }", expected_events=5)
    stayed = served()
    load("{ count: 2 kind: KIND_CPU gpus: [ 0 ] }")  # refused
    seen.append(served() == (stayed[0] + 1, stayed[1]))  # the same instance serves on
    load('{ name: "wide" count: 2 kind: KIND_CPU }', expected_events=6)
    load(
        "{ count: 1 kind: KIND_CPU }",
        'parameters { key: "edited" value { string_value: "1" } }',
        expected_events=9,
    )
    seen.append(served())
    client.close()
    return seen


def test_scaling_a_python_model_matches_triton(tmp_path: Path) -> None:
    flags = ["--model-control-mode=explicit", "--load-model=scaled"]
    triton_repo = _repository(tmp_path / "triton")
    with running_triton(triton_repo, tmp_path / "triton-work", flags, ready=["scaled"]) as triton:
        expected = _transcript(triton.url.removeprefix("http://"), triton_repo)
    repo = _repository(tmp_path / "repokit")
    with running_server(repo, model_control_mode="explicit", load_models=["scaled"]) as server:
        got = _transcript(server.http_url, repo)
    assert got == expected


INSTANCE_LINE = re.compile(
    r"(?:Re-using|Created) model instance named '[^']*' with device id '\d+'"
)


def _instance_lines(messages: list[str]) -> list[str]:
    """The instance lines in order, each run of "Created" lines sorted (instances created
    together finish in any order in Triton)."""
    lines = [m.group(0) for text in messages if (m := INSTANCE_LINE.search(text))]
    ordered: list[str] = []
    run: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("Created"):
            run.append(line)
            continue
        ordered += sorted(run)
        run = []
        if line:
            ordered.append(line)
    return ordered


def test_verbose_instance_lines_match_triton(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At --log-verbose 2 Triton logs each instance a load creates and each one an update
    keeps ("Created model instance named ..." / "Re-using model instance named ...")."""
    flags = ["--model-control-mode=explicit", "--load-model=scaled", "--log-verbose=2"]
    triton_repo = _repository(tmp_path / "triton")
    work = tmp_path / "triton-work"
    with running_triton(triton_repo, work, flags, ready=["scaled"]) as triton:
        _transcript(triton.url.removeprefix("http://"), triton_repo)
    expected = _instance_lines((work / "triton.log").read_text().splitlines())
    caplog.set_level(VERBOSE_DETAIL, logger="repokit")
    repo = _repository(tmp_path / "repokit")
    verbose = LogSettings(log_verbose_level=2)
    with running_server(
        repo, model_control_mode="explicit", load_models=["scaled"], log=verbose
    ) as server:
        _transcript(server.http_url, repo)
    assert expected[:2] == [
        "Created model instance named 'scaled_0_0' with device id '0'",
        "Re-using model instance named 'scaled_0_0' with device id '0'",
    ]
    # which instance a scale-down keeps is the one whose initialize ended last, in any order on
    # either server: after the first update only the number of each line is compared
    got = _instance_lines(caplog.messages)
    assert got[:2] == expected[:2]
    assert _any_index(got[2:]) == _any_index(expected[2:])
    # ... and the updates after it keep one same instance on both
    kept = [
        {line for line in lines[2:] if line.startswith("Re-using")} for lines in (got, expected)
    ]
    assert len(kept[0]) == len(kept[1]) == 1


def _any_index(lines: list[str]) -> list[str]:
    """The instance lines with the index of each kept ("Re-using") instance left out."""
    return _instance_lines([re.sub(r"^(Re-using .*_)\d+'", r"\1N'", line) for line in lines])
