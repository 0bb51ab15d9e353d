"""System (POSIX) shared memory for ``--shared-memory system``.

Each prepared sample gets one region holding all its input tensors back to back (written once);
each output gets one region of ``--output-shared-memory-size`` bytes shared by all requests (the
outputs are not read back, as in perf_analyzer). Regions are registered with the server's
system shared memory extension and unregistered and unlinked on :meth:`SystemShm.close`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from repokit.perf.errors import PerfError
from repokit.perf.transports.base import ShmBinding, Transport
from repokit.protocol.tensor_codec import array_to_bytes

SHM_DIR = "/dev/shm"


@dataclass
class _Region:
    name: str
    key: str
    size: int
    mapping: mmap.mmap


@dataclass
class SystemShm:
    transport: Transport
    prefix: str = field(default_factory=lambda: f"repokit_perf_{os.getpid()}")
    regions: list[_Region] = field(default_factory=list)

    def _create(self, suffix: str, size: int) -> _Region:
        name = f"{self.prefix}_{suffix}"
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise PerfError(f"cannot create shared memory region {path}: {exc.strerror}") from None
        try:
            os.ftruncate(fd, max(size, 1))
            mapping = mmap.mmap(fd, max(size, 1))
        finally:
            os.close(fd)
        region = _Region(name, "/" + name, max(size, 1), mapping)
        self.regions.append(region)
        return region

    async def bind_sample(
        self,
        index: int,
        inputs: dict[str, tuple[str, npt.NDArray[Any]]],
        outputs: dict[str, tuple[str, int, int]],
    ) -> ShmBinding:
        payloads = {name: bytes(array_to_bytes(dt, array)) for name, (dt, array) in inputs.items()}
        region = self._create(f"in{index}", sum(len(p) for p in payloads.values()))
        binding: dict[str, tuple[str, int, int]] = {}
        offset = 0
        for name, payload in payloads.items():
            region.mapping[offset : offset + len(payload)] = payload
            binding[name] = (region.name, offset, len(payload))
            offset += len(payload)
        await self.transport.register_system_shm(region.name, region.key, region.size)
        return ShmBinding(binding, outputs)

    async def output_regions(self, sizes: dict[str, int]) -> dict[str, tuple[str, int, int]]:
        """One registered region per output, of the given byte size."""
        out: dict[str, tuple[str, int, int]] = {}
        for i, (name, size) in enumerate(sizes.items()):
            region = self._create(f"out{i}", size)
            await self.transport.register_system_shm(region.name, region.key, region.size)
            out[name] = (region.name, 0, size)
        return out

    async def close(self) -> None:
        for region in self.regions:
            with contextlib.suppress(PerfError):
                await self.transport.unregister_system_shm(region.name)
            region.mapping.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(SHM_DIR, region.name))
        self.regions.clear()
