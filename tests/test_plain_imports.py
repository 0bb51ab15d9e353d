"""repokit imports its own modules with plain import statements, never by a name in a string.

A module loaded through ``importlib.import_module("repokit....")``, ``__import__`` or a
``find_spec`` probe turns a rename into a silent fallback or a failure at run time; a plain
import fails at once (ruff, mypy and the first test that imports it). Optional heavy packages
(tensorrt, ...) may still be imported lazily by a literal name, and the python backend's stub
imports the user's model file, whose name it only learns at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "repokit"
LOADERS = {"import_module", "__import__", "find_spec", "spec_from_file_location"}
# file -> why it may pass a name that is not a literal
RUN_TIME_NAMES = {
    "backends/python/stub.py": "imports the user's model.py (its folder is known at run time)",
}


def _loader_calls(tree: ast.AST) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LOADERS:
                calls.append(node)
    return calls


def _offences(relative: str, source: str) -> list[str]:
    found = []
    for call in _loader_calls(ast.parse(source)):
        where = f"{relative}:{call.lineno}"
        first = call.args[0] if call.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            if first.value.split(".")[0] == "repokit":
                found.append(f"{where} loads its own module {first.value!r} by name")
        elif relative not in RUN_TIME_NAMES:
            found.append(f"{where} loads a module whose name is computed at run time")
    return found


def test_no_module_loads_our_own_modules_by_name() -> None:
    sources = [p for p in PACKAGE.rglob("*.py") if "generated" not in p.parts]
    assert len(sources) > 100  # the walk found the package
    offences = [
        line
        for path in sorted(sources)
        for line in _offences(path.relative_to(PACKAGE).as_posix(), path.read_text("utf-8"))
    ]
    assert offences == []


def test_the_check_sees_a_probe() -> None:
    probe = 'importlib.import_module("repokit.core.compose")\n__import__(name)\n'
    assert _offences("cli/x.py", probe) == [
        "cli/x.py:1 loads its own module 'repokit.core.compose' by name",
        "cli/x.py:2 loads a module whose name is computed at run time",
    ]
    assert _offences("build/x.py", 'importlib.import_module("tensorrt")') == []
