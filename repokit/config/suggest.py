"""Suggestions ("did you mean ...?") for names a user got slightly wrong: fields, enum values,
tensors."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` was most likely meant to be (case differences first), or None."""
    options = [c for c in dict.fromkeys(candidates) if c != name]
    lowered = name.lower()
    for option in options:
        if option.lower() == lowered:
            return option
    by_lower = {option.lower(): option for option in options}
    matches = difflib.get_close_matches(lowered, list(by_lower), n=1, cutoff=0.6)
    return by_lower[matches[0]] if matches else None


def did_you_mean(name: str, candidates: Iterable[str], quote: str = "'") -> str:
    """`` (did you mean 'X'?)`` when a candidate is close to ``name``, else ``""``."""
    match = closest(name, candidates)
    return f" (did you mean {quote}{match}{quote}?)" if match else ""
