"""Registry of client POSIX (system) shared-memory regions, with Triton's messages.

A region is ``/dev/shm/<key>`` mapped read/write once at registration (the whole file, so any
``offset`` works); requests read inputs from it as numpy views (no copy) and write outputs into
it. Everything is bounds-checked against the registered window ``[offset, offset+byte_size)``.
Client shared memory is off unless the server runs with ``--allow-client-shm``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.errors import Code, RepokitError, internal, invalid_arg, not_found, unsupported
from repokit.protocol.types import SharedMemoryRef

SHM_ROOT = "/dev/shm"
DISABLED_MESSAGE = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def close(self) -> None:
        # a request may still hold a view; the mapping then closes when it is released
        with contextlib.suppress(BufferError):
            self.mapping.close()


class SystemSharedMemory:
    def __init__(self, enabled: bool, root: str = SHM_ROOT) -> None:
        self._enabled = enabled
        self._root = root
        self._regions: dict[str, _Region] = {}

    def _check_enabled(self) -> None:
        if not self._enabled:
            raise unsupported(DISABLED_MESSAGE)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_enabled()
        if name in self._regions:
            raise RepokitError(
                Code.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )
        file_name = key.lstrip("/")
        if not file_name or "/" in file_name or file_name in (".", ".."):
            raise internal(f"Unable to open shared memory region: '{key}'")
        try:
            fd = os.open(os.path.join(self._root, file_name), os.O_RDWR)
        except OSError as exc:
            raise internal(f"Unable to open shared memory region: '{key}'") from exc
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or byte_size < 0 or offset + byte_size > size or size == 0:
                raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            raise internal(f"Invalid shared memory region: '{key}'") from exc
        finally:
            os.close(fd)
        self._regions[name] = _Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str = "") -> None:
        """Unregister one region (unknown names are fine, as Triton) or all when name is ""."""
        self._check_enabled()
        names = list(self._regions) if not name else [name]
        for region_name in names:
            region = self._regions.pop(region_name, None)
            if region is not None:
                region.close()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        self._check_enabled()
        if name:
            region = self._regions.get(name)
            if region is None:
                raise not_found(f"Unable to find system shared memory region: '{name}'")
            regions = [region]
        else:
            regions = list(self._regions.values())
        return [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in regions
        ]

    def _window(self, ref: SharedMemoryRef) -> tuple[_Region, int]:
        region = self._regions.get(ref.region)
        if region is None:
            raise not_found(f"Unable to find shared memory region: '{ref.region}'")
        if ref.offset < 0 or ref.byte_size < 0 or ref.offset + ref.byte_size > region.byte_size:
            raise invalid_arg(
                f"Invalid offset + byte size for shared memory region: '{ref.region}'"
            )
        return region, region.offset + ref.offset

    def read(self, ref: SharedMemoryRef) -> npt.NDArray[np.uint8]:
        """A uint8 view of the referenced bytes (no copy)."""
        region, start = self._window(ref)
        return np.frombuffer(region.mapping, dtype=np.uint8, count=ref.byte_size, offset=start)

    def write(self, ref: SharedMemoryRef, output_name: str, data: bytes | memoryview) -> None:
        region, start = self._window(ref)
        size = memoryview(data).nbytes
        if size > ref.byte_size:  # Triton 2.51 reports this as INTERNAL (500)
            raise internal(
                f"shared memory size specified with the request for output '{output_name}' "
                f"({ref.byte_size} bytes) should be at least {size} bytes to hold the results"
            )
        region.mapping[start : start + size] = data

    def close(self) -> None:
        for region in self._regions.values():
            region.close()
        self._regions.clear()
