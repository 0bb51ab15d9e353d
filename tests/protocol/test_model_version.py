"""One model-version parser (std::stol on a prefix, as Triton) for every frontend and the core."""

from __future__ import annotations

import pytest

from repokit.errors import Code, RepokitError
from repokit.frontends.grpc import messages
from repokit.frontends.http import infer_request
from repokit.protocol.model_version import parse_model_version

FAILED = "failed to get model version from specified version string '{}' (details: stol), "
FAILED += "version should be an integral value > 0"
NEGATIVE = "invalid model version specified '{}' , version should be an integral value > 0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", ""), ("1", "1"), ("007", "7"), (" \t2", "2"), ("3abc", "3"), ("+4", "4"),
     (str(2**63 - 1), str(2**63 - 1)), ("-0", "0")],
)  # fmt: skip
def test_parses_like_stol(text: str, expected: str) -> None:
    assert parse_model_version(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("abc", FAILED), (str(2**63), FAILED), ("\u0663", FAILED), ("-1", NEGATIVE)],
)
def test_rejects_with_tritons_message(text: str, message: str) -> None:
    with pytest.raises(RepokitError) as info:
        parse_model_version(text)
    assert (info.value.code, info.value.message) == (Code.INVALID_ARG, message.format(text))


def test_every_frontend_uses_the_one_parser() -> None:
    assert messages.parse_model_version is parse_model_version
    assert infer_request.parse_model_version is parse_model_version
