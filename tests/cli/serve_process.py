"""A `repokit serve` process for tests: started on free ports, its log (stdout and stderr)
collected by a thread, stopped with signals as a user or an orchestrator stops it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from repokit.parent_death import popen_tied
from tests.serve_workers import serve_workers

STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")
PORT_FLAGS = (
    "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
    "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
)  # fmt: skip


class ServeProcess:
    def __init__(self, *args: str, new_session: bool = False, timeout: float = 90.0) -> None:
        workers = serve_workers()
        if workers > 1 and not any(a.startswith("--workers") for a in args):
            args = (*args, "--workers", str(workers))  # the suite's --serve-workers
        self.process = popen_tied(
            [sys.executable, "-m", "repokit", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
            start_new_session=new_session,
        )
        self.lines: list[str] = []
        self.ports: dict[str, int] = {}
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.wait_for(lambda: len(self.ports) == 3, timeout):
            self.kill()
            raise AssertionError("server did not start:\n" + self.text)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                match = STARTED.search(line)
                if match:
                    self.ports[match.group(1)] = int(match.group(3))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for(self, predicate: object, timeout: float) -> bool:
        """Wait until ``predicate()`` holds (checked whenever a log line arrives)."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    return bool(predicate())
                self._changed.wait(min(left, 0.5))
        return True

    def wait_for_line(self, text: str, timeout: float) -> bool:
        return self.wait_for(lambda: any(text in line for line in self.lines), timeout)

    def signal_group(self, sig: signal.Signals) -> None:
        """As a terminal's Ctrl-C: the signal reaches every process of the group."""
        os.killpg(self.process.pid, sig)

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)

    def url(self, kind: str) -> str:
        return f"127.0.0.1:{self.ports[kind]}"


def write_model(repo: Path, name: str, execute_body: str, count: int = 2) -> None:
    """A python model with FP32 INPUT0 [-1] -> OUTPUT0 whose execute runs ``execute_body``
    per request (``x`` is the input array; it must set ``y``)."""
    folder = repo / name / "1"
    folder.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        f"instance_group [ {{ kind: KIND_CPU count: {count} }} ]\n"
    )
    body = "\n".join("            " + line for line in execute_body.splitlines())
    (folder / "model.py").write_text(
        "import time\n\nimport numpy as np\nimport triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        responses = []\n"
        "        for request in requests:\n"
        '            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()\n'
        f"{body}\n"
        "            responses.append(\n"
        '                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)])\n'
        "            )\n"
        "        return responses\n\n"
        "    def finalize(self):\n"
        f'        pb_utils.Logger.log_info("{name} finalize ran")\n'
    )
