"""The HTTP and gRPC frontends stand side by side: neither imports the other. What both need
(restricted API categories, status mapping, ...) lives in a neutral module of
``repokit.frontends`` or in the core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FRONTENDS = Path(__file__).resolve().parents[2] / "repokit" / "frontends"


def imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(("side", "other"), [("http", "grpc"), ("grpc", "http")])
def test_frontend_does_not_import_the_other(side: str, other: str) -> None:
    sources = sorted((FRONTENDS / side).rglob("*.py"))
    assert sources
    forbidden = f"repokit.frontends.{other}"
    offences = [
        f"{path.name} imports {name}"
        for path in sources
        for name in imported_modules(path.read_text("utf-8"))
        if name == forbidden or name.startswith(forbidden + ".")
    ]
    assert offences == []


def test_the_check_sees_an_import() -> None:
    found = imported_modules("from repokit.frontends.http.restricted import x\nimport a.b\n")
    assert found == {"repokit.frontends.http.restricted", "a.b"}
