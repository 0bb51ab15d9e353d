"""Python models that record when each execution starts and ends, for the rate limiter's tests
(repokit's and real Triton's).

Every execute appends ``S <instance> <batch size>`` when it starts and ``E <instance> <batch
size>`` when it ends to the file named by the config parameter ``log_path`` (one small
``O_APPEND`` write each, so lines of concurrent instances never interleave). Overlaps and orders
are read from that file, never from durations: :func:`max_concurrency` and :func:`starts`.

Parameters: ``wait_for_peer_s`` makes an execute wait (up to that long) until another instance
has an execution running, so two executions that may overlap do overlap, and ones that may not
give the limiter every chance to let them; ``gate_path`` makes it wait until that file exists;
``fail`` makes it raise, ``crash`` makes the process exit (``os._exit``) once per marker file.
"""

from __future__ import annotations

from pathlib import Path

MODEL_PY = '''
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.log = params.get("log_path", "")
        self.wait = float(params.get("wait_for_peer_s", "0"))
        self.gate = params.get("gate_path", "")
        self.fail = params.get("fail", "")
        self.crash = params.get("crash_marker", "")
        self.name = args["model_instance_name"]

    def _write(self, line):
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\\n").encode())
        finally:
            os.close(fd)

    def _overlapped(self):
        """Another instance ran while this execution has been running: one was running
        when it started, or one started since."""
        running = {}
        with open(self.log) as f:
            lines = [line.split()[:2] for line in f]
        start = max(i for i, (kind, name) in enumerate(lines) if kind == "S" and name == self.name)
        for kind, name in lines[:start]:
            running[name] = running.get(name, 0) + (1 if kind == "S" else -1)
        if any(n > 0 for name, n in running.items() if name != self.name):
            return True
        return any(kind == "S" and name != self.name for kind, name in lines[start + 1 :])

    def execute(self, requests):
        self._write(f"S {self.name} {len(requests)}")
        try:
            deadline = time.monotonic() + self.wait
            while time.monotonic() < deadline and not self._overlapped():
                time.sleep(0.005)
            deadline = time.monotonic() + 60
            while self.gate and not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.005)
            if self.crash and not os.path.exists(self.crash):
                open(self.crash, "w").close()
                self._write(f"E {self.name} {len(requests)}")  # its end: the process exits
                os._exit(3)
            if self.fail:
                raise RuntimeError(self.fail)
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
            return responses
        finally:
            self._write(f"E {self.name} {len(requests)}")
'''


def rate_limiter_text(
    resources: list[tuple[str, int, bool]] | None = None, priority: int = 0
) -> str:
    if resources is None:
        return ""
    items = ", ".join(
        f'{{ name: "{name}" count: {count}{" global: true" if glob else ""} }}'
        for name, count, glob in resources
    )
    prio = f" priority: {priority}" if priority else ""
    return f"rate_limiter {{ resources [ {items} ]{prio} }}"


def write_model(
    repo: Path,
    name: str,
    *,
    log_path: Path,
    resources: list[tuple[str, int, bool]] | None = None,
    priority: int = 0,
    count: int = 1,
    max_batch_size: int = 0,
    scheduling: str = "",
    parameters: dict[str, str] | None = None,
    groups: list[str] | None = None,
) -> Path:
    """A recording model ``name`` in ``repo``; ``groups`` (instance_group bodies) replaces the
    single group built from ``count``, ``resources`` and ``priority``."""
    model = repo / name
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "1" / "model.py").write_text(MODEL_PY)
    params = {"log_path": str(log_path), **(parameters or {})}
    param_text = "\n".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    dims = "[ 1 ]"
    bodies = groups or [f"kind: KIND_CPU count: {count} {rate_limiter_text(resources, priority)}"]
    group_text = ", ".join(f"{{ {body} }}" for body in bodies)
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        f'input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: {dims} }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: {dims} }}]\n'
        f"instance_group [ {group_text} ]\n{scheduling}\n{param_text}\n"
    )
    return model


def write_ensemble(repo: Path, name: str, first: str, second: str) -> Path:
    """An ensemble that runs ``first`` then ``second`` (INPUT0 -> OUTPUT0 each)."""
    model = repo / name
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
        "ensemble_scheduling { step [\n"
        f'  {{ model_name: "{first}" model_version: -1\n'
        '    input_map { key: "INPUT0" value: "INPUT0" }\n'
        '    output_map { key: "OUTPUT0" value: "middle" } },\n'
        f'  {{ model_name: "{second}" model_version: -1\n'
        '    input_map { key: "INPUT0" value: "middle" }\n'
        '    output_map { key: "OUTPUT0" value: "OUTPUT0" } }\n'
        "] }\n"
    )
    return model


def events(log_path: Path) -> list[tuple[str, str]]:
    """(S or E, instance name) in the order the executions wrote them."""
    if not log_path.exists():
        return []
    return [
        (parts[0], parts[1])
        for parts in (line.split() for line in log_path.read_text().splitlines())
        if len(parts) >= 2
    ]


def max_concurrency(log_path: Path, instances: set[str] | None = None) -> int:
    """The most executions (of ``instances``, default all) running at once in the log."""
    running = peak = 0
    for kind, name in events(log_path):
        if instances is not None and name not in instances:
            continue
        running += 1 if kind == "S" else -1
        peak = max(peak, running)
    return peak


def starts(log_path: Path) -> list[str]:
    """The instance of every execution, in the order they started."""
    return [name for kind, name in events(log_path) if kind == "S"]
