"""Prometheus metrics scraped from the server (``--collect-metrics``) during measurement.

:class:`MetricsScraper` GETs ``--metrics-url`` every ``--metrics-interval`` ms in a background
task and keeps timestamped samples; :func:`summarize_metrics` reduces the samples of a time range
the way perf_analyzer reports them: average GPU utilization and power per GPU, maximum memory
used, total memory (per GPU UUID), plus Triton's CPU utilization and memory when present.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from typing import Any

from repokit.perf.errors import PerfError
from repokit.perf.transports.http import split_url

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_UUID = re.compile(r'gpu_uuid="([^"]*)"')
AVERAGED = {
    "nv_gpu_utilization": "gpu_utilization",
    "nv_gpu_power_usage": "gpu_power_usage",
    "nv_cpu_utilization": "cpu_utilization",
}
MAXIMUM = {
    "nv_gpu_memory_used_bytes": "gpu_memory_used_bytes",
    "nv_gpu_memory_total_bytes": "gpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes": "cpu_memory_used_bytes",
}

Sample = dict[str, dict[str, float]]  # family -> gpu uuid ("" for CPU) -> value


def parse_prometheus(text: str) -> Sample:
    out: Sample = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        family = AVERAGED.get(name) or MAXIMUM.get(name)
        if family is None:
            continue
        uuid = _UUID.search(labels or "")
        try:
            out.setdefault(family, {})[uuid.group(1) if uuid else ""] = float(value)
        except ValueError:
            continue
    return out


def summarize_metrics(samples: list[tuple[int, Sample]], start_ns: int, end_ns: int) -> Sample:
    chosen = [s for t, s in samples if start_ns <= t <= end_ns] or [s for _, s in samples[-1:]]
    out: Sample = {}
    for family in (*AVERAGED.values(), *MAXIMUM.values()):
        values: dict[str, list[float]] = {}
        for sample in chosen:
            for key, value in sample.get(family, {}).items():
                values.setdefault(key, []).append(value)
        if not values:
            continue
        reduce: Callable[[list[float]], float] = (
            (lambda v: sum(v) / len(v)) if family in AVERAGED.values() else max
        )
        out[family] = {key: reduce(v) for key, v in values.items()}
    return out


async def http_get(url: str, timeout: float = 5.0) -> str:
    host, port = split_url(url, 8002)
    rest = url.split("://", 1)[-1]
    path = "/" + rest.split("/", 1)[1] if "/" in rest else "/metrics"
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError) as exc:
        raise PerfError(f"cannot reach the metrics endpoint {url}: {exc}") from None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") and not head.startswith(b"HTTP/1.0 200"):
        status = head.split(b"\r\n")[0].decode("latin-1")
        raise PerfError(f"the metrics endpoint {url} answered '{status}'")
    if b"transfer-encoding: chunked" in head.lower():
        from repokit.perf.transports.http import _dechunk

        decoded = _dechunk(bytearray(body), 0)
        body = decoded[0] if decoded else body
    return body.decode("utf-8", "replace")


class MetricsScraper:
    def __init__(self, url: str, interval_ms: float, clock: Callable[[], int]) -> None:
        self.url = url
        self.interval_s = interval_ms / 1000.0
        self.clock = clock
        self.samples: list[tuple[int, Sample]] = []
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.samples.append((self.clock(), parse_prometheus(await http_get(self.url))))
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                text = await http_get(self.url)
            except PerfError as exc:
                self.error = exc.message
                continue
            self.samples.append((self.clock(), parse_prometheus(text)))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def summary(self, start_ns: int, end_ns: int) -> dict[str, Any]:
        return dict(summarize_metrics(self.samples, start_ns, end_ns))
