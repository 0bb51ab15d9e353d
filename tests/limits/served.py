"""``repokit serve`` in its own process, for tests that measure the server's memory and
descriptors (an in-process server would share them with the test's clients)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from repokit.parent_death import popen_tied

_STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")


@dataclass
class ServedProcess:
    process: subprocess.Popen[str]
    http_port: int
    grpc_port: int

    def rss_mb(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


@contextmanager
def served(repo: Path, *flags: str, timeout: float = 120.0) -> Iterator[ServedProcess]:
    process = popen_tied(
        [
            sys.executable, "-m", "repokit", "serve", str(repo), "--http-port", "0",
            "--grpc-port", "0", "--metrics-port", "0", "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert process.stdout is not None
    ports: dict[str, int] = {}
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(ports) < 3:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = _STARTED.search(line)
        if match:
            ports[match.group(1)] = int(match.group(3))
    try:
        if len(ports) < 3:
            raise AssertionError("server did not start:\n" + "".join(lines))
        yield ServedProcess(process, ports["HTTPService"], ports["GRPCInferenceService"])
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
