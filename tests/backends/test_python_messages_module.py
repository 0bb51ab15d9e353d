"""repokit.backends.python.messages is the one module both ends of an instance socket import:
at run time it needs only the standard library and the framing (``ipc``), and it names no
module of either side, even for type checking (the instance's ``pb_utils`` objects are read
through small Protocols), so neither side's code can reach the other's through it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PYTHON_BACKEND = Path(__file__).resolve().parents[2] / "repokit" / "backends" / "python"
# what messages.py may import when it runs
RUN_TIME = {"__future__", "typing", "repokit.backends.python.ipc"}
# modules of one side of the socket (server: backend, processes, ...; instance: stub, pb_*)
ONE_SIDE = {
    "backend",
    "processes",
    "instance_queue",
    "results",
    "channel",
    "server_link",
    "stub",
    "child_link",
    "pb_utils",
    "pb_bls",
    "pb_runtime",
    "pb_services",
    "prefetch",
    "wire_http",
    "wire_grpc",
}


def _imports(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(modules imported at run time, modules imported under ``if TYPE_CHECKING``)."""
    run_time: set[str] = set()
    typing_only: set[str] = set()

    def names(node: ast.stmt) -> set[str]:
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "repokit.backends.python":
                return {f"repokit.backends.python.{a.name}" for a in node.names}
            return {node.module}
        if isinstance(node, ast.Import):
            return {a.name for a in node.names}
        return set()

    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    typing_only |= names(inner)
        else:
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    run_time |= names(inner)
    return run_time, typing_only


def test_messages_imports_only_the_framing_at_run_time() -> None:
    tree = ast.parse((PYTHON_BACKEND / "messages.py").read_text("utf-8"))
    run_time, _ = _imports(tree)
    assert run_time <= RUN_TIME, sorted(run_time - RUN_TIME)


def test_messages_names_no_module_of_either_side() -> None:
    tree = ast.parse((PYTHON_BACKEND / "messages.py").read_text("utf-8"))
    run_time, typing_only = _imports(tree)
    sides = {f"repokit.backends.python.{name}" for name in ONE_SIDE}
    assert not (run_time | typing_only) & sides, sorted((run_time | typing_only) & sides)


@pytest.mark.parametrize(
    ("source", "run_time", "typing_only"),
    [
        ("from repokit.backends.python import ipc\n", {"repokit.backends.python.ipc"}, set()),
        (
            "if TYPE_CHECKING:\n    from repokit.backends.python.pb_utils import X\n",
            set(),
            {"repokit.backends.python.pb_utils"},
        ),
    ],
)
def test_the_check_sees_both_kinds_of_import(
    source: str, run_time: set[str], typing_only: set[str]
) -> None:
    assert _imports(ast.parse(source)) == (run_time, typing_only)
