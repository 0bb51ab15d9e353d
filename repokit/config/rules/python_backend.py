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
        path = str(ctx.model.path) + path[len(MODEL_DIR_VARIABLE) :]
    if not os.path.exists(path):
        ctx.report(
            "python-execution-env-missing",
            f"EXECUTION_ENV_PATH '{path}' does not exist; Triton: \"Failed to get the "
            f'canonical path for {path}."',
            path="parameters[EXECUTION_ENV_PATH]",
        )


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


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS:
            return node
    return None


def _returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
    """The return statements of ``function`` itself (not of nested functions or classes)."""
    found: list[ast.Return] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif not isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda
        ):
            stack.extend(ast.iter_child_nodes(node))
    return found


def _check_warmup_execute(ctx: RuleContext, rel: str, tree: ast.Module) -> None:
    """Warmup calls execute() at load time: a decoupled model's execute must return None, a
    non-decoupled one's must return the responses (the python backend fails otherwise)."""
    if not any(sample.batch_size for sample in ctx.config.model_warmup):
        return
    model_class = _model_class(tree)
    if model_class is None:
        return
    execute = next(
        (
            n
            for n in model_class.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "execute"
        ),
        None,
    )
    if execute is None:
        return  # possibly inherited: nothing to say
    returns = _returns(execute)
    with_value = [
        r
        for r in returns
        if r.value is not None and not (isinstance(r.value, ast.Constant) and r.value.value is None)
    ]
    decoupled = ctx.config.model_transaction_policy.decoupled
    if decoupled and with_value:
        ctx.report(
            "warmup-execute-return",
            f"{rel}: the model is decoupled and has warmup samples, but execute() returns "
            'a value; Triton: "is using the decoupled mode and the execute function must '
            'return None" fails the warmup, so the load fails',
            file=rel,
            line=with_value[0].lineno,
        )
    elif not decoupled and not with_value:
        ctx.report(
            "warmup-execute-return",
            f"{rel}: the model has warmup samples but execute() returns no list of "
            "responses; the warmup request fails, so the load fails",
            file=rel,
            line=execute.lineno,
        )


def check_python_sources(ctx: RuleContext) -> None:
    """model.py of every loaded version must compile and define TritonPythonModel."""
    if ctx.config.backend != PYTHON:
        return
    filename = ctx.config.default_model_filename or "model.py"
    if not filename.endswith(".py"):
        ctx.report(
            "python-model-filename-invalid",
            f"default_model_filename '{filename}' of a python-backend model must end with "
            f"'.py'; Triton: \"Model name must end with '.py'. Model name is "
            f'"{filename}"."',
            path="default_model_filename",
        )
        return
    if not ctx.options.read_sources:
        return
    for version in ctx.versions:
        path = ctx.model.path / version_folder_name(version) / filename
        try:
            source = path.read_bytes()
        except OSError:
            continue  # reported by model-file-missing
        rel = ctx.relative(path)
        try:
            tree = ast.parse(source, filename=filename)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", 0) or 0
            column = getattr(exc, "offset", 0) or 0
            ctx.report(
                "python-model-syntax-error",
                f"{rel} does not compile: {exc.__class__.__name__}: "
                f"{getattr(exc, 'msg', exc)}; the python backend fails to load it",
                file=rel,
                line=line,
                column=column,
                triton=f"{exc.__class__.__name__}: {exc}",  # str() names the file's base name
            )
            continue
        if not _binds_model_class(tree):
            ctx.report(
                "python-model-class-missing",
                f"{rel} defines no class '{MODEL_CLASS}'; Triton: \"AttributeError: "
                f"module has no attribute '{MODEL_CLASS}'\"",
                file=rel,
                # the stub imports the file as module '<version>.<file name without .py>'
                triton=f"AttributeError: module '{version_folder_name(version)}."
                f"{filename.removesuffix('.py')}' has no attribute '{MODEL_CLASS}'",
            )
            continue
        _check_warmup_execute(ctx, rel, tree)
