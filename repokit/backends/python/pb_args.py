"""Argument checks of the ``pb_utils`` API, as Triton's python backend makes them.

Triton's classes are C++ bindings (pybind11): an argument of the wrong type is refused with a
``TypeError`` that names the call, the supported signature and what it was invoked with
(``None`` where a ``str``, ``int`` or list is expected, an ``int`` where a LogLevel is
expected, a set where a list is expected). Checks on values (an empty tensor name, a ``None``
inside a list of tensors) are the backend's own and raise ``TritonModelException``; those are
made by the callers.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

MISSING: Any = object()  # a required argument that was not given


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_text(value: Any) -> bool:
    """What a ``std::string`` argument takes from pybind11: a str or bytes (a BYTES tensor's
    element, e.g. a model name read from an input, arrives as bytes)."""
    return isinstance(value, (str, bytes))


def as_text(value: str | bytes) -> str:
    """A :func:`is_text` argument as a str (bytes as UTF-8, as the C++ side reads them)."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def is_int(value: Any) -> bool:
    """What a C++ integer argument takes: ints (and numpy integers), not floats or None."""
    if isinstance(value, (float, np.floating)) or value is None or isinstance(value, str):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def is_list_of(value: Any, allowed: type | tuple[type, ...], none_ok: bool = False) -> bool:
    """A ``List[T]`` argument: a list or tuple (not a str, set or dict) of ``allowed`` items
    (``None`` items too when ``none_ok``: they are then refused by the caller's own check)."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return False
    return all(isinstance(item, allowed) or (none_ok and item is None) for item in value)


def invoked_with(args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    parts = [repr(a) for a in args]
    given = {k: v for k, v in (kwargs or {}).items() if v is not MISSING}
    if given:
        parts.append("kwargs: " + ", ".join(f"{k}={v!r}" for k, v in given.items()))
    return ", ".join(parts)


def incompatible_constructor(
    signature: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
) -> TypeError:
    return TypeError(
        "__init__(): incompatible constructor arguments. The following argument types are "
        f"supported:\n    1. {signature}\n\nInvoked with: {invoked_with(args, kwargs)}"
    )


def incompatible_call(
    function: str, signature: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
) -> TypeError:
    return TypeError(
        f"{function}(): incompatible function arguments. The following argument types are "
        f"supported:\n    1. {signature}\n\nInvoked with: {invoked_with(args, kwargs)}"
    )
