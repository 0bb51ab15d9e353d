"""The model version a request names, parsed as Triton parses it (``std::stol`` on a prefix).

One parser for every frontend and the core: "" keeps the version policy's choice, leading
whitespace and trailing text are ignored ("3abc" is 3, "007" is 7), a number out of int64 range
or no number at all is "failed to get model version", a negative one is "invalid model version".
"""

from __future__ import annotations

import re

from repokit.errors import invalid_arg

_STOL_PREFIX = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_INT64_MAX = 2**63 - 1


def parse_model_version(text: str) -> str:
    """The version as the core expects it: "" (policy's choice) or a decimal without padding."""
    if text == "":
        return ""
    match = _STOL_PREFIX.match(text)
    if match is None or abs(int(match.group(1))) > _INT64_MAX:
        raise invalid_arg(
            f"failed to get model version from specified version string '{text}' "
            "(details: stol), version should be an integral value > 0"
        )
    value = int(match.group(1))
    if value < 0:
        raise invalid_arg(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return str(value)
