"""tritonserver parses its flags with getopt_long, which takes any unambiguous prefix of a long
option: the long option names of a typer command and a token normalizer expanding such prefixes.
Kept apart from :mod:`repokit.cli.serve_flags` so that registering ``repokit serve`` imports
nothing of the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_type_hints

from typer.models import OptionInfo


def long_option_names(command: Callable[..., Any]) -> frozenset[str]:
    """The long option names (without ``--``) of a typer command function."""
    names: set[str] = set()
    for name, hint in get_type_hints(command, include_extras=True).items():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, OptionInfo):
                # in Annotated, typer takes Option's first argument as a name, not a default
                first = [meta.default] if isinstance(meta.default, str) else []
                declared = [d for d in (*first, *(meta.param_decls or ())) if d.startswith("--")]
                names.update(d[2:] for d in declared)
                if not declared:
                    names.add(name.replace("_", "-"))
    return frozenset(names)


def getopt_abbreviations(names: frozenset[str]) -> Callable[[str], str]:
    """tritonserver parses its flags with getopt_long, which takes any unambiguous prefix of
    a long option (``--log-warn`` for ``--log-warning``): a token normalizer that expands
    such a prefix to its option's name and leaves every other token as it is."""

    def expand(token: str) -> str:
        if token in names:
            return token
        matches = [name for name in names if name.startswith(token)]
        return matches[0] if len(matches) == 1 else token

    return expand
