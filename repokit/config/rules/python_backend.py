"""Python-backend specifics Triton only discovers while loading: the execution environment
archive and the model.py source itself. model.py is parsed with ``ast`` (never imported or run)."""

from __future__ import annotations

import ast
import os

from repokit.config.rules.context import RuleContext
from repokit.repository.backends import PYTHON
from repokit.repository.versions import version_folder_name

MODEL_CLASS = "TritonPythonModel"
MODEL_DIR_VARIABLE = "$$TRITON_MODEL_DIRECTORY"


def check_execution_env(ctx: RuleContext) -> None:
    if ctx.config.backend != PYTHON or "EXECUTION_ENV_PATH" not in ctx.config.parameters:
        return
    path = ctx.config.parameters["EXECUTION_ENV_PATH"].string_value
    if path.startswith(MODEL_DIR_VARIABLE):
        path = str(ctx.model.path) + path[len(MODEL_DIR_VARIABLE):]
    if not os.path.exists(path):
        ctx.report("python-execution-env-missing",
                   f"EXECUTION_ENV_PATH '{path}' does not exist; Triton: \"Failed to get the "
                   f"canonical path for {path}.\"", path="parameters[EXECUTION_ENV_PATH]")


def _binds_model_class(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == MODEL_CLASS for t in targets):
                return True
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name) == MODEL_CLASS:
                    return True
        if isinstance(node, ast.If | ast.Try) and MODEL_CLASS in ast.unparse(node):
            return True  # a conditional definition: give it the benefit of the doubt
    return False


def check_python_sources(ctx: RuleContext) -> None:
    """model.py of every loaded version must compile and define TritonPythonModel."""
    if ctx.config.backend != PYTHON:
        return
    filename = ctx.config.default_model_filename or "model.py"
    if not filename.endswith(".py"):
        ctx.report("python-model-filename-invalid",
                   f"default_model_filename '{filename}' of a python-backend model must end with "
                   f"'.py'; Triton: \"Model name must end with '.py'. Model name is "
                   f"\"{filename}\".\"", path="default_model_filename")
        return
    for version in ctx.versions:
        path = ctx.model.path / version_folder_name(version) / filename
        try:
            source = path.read_bytes()
        except OSError:
            continue  # reported by model-file-missing
        rel = ctx.relative(path)
        try:
            tree = ast.parse(source, filename=rel)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", 0) or 0
            column = getattr(exc, "offset", 0) or 0
            ctx.report("python-model-syntax-error",
                       f"{rel} does not compile: {exc.__class__.__name__}: "
                       f"{getattr(exc, 'msg', exc)}; the python backend fails to load it",
                       file=rel, line=line, column=column)
            continue
        if not _binds_model_class(tree):
            ctx.report("python-model-class-missing",
                       f"{rel} defines no class '{MODEL_CLASS}'; Triton: \"AttributeError: "
                       f"module has no attribute '{MODEL_CLASS}'\"", file=rel)
