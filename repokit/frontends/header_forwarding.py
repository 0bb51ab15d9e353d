"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request headers whose
name matches a regular expression reach the model as string request parameters.

As tritonserver 2.51 does it (``src/http_server.cc`` ``ForwardHeaders``, ``src/grpc/
infer_handler.h`` ``ForwardHeadersAsParameters``): the pattern is matched anywhere in the name
(RE2 ``PartialMatch``: :meth:`re.Pattern.search` here) and without regard to case unless it
starts with ``(?-i)`` (tritonserver puts ``(?i)`` in front of what it was given); each matching
header becomes a parameter of the same name with the header's value. gRPC metadata names are
lower case on the wire, as are this server's HTTP header names, so a case-sensitive pattern in
capitals matches nothing (Triton's qa ``L0_parameters`` relies on that for gRPC). A request with
forwarded headers takes the standard path (the python backend's wire lane sends the body as it
is); one without them is served as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CASE_SENSITIVE = "(?-i)"


class HeaderForwarding:
    """The compiled pattern of one frontend."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: str, option: str) -> None:
        self.pattern = compile_pattern(pattern, option)

    def parameters(self, headers: Iterable[tuple[str, str]]) -> dict[str, str] | None:
        """The headers to forward, as parameters (None: none matched)."""
        search = self.pattern.search
        found = {name: value for name, value in headers if search(name)}
        return found or None


def compile_pattern(pattern: str, option: str) -> re.Pattern[str]:
    """The regular expression of a ``--*-header-forward-pattern`` value (ValueError with the
    option's name when it does not compile)."""
    flags: int = re.IGNORECASE
    text = pattern
    if text.startswith(CASE_SENSITIVE):
        flags = 0
        text = text[len(CASE_SENSITIVE) :]
    try:
        return re.compile(text, flags)
    except re.error as exc:
        raise ValueError(f"--{option}: invalid regular expression '{pattern}': {exc}") from None


def forwarding(pattern: str | None, option: str) -> HeaderForwarding | None:
    """None when no pattern was given (nothing is forwarded, nothing costs per request)."""
    return HeaderForwarding(pattern, option) if pattern else None
