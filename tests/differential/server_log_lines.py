"""Reading a tritonserver-style log (Triton's own or ``repokit serve``'s) for the differential
tests: each record as (level letter, source file, message), the message unquoted; the lines of
the model lifecycle (``loading: m:1``, ``failed to load 'm' version 1: ...``, ``failed to load
'm'``, ``successfully loaded 'm'``, ``successfully unloaded 'm' version 1``) of one model, and
the core's ``ERROR: Failed to create instance: <message>``."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

RECORD = re.compile(r"^([IWE])\d{4} [\d:.]+ +\d+ ([^\s:]+):\d+\] (.*)$")

Record = tuple[str, str, str]  # level letter, source file, message
INSTANCE_FAILURE = "ERROR: Failed to create instance: "


def records(text: str) -> list[Record]:
    """Every one-line record of the log (tables, which continue on further lines, count with
    their first line only)."""
    found = []
    for line in text.splitlines():
        match = RECORD.match(line)
        if match is None:
            continue
        level, source, message = match.groups()
        if message.startswith('"'):
            with contextlib.suppress(ValueError):
                message = json.loads(message)
        found.append((level, source, message))
    return found


def lifecycle(
    found: Iterable[Record], model: str, sequential: bool = False
) -> list[tuple[str, str]]:
    """The (level, message) lifecycle lines of ``model``, in the log's order. With
    ``sequential`` (one load at a time) also the ``ERROR: Failed to create instance`` lines
    (which name no model) logged while ``model`` loaded."""
    heads = (
        f"loading: {model}:",
        f"failed to load '{model}'",
        f"successfully loaded '{model}'",
        f"successfully unloaded '{model}' ",
    )
    lines, loading = [], ""
    for level, _, message in found:
        if message.startswith("loading: "):
            loading = message.removeprefix("loading: ").rpartition(":")[0]
        if message.startswith(heads) or (
            sequential and loading == model and message.startswith(INSTANCE_FAILURE)
        ):
            lines.append((level, message))
    return lines


def wait_for_text(read: Callable[[], str], done: Callable[[str], bool], timeout: float) -> str:
    """The log's text once ``done`` holds for it, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        text = read()
        if done(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def file_reader(path: Path) -> Callable[[], str]:
    return lambda: path.read_text(errors="replace") if path.exists() else ""
