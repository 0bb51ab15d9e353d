"""Triton 2.51's own words for load errors the rules find before it would: its path joining,
its failed file reads and the request-id prefix of its request checks (warmup samples are
requests to it). Rules pass these texts as ``triton`` to ``RuleContext.report``: ``repokit
validate`` shows its own message, ``repokit serve`` answers and logs Triton's."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from repokit.core.triton_input_order import triton_order

NO_REQUEST_ID = "[request id: <id_unknown>] "
BATCH_DIMENSION_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def dims_text(dims: Sequence[int]) -> str:
    """Dims as Triton's request checks print them: ``[-1,4]``."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def missing_inputs_text(
    model: str, given: Sequence[str], required: Sequence[str], total: int, prefix: str
) -> str:
    """Triton's request check of the input count (``given``: the request's input names,
    ``total``: how many inputs the model has)."""
    missing = [name for name in required if name not in given]
    missing_text = "[" + ",".join(f"'{n}'" for n in missing) + "]" if missing else "]"
    got_text = "[" + ",".join(f"'{n}'" for n in triton_order(list(given))) + "]"
    if total == len(required):
        head = f"expected {total} inputs but got {len(given)} inputs"
    else:
        head = (
            f"expected number of inputs between {len(required)} and {total} but got "
            f"{len(given)} inputs"
        )
    return (
        f"{prefix}{head} for model '{model}'. Got input(s) {got_text}, but missing "
        f"required input(s) {missing_text}. Please provide all required input(s)."
    )


def join_path(*segments: str) -> str:
    """Triton's ``JoinPath``: segments joined by one ``/``; an absolute segment is appended,
    not taken as a new root (``/m`` + ``/x`` is ``/m/x``); nothing is normalised."""
    joined = ""
    for segment in segments:
        if not joined:
            joined = segment
        elif segment.startswith("/"):
            joined += segment[1:] if joined.endswith("/") else segment
        else:
            joined += segment if joined.endswith("/") else "/" + segment
    return joined


def unreadable_file(path: str) -> str:
    """Triton's ``ReadTextFile`` failure for ``path``: ``failed to open text file for read
    <path>: <strerror>``."""
    reason = os.strerror(errno.ENOENT)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        reason = exc.strerror or reason
    return f"failed to open text file for read {path}: {reason}"
