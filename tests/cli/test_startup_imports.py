"""Start-up cost of the command line: each command imports only what it needs, so ``repokit
--help``, ``repokit validate`` and friends do not pay for the server, the load generator's
transports, grpc, numpy or jsonschema before they read their flags.

Each case runs the real entry point in a fresh interpreter and lists the modules it imported.
(typer itself imports pydantic to convert the values of any command it runs: not repokit's to
spare.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repokit.paths import sample_repos_dir

# what the server, the load generator and the JSON config check bring in
HEAVY = (
    "asyncio",
    "grpc",
    "numpy",
    "jsonschema",
    "google.protobuf",
    "onnx",
    "onnxruntime",
    "repokit.perf.transports",
    "repokit.perf.options",
    "repokit.perf.statistics",
    "repokit.config.validate",
    "repokit.core.settings",
    "repokit.frontends",
)

_PROBE = """
import json, sys
from repokit.cli.main import run
sys.argv = ["repokit", *json.loads(sys.argv[1])]
code = 0
try:
    run()
except SystemExit as exc:
    code = exc.code or 0
with open(OUT, "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def _imported(args: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    """Run ``repokit ARGS`` in a fresh interpreter: its exit code and the modules it imported."""
    out = tmp_path / "modules.json"
    probe = f"OUT = {str(out)!r}\n" + _PROBE
    subprocess.run(
        [sys.executable, "-c", probe, json.dumps(args)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    result = json.loads(out.read_text())
    return result["code"], set(result["modules"])


def _heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules for heavy in HEAVY if m == heavy or m.startswith(heavy + "."))


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["validate", "--help"],
        ["lint", "--help"],
        ["explain", "--help"],
        ["build", "--help"],
        ["deploy", "--help"],
        ["serve", "--help"],
        ["perf", "--help"],
        ["perf", "compare", "--help"],
    ],
    ids=lambda args: " ".join(args),
)
def test_help_imports_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    code, modules = _imported(args, tmp_path)
    assert code == 0
    assert _heavy_in(modules) == []


def test_validate_of_a_repository_needs_no_server_transports_or_jsonschema(
    tmp_path: Path,
) -> None:
    code, modules = _imported(["validate", str(sample_repos_dir() / "models")], tmp_path)
    assert code == 0
    assert "repokit.config.validate" in modules  # it did validate
    assert [m for m in _heavy_in(modules) if m.split(".")[0] in ("grpc", "jsonschema")] == []
    server_or_load = ("repokit.frontends", "repokit.perf.transports", "repokit.perf.options")
    assert [m for m in modules if m.startswith(server_or_load)] == []


def test_validate_of_a_json_config_imports_jsonschema_when_it_needs_it(tmp_path: Path) -> None:
    config = tmp_path / "override.json"
    config.write_text(json.dumps({"name": "m", "backend": "onnxruntime"}))
    _, modules = _imported(["validate", str(config)], tmp_path)
    assert "jsonschema" in modules  # the probe sees a lazily imported module
