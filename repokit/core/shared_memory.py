"""Registry of client POSIX (system) shared-memory regions, with Triton's messages.

A region is ``/dev/shm/<key>``, opened once at registration like glibc's ``shm_open`` (the key
is one name: leading slashes dropped, no other ``/``, not ``.`` or ``..``; symlinks are not
followed) and kept open as a file descriptor; only regular files are accepted. The client owns
the file and may shrink it at any time, and a mapping would turn that into SIGBUS in the
server, so there is none: each access checks the file's size at that moment and copies through
the descriptor (``preadv`` / ``pwrite``), where a file shrunk meanwhile gives a short count, never
a signal. Reads copy the window once into a fresh array; everything is bounds-checked against
the registered window ``[offset, offset+byte_size)``. Client shared memory is off unless the
server runs with ``--allow-client-shm``.
"""

from __future__ import annotations

import contextlib
import os
import stat
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
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    users: int = 0  # requests in flight that read or write it (it cannot be unregistered)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def truncated(self, size: int, start: int, end: int) -> RepokitError:
        return invalid_arg(
            f"shared memory region '{self.name}' (key '{self.key}') is {size} bytes now, too "
            f"small for bytes [{start}, {end}) of the request: the file was truncated after "
            "registration"
        )

    def check_size(self, start: int, end: int) -> None:
        size = os.fstat(self.fd).st_size
        if end > size:
            raise self.truncated(size, start, end)


def _open_region(root: str, key: str) -> int:
    """The descriptor of ``root/<key>``, opened as ``shm_open`` would; INTERNAL as Triton when
    the key names no plain file there."""
    file_name = key.lstrip("/")
    refused = internal(f"Unable to open shared memory region: '{key}'")
    if not file_name or "/" in file_name or "\0" in file_name or file_name in (".", ".."):
        raise refused
    try:
        fd = os.open(os.path.join(root, file_name), _OPEN_FLAGS)
    except OSError as exc:
        raise refused from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refused
    return fd


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
        fd = _open_region(self._root, key)
        size = os.fstat(fd).st_size
        if offset < 0 or byte_size < 0 or offset + byte_size > size or size == 0:
            os.close(fd)
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        self._regions[name] = _Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str = "") -> None:
        """Unregister one region (unknown names are fine, as Triton) or all when name is "".
        A region a request in flight uses stays, as in Triton (INTERNAL "Cannot unregister
        shared memory region '<name>', it is currently in use."; unregistering all removes
        the others and names those in use, in name order)."""
        self._check_enabled()
        if name:
            region = self._regions.get(name)
            if region is not None:
                if region.users:
                    raise internal(
                        f"Cannot unregister shared memory region '{name}', it is currently in use."
                    )
                del self._regions[name]
                region.close()
            return
        in_use = []
        for region_name in sorted(self._regions):
            region = self._regions[region_name]
            if region.users:
                in_use.append(region_name)
                continue
            del self._regions[region_name]
            region.close()
        if in_use:
            raise internal(
                "Failed to unregister the following system shared memory regions: "
                + "".join(f"{n} ," for n in in_use)
            )

    def hold(self, names: tuple[str, ...]) -> list[_Region]:
        """Mark the named regions as used by a request in flight (until :meth:`release`)."""
        held = []
        for name in names:
            region = self._regions.get(name)
            if region is not None:
                region.users += 1
                held.append(region)
        return held

    @staticmethod
    def release(held: list[_Region]) -> None:
        for region in held:
            region.users -= 1

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
        # Triton's two checks and messages (server shared_memory_manager.cc GetMemoryInfo)
        if ref.offset < 0 or ref.offset > max(region.byte_size - 1, 0):
            raise invalid_arg(f"Invalid offset for shared memory region: '{ref.region}'")
        if ref.byte_size < 0 or ref.offset + ref.byte_size > region.byte_size:
            raise invalid_arg(
                f"Invalid offset + byte size for shared memory region: '{ref.region}'"
            )
        return region, region.offset + ref.offset

    def read(self, ref: SharedMemoryRef) -> npt.NDArray[np.uint8]:
        """A copy of the referenced bytes, as they are in the file now."""
        region, start = self._window(ref)
        end = start + ref.byte_size
        region.check_size(start, end)
        data = np.empty(ref.byte_size, dtype=np.uint8)
        view = data.data  # a memoryview over the array
        done = 0
        while done < ref.byte_size:  # one call unless above the kernel's ~2 GiB per call
            count = os.preadv(region.fd, [view[done:]], start + done)
            if count == 0:  # shrunk since the check
                raise region.truncated(os.fstat(region.fd).st_size, start, end)
            done += count
        return data

    def write(self, ref: SharedMemoryRef, output_name: str, data: bytes | memoryview) -> None:
        region, start = self._window(ref)
        size = memoryview(data).nbytes
        if size > ref.byte_size:  # Triton 2.51 reports this as INTERNAL (500)
            raise internal(
                f"shared memory size specified with the request for output '{output_name}' "
                f"({ref.byte_size} bytes) should be at least {size} bytes to hold the results"
            )
        region.check_size(start, start + size)
        view = memoryview(data).cast("B")
        written = 0
        while written < size:
            written += os.pwrite(region.fd, view[written:], start + written)

    def close(self) -> None:
        for region in self._regions.values():
            region.close()
        self._regions.clear()
