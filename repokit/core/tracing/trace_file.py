"""Triton's JSON trace file: one JSON array of trace objects.

With ``log_frequency`` 0 the traces go to ``<file>``: the file is created (truncated) at the
first write, each later write appends to the array, and the array is closed when the server
stops (until then the file is an unterminated array, as tritonserver's is; a trace that ends
after that goes into the closed array, never over it). Otherwise every ``log_frequency`` traces
go to a new complete file ``<file>.0``, ``<file>.1``, ... (the index counts per file name; each
is written whole, then renamed into place); so do the traces collected when ``trace_count``
runs out.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TextIO

log = logging.getLogger(__name__)


class TraceFile:
    def __init__(self, name: str) -> None:
        self.name = name
        self._index = 0
        self._main: TextIO | None = None
        self._closed = False  # the array of <file> was written and closed

    def save(self, objects: list[str], to_index_file: bool) -> None:
        """Write trace objects (each a JSON object's text); I/O errors are logged, as
        tritonserver logs "failed creating trace file"."""
        if not objects or not self.name:
            return
        body = ",".join(objects)
        try:
            if to_index_file:
                self._write_whole(f"{self.name}.{self._index}", f"[{body}]")
                self._index += 1
                return
            if self._closed:
                self._append_to_closed(body)
                return
            if self._main is None:
                self._main = open(self.name, "w", encoding="utf-8")  # noqa: SIM115 - kept open
                self._main.write("[")
            else:
                self._main.write(",")
            self._main.write(body)
            self._main.flush()
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def close(self) -> None:
        """Close the array of ``<file>`` (server shutdown)."""
        main, self._main = self._main, None
        if main is not None:
            self._closed = True
            try:
                main.write("]")
                main.close()
            except OSError as exc:
                log.error("failed closing trace file: %s", exc)

    @staticmethod
    def _write_whole(path: str, text: str) -> None:
        """Write a file that appears complete or not at all: a reader polling for index files
        (a test, a log shipper) never opens one that is empty or cut short."""
        folder, name = os.path.split(path)
        partial = os.path.join(folder, f".{name}.partial")
        try:
            with open(partial, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(partial, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise

    def _append_to_closed(self, body: str) -> None:
        """Put trace objects into the closed array of ``<file>``: before its final ``]``."""
        with open(self.name, "rb+") as out:
            end = out.seek(0, os.SEEK_END)
            out.seek(max(end - 1, 0))
            out.write(f",{body}]".encode())
