"""``repokit validate --python-auto-complete``: a python model's ``auto_complete_config`` runs
as the python backend runs it when Triton loads the model with auto-complete on, in a process
of its own (:mod:`repokit.backends.python.auto_complete_once`), and the config it completes is
the one the rules check. Model code runs: that is why it is a flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import repokit
from repokit.backends.python.messages import OK
from repokit.config.parse import ConfigParseError, parse_json
from repokit.core.config_json import config_to_json_text
from repokit.protocol.generated import model_config_pb2 as mc

TIMEOUT_S = 120.0
_PACKAGE_PARENT = str(Path(repokit.__file__).resolve().parent.parent)


@dataclass
class Completed:
    config: mc.ModelConfig | None = None  # None: the model has no auto_complete_config
    error: str = ""  # Triton's load error when it failed


def run_auto_complete(
    model_file: Path, config: mc.ModelConfig, version: int, timeout_s: float = TIMEOUT_S
) -> Completed:
    """The model's ``auto_complete_config`` on ``config`` (the stub's arguments for the
    model's first instance)."""
    name = config.name
    args = {
        "model_config": config_to_json_text(config),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_file.parent.parent),
        "model_version": str(version),
        "model_name": name,
    }
    payload = json.dumps({"model_file": str(model_file), "args": args})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="repokit-auto-complete-") as tmp:
        result = Path(tmp) / "result.json"
        module = "repokit.backends.python.auto_complete_once"
        try:
            process = subprocess.run(
                [sys.executable, "-m", module, str(result)],
                input=payload.encode(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Completed(error=f"auto_complete_config did not return in {timeout_s:g} s")
        if not result.exists():
            said = process.stderr.decode(errors="replace").strip().splitlines()[-1:]
            return Completed(
                error="the process running auto_complete_config exited with "
                f"{process.returncode}" + (f": {said[0]}" if said else "")
            )
        status, body = json.loads(result.read_text())
    if status != OK:
        return Completed(error=str(body))
    if not body.get("config"):
        return Completed()
    try:
        return Completed(config=parse_json(body["config"]))
    except ConfigParseError as exc:
        return Completed(error=f"auto-complete-config produced an invalid config: {exc}")


def model_file_to_complete(model_dir: Path, config: mc.ModelConfig) -> tuple[Path, int] | None:
    """The model file of the highest numeric version folder that has one (the version Triton
    loads by default), or None."""
    filename = config.default_model_filename or "model.py"
    versions = sorted(
        (int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
        reverse=True,
    )
    for version in versions:
        path = model_dir / str(version) / filename
        if path.is_file():
            return path, version
    return None
