"""What to send: pre-encoded requests per data sample and the sequence bookkeeping.

:class:`Workload` holds the transport-prepared requests in streams (see
:class:`repokit.perf.inputs.DataSet`) with their validation outputs. :class:`SequenceSource`
hands out sequences for sequence models: IDs from ``--sequence-id-range`` (wrapping at its end),
lengths from ``--sequence-length`` +/- ``--sequence-length-variation`` percent (or the stream's
length when the data has streams and no ``--sequence-length`` was given), and the START/END
flags of each step; the server's sequence batcher derives START/END/READY/CORRID control tensors
from the request's sequence parameters.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.perf.transports.base import SequenceFlags


@dataclass
class Workload:
    streams: list[list[Any]]  # prepared requests
    expected: list[list[dict[str, npt.NDArray[Any]] | None]]
    is_sequence: bool = False
    stream_lengths_from_data: bool = False

    @property
    def validating(self) -> bool:
        return any(e is not None for stream in self.expected for e in stream)

    def flat(self) -> list[tuple[Any, dict[str, npt.NDArray[Any]] | None]]:
        return [
            (request, expected)
            for stream, expected_stream in zip(self.streams, self.expected, strict=True)
            for request, expected in zip(stream, expected_stream, strict=True)
        ]


@dataclass
class SequenceSource:
    id_start: int
    id_end: int | None
    length: int
    variation_pct: float
    use_stream_lengths: bool
    stream_count: int
    stream_lengths: list[int]
    seed: int = 0
    _ids: Iterator[int] = field(init=False)
    _streams: Iterator[int] = field(init=False)
    _rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        if self.id_end is None:
            self._ids = itertools.count(self.id_start)
        else:
            self._ids = itertools.cycle(range(self.id_start, self.id_end + 1))
        self._streams = itertools.cycle(range(self.stream_count))
        self._rng = np.random.default_rng(self.seed)

    def next_sequence(self) -> Sequence:
        stream = next(self._streams)
        if self.use_stream_lengths:
            length = self.stream_lengths[stream]
        else:
            spread = self.length * self.variation_pct / 100.0
            length = max(1, round(self._rng.uniform(self.length - spread, self.length + spread)))
        return Sequence(next(self._ids), stream, length)


@dataclass
class Sequence:
    sequence_id: int
    stream: int
    length: int
    sent: int = 0

    def next_step(self) -> tuple[int, SequenceFlags]:
        step = self.sent
        self.sent += 1
        flags = SequenceFlags(self.sequence_id, step == 0, self.sent >= self.length)
        return step, flags

    @property
    def done(self) -> bool:
        return self.sent >= self.length


def outputs_match(
    outputs: dict[str, npt.NDArray[Any]] | None, expected: dict[str, npt.NDArray[Any]]
) -> str | None:
    """None when every expected output equals the response's; else what differs."""
    got = outputs or {}
    for name, want in expected.items():
        have = got.get(name)
        if have is None:
            return f"output '{name}' is missing from the response"
        flat = np.ravel(have)
        if flat.dtype == object or want.dtype == object:
            same = flat.shape == want.shape and all(
                (a if isinstance(a, bytes) else str(a).encode()) == b
                for a, b in zip(flat.tolist(), want.tolist(), strict=True)
            )
        else:
            same = flat.shape == want.shape and bool(np.array_equal(flat, want.astype(flat.dtype)))
        if not same:
            return (
                f"output '{name}' is {flat[:8].tolist()} but validation_data expects "
                f"{want[:8].tolist()}"
            )
    return None
