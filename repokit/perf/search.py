"""Which load level to measure next: perf_analyzer's linear and binary searches.

Linear: every level of the range in order, stopping after the first level whose latency reaches
``--latency-threshold``. Binary (``--binary-search``, perf_analyzer's ``SearchMode::BINARY``):
measure the range's start (stop if it is already over the threshold) and end (stop if even that
stays within it), then bisect between the last level within the threshold and the first one
over it until they are no more than ``step`` apart; ``step`` is the precision. Integer levels
(concurrency) bisect with integer division, as perf_analyzer's ``size_t`` does.

A search is plain state: :meth:`first` gives the first level, :meth:`after` the next one given
whether the level just measured stayed within the threshold (None: the search is over).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class LinearSearch:
    levels: Sequence[float]
    _index: int = 0

    def first(self) -> float | None:
        self._index = 0
        return self.levels[0] if self.levels else None

    def after(self, value: float, within_threshold: bool) -> float | None:
        self._index += 1
        if not within_threshold or self._index >= len(self.levels):
            return None
        return self.levels[self._index]


@dataclass
class BinarySearch:
    start: float
    end: float
    step: float
    integer: bool  # concurrency levels are whole numbers
    _low: float = 0.0  # highest level known to stay within the threshold
    _high: float = 0.0  # lowest level known to exceed it
    _phase: str = "start"

    def first(self) -> float:
        self._phase = "start"
        return self.start

    def _middle(self) -> float:
        if self.integer:
            return float((int(self._low) + int(self._high)) // 2)
        return (self._low + self._high) / 2

    def after(self, value: float, within_threshold: bool) -> float | None:
        if self._phase == "start":
            if not within_threshold or self.end <= self.start:
                return None  # even the lightest load is over the threshold
            self._phase = "end"
            return self.end
        if self._phase == "end":
            if within_threshold:
                return None  # the whole range stays within it
            self._low, self._high, self._phase = self.start, self.end, "bisect"
        elif within_threshold:
            self._low = value
        else:
            self._high = value
        if self._high - self._low <= self.step:
            return None
        return self._middle()
