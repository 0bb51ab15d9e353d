"""Triton's CPU gauges: ``nv_cpu_utilization``, ``nv_cpu_memory_total_bytes`` and
``nv_cpu_memory_used_bytes``, collected every ``--metrics-interval-ms`` as Triton's
``Metrics::PollCpuMetrics`` does: utilization from the change of ``/proc/stat``'s cpu line
since the previous collection (busy / total jiffies, 0.0-1.0), memory from ``/proc/meminfo``
(used = MemTotal - MemAvailable). The readers are injectable for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CpuTimes = tuple[int, int]  # (busy, total) jiffies


def read_cpu_times(path: Path = Path("/proc/stat")) -> CpuTimes:
    fields = path.read_text().split("\n", 1)[0].split()[1:]
    values = [int(v) for v in fields]
    # user nice system idle iowait irq softirq steal (guest times are inside user and nice)
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return total - idle, total


def read_memory(path: Path = Path("/proc/meminfo")) -> tuple[int, int]:
    """(total, used) bytes."""
    info: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            info[key] = int(parts[0]) * 1024
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", info.get("MemFree", 0))
    return total, max(0, total - available)


@dataclass
class CpuMetrics:
    read_times: Callable[[], CpuTimes] = read_cpu_times
    read_mem: Callable[[], tuple[int, int]] = read_memory
    utilization: float = 0.0
    memory_total: int = 0
    memory_used: int = 0
    _last: CpuTimes | None = None

    def collect(self) -> None:
        try:
            times = self.read_times()
            self.memory_total, self.memory_used = self.read_mem()
        except (OSError, ValueError, IndexError) as exc:  # not Linux, or /proc unreadable
            log.debug("CPU metrics not collected: %s", exc)
            return
        if self._last is not None:
            busy = times[0] - self._last[0]
            total = times[1] - self._last[1]
            if total > 0:
                self.utilization = min(1.0, max(0.0, busy / total))
        self._last = times

    async def run(self, interval_s: float) -> None:
        """Collect now and then every ``interval_s`` until cancelled."""
        while True:
            self.collect()
            await asyncio.sleep(interval_s)

    def render(self) -> list[str]:
        lines: list[str] = []
        for name, help_text, value in (
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", _number(self.utilization)),
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", self.memory_total),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", self.memory_used),
        ):
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {value}")
        return lines


def _number(value: float) -> str:
    """As prometheus-cpp prints a double: integers without a fraction."""
    return str(int(value)) if value == int(value) else repr(value)


async def stop_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
