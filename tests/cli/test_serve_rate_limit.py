"""`repokit serve --rate-limit ... --rate-limit-resource ...` as tritonserver takes them: bad
values are usage errors naming the flag, a count that cannot serve a model fails its load with
Triton's message, and the options table shows the settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repokit.cli.serve_tables import options_table
from repokit.core.settings import ServerSettings
from repokit.scheduler.rate_limiter import parse_resource_flags
from tests.e2e.rate_limit_models import write_model


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_model(repo, "needs_two", log_path=tmp_path / "log", resources=[("R1", 2, False)])
    return repo


def _serve(repo: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", *flags],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rate-limit", "bogus"], "invalid argument for --rate-limit: 'bogus'"),
        (
            ["--rate-limit-resource", "R1"],
            "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            "'<resource_name>:<count>'. Got R1",
        ),
        (["--rate-limit-resource", "R1:x"], "--rate-limit-resource: invalid count 'x'"),
        (["--rate-limit-resource=R1:2:0:1"], "--rate-limit-resource option format is"),
        (["--rate-limit-resource=R1:-3"], "--rate-limit-resource: the count must not be"),
    ],
)
def test_bad_rate_limit_flags_exit_2(tmp_path: Path, flags: list[str], message: str) -> None:
    result = _serve(_repo(tmp_path), *flags)
    assert result.returncode == 2
    assert message in re.sub(r"\s+", " ", result.stdout + result.stderr)


def test_a_resource_count_below_a_models_need_fails_the_startup(tmp_path: Path) -> None:
    result = _serve(_repo(tmp_path), "--rate-limit=execution_count", "--rate-limit-resource=R1:1")
    output = re.sub(r"\s+", " ", result.stderr)
    assert result.returncode == 1
    assert "error: creating server: Internal - failed to load all models" in output
    assert (
        'Resource count for "R1" is limited to 1 which will prevent scheduling of one or more '
        "model instances, the minimum required count is 2"
    ) in output
    assert re.search(
        r"\| needs_two +\| 1 +\| UNAVAILABLE: Invalid argument: Resource count", output
    )


def test_rate_limit_off_ignores_the_resources(tmp_path: Path) -> None:
    # off (the default): the same flags load the model; it is stopped by the load-only flag
    result = _serve(
        _repo(tmp_path),
        "--rate-limit=off",
        "--rate-limit-resource=R1:1",
        "--model-control-mode=explicit",
        "--load-model=needs_two",
        "--exit-timeout-secs=0",
        "--http-address=256.0.0.1",  # the load succeeds, then the address fails the start
    )
    output = re.sub(r"\s+", " ", result.stdout + result.stderr)
    assert "successfully loaded 'needs_two'" in output, output
    assert "Resource count" not in output


def test_the_options_table_shows_the_rate_limit_as_tritonserver() -> None:
    settings = ServerSettings(
        rate_limit="execution_count", rate_limit_resources=parse_resource_flags(["R1:4:0"])
    )
    text = re.sub(r" +", " ", options_table(settings, []))
    assert "| rate_limit | EXEC_COUNT |" in text
    assert '| rate_limit_resource[0] | {"name":"R1", "count":4 "device":0} |' in text
    assert "| rate_limit | OFF |" in re.sub(r" +", " ", options_table(ServerSettings(), []))
