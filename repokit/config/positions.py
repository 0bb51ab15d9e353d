"""Where each field of a config file is: field paths -> ``line:column`` (both 1-based).

Findings carry a field path (``input[0].dims[1]``, ``parameters[EXECUTION_ENV_PATH]``,
``ensemble_scheduling.step[2].input_map["IN"]``); :func:`locate_findings` gives every finding
whose field appears in its config file the position of that field, so text output shows
``file:line:column`` and SARIF a region.

The config has already been parsed by protobuf when this runs (positions are only looked up for
files that parse), so this walk only follows the structure: a small tokenizer for the text
format (and for the JSON form, whose shape is the same apart from maps), with the descriptor
deciding which fields repeat. Repeated fields count their elements across ``f {..} f {..}`` and
``f: [ {..}, {..} ]`` alike; map entries are addressed by key. A path that does not appear falls
back to its nearest enclosing field that does (``input[0].dims`` missing -> ``input[0]``), never
from one element of a repeated field or map to the field as a whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from repokit.config.diagnostics import Diagnostic
from repokit.config.report import RepositoryReport
from repokit.protocol.generated import model_config_pb2 as mc

_PUNCTUATION = set("{}[]<>:;,")
_QUOTED_KEY = re.compile(r'\["([^"]*)"\]')
_COMPONENT = re.compile(r"\.?([^.\[]+)|\[([^\]]*)\]")


@dataclass(frozen=True)
class _Token:
    text: str
    line: int
    column: int

    @property
    def is_string(self) -> bool:
        return self.text[:1] in ('"', "'")

    @property
    def value(self) -> str:
        """The token's text; a quoted string without its quotes (escapes kept)."""
        return self.text[1:-1] if self.is_string else self.text


def _tokens(text: str) -> Iterator[_Token]:
    line, start, i, n = 1, 0, 0, len(text)
    while i < n:
        char = text[i]
        if char == "\n":
            line, start, i = line + 1, i + 1, i + 1
        elif char.isspace():
            i += 1
        elif char == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif char in _PUNCTUATION:
            yield _Token(char, line, i - start + 1)
            i += 1
        elif char in "\"'":
            j = i + 1
            while j < n and text[j] != char and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            yield _Token(text[i : j + 1], line, i - start + 1)
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in _PUNCTUATION:
                if text[j] in "#\"'":
                    break
                j += 1
            yield _Token(text[i:j], line, i - start + 1)
            i = max(j, i + 1)


class _Stop(Exception):
    """Something the walk does not follow (extensions, Any): keep what was found so far."""


@dataclass
class FieldPositions:
    """Field path -> (line, column) for one config file."""

    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    containers: set[str] = field(default_factory=set)  # repeated message fields and maps

    def find(self, path: str) -> tuple[int, int] | None:
        """The position of ``path``, or of its nearest enclosing field that appears."""
        path = _QUOTED_KEY.sub(r"[\1]", path)
        while path:
            if path in self.positions:
                return self.positions[path]
            parts = [m.group(0) for m in _COMPONENT.finditer(path)]
            if not parts:
                return None
            parent = path[: len(path) - len(parts[-1])]
            if parts[-1].startswith("[") and parent in self.containers:
                return None  # one element of a list or map is not the list
            path = parent
        return None


class _Walker:
    def __init__(self, text: str, json_form: bool) -> None:
        self.tokens = list(_tokens(text))
        self.index = 0
        self.json = json_form
        self.found = FieldPositions()
        self.counts: dict[str, int] = {}

    def peek(self) -> _Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def next(self) -> _Token:
        token = self.peek()
        if token is None:
            raise _Stop
        self.index += 1
        return token

    def accept(self, text: str) -> bool:
        token = self.peek()
        if token is not None and token.text == text and not token.is_string:
            self.index += 1
            return True
        return False

    def mark(self, path: str, token: _Token) -> None:
        self.found.positions.setdefault(path, (token.line, token.column))

    def field_of(self, descriptor: Any, name: str) -> Any:
        found = descriptor.fields_by_name.get(name)
        if found is None and self.json:
            found = next((f for f in descriptor.fields if f.json_name == name), None)
        return found

    def skip_value(self) -> None:
        """Step over the value of a field the descriptor does not know."""
        opener = self.next()
        closers = {"{": "}", "<": ">", "[": "]"}
        if opener.is_string or opener.text not in closers:
            if opener.is_string:
                while (following := self.peek()) is not None and following.is_string:
                    self.index += 1
            return
        depth = 1
        while depth:
            token = self.next()
            if token.is_string:
                continue
            if token.text in closers:
                depth += 1
            elif token.text in closers.values():
                depth -= 1

    def message(self, descriptor: Any, prefix: str, end: str | None) -> None:
        while True:
            token = self.peek()
            if token is None:
                if end is None:
                    return
                raise _Stop
            if end is not None and self.accept(end):
                return
            if token.text in (",", ";") and not token.is_string:
                self.index += 1
                continue
            self.field(descriptor, prefix)

    def field(self, descriptor: Any, prefix: str) -> None:
        name = self.next()
        if name.text in _PUNCTUATION and not name.is_string:
            raise _Stop  # an extension or Any type URL
        proto_field = self.field_of(descriptor, name.value)
        if proto_field is None:  # unknown: where it is, then past its value
            self.mark(f"{prefix}{name.value}", name)
            self.accept(":")
            self.skip_value()
            return
        path = f"{prefix}{proto_field.name}"
        self.mark(path, name)
        self.accept(":")
        is_map = proto_field.message_type is not None and (
            proto_field.message_type.GetOptions().map_entry
        )
        repeated = proto_field.is_repeated
        if repeated and (is_map or proto_field.message_type is not None):
            self.found.containers.add(path)
        if is_map and self.json and self.accept("{"):
            self.json_map(proto_field, path)
        elif self.accept("["):
            while not self.accept("]"):
                if self.accept(","):
                    continue
                self.value(proto_field, path, repeated, is_map)
        else:
            self.value(proto_field, path, repeated, is_map)

    def value(self, proto_field: Any, path: str, repeated: bool, is_map: bool) -> None:
        start = self.peek()
        if start is None:
            raise _Stop
        if is_map:
            self.map_entry(proto_field, path, start)
            return
        element = path
        if repeated:
            index = self.counts.get(path, 0)
            self.counts[path] = index + 1
            element = f"{path}[{index}]"
        self.mark(element, start)
        if proto_field.message_type is not None and start.text in ("{", "<"):
            self.index += 1
            self.message(proto_field.message_type, f"{element}.", "}" if start.text == "{" else ">")
        else:
            self.scalar()

    def scalar(self) -> str:
        token = self.next()
        if token.text in _PUNCTUATION and not token.is_string:
            raise _Stop
        text = token.value
        while (following := self.peek()) is not None and token.is_string and following.is_string:
            text += self.next().value  # adjacent strings concatenate
        return text

    def map_entry(self, proto_field: Any, path: str, start: _Token) -> None:
        """``f { key: K value: V }``: positions under ``f[K]``."""
        opener = self.next()
        if opener.text not in ("{", "<"):
            raise _Stop
        closer = "}" if opener.text == "{" else ">"
        entry = proto_field.message_type
        value_field = entry.fields_by_name["value"]
        key, key_at = "", start
        pending: list[tuple[str, tuple[int, int]]] = []
        containers: set[str] = set()
        while not self.accept(closer):
            if self.accept(",") or self.accept(";"):
                continue
            name = self.next()
            self.accept(":")
            if name.value == "key":
                key_at = self.peek() or start
                key = self.scalar()
            elif name.value == "value":
                inner = _Walker("", self.json)
                inner.tokens, inner.index = self.tokens, self.index
                inner.value(value_field, "\x00", False, False)
                self.index = inner.index
                pending.extend(inner.found.positions.items())
                containers.update(inner.found.containers)
            else:
                raise _Stop
        element = f"{path}[{key}]"
        self.mark(element, key_at)
        for inner_path, position in pending:  # inner paths start with the placeholder
            self.found.positions.setdefault(element + inner_path[1:], position)
        self.found.containers.update(element + c[1:] for c in containers)

    def json_map(self, proto_field: Any, path: str) -> None:
        """JSON maps are objects: ``"f": {"K": V}``."""
        value_field = proto_field.message_type.fields_by_name["value"]
        while not self.accept("}"):
            if self.accept(","):
                continue
            key = self.next()
            self.accept(":")
            element = f"{path}[{key.value}]"
            self.mark(element, key)
            start = self.peek()
            if value_field.message_type is not None and start is not None and start.text == "{":
                self.index += 1
                self.message(value_field.message_type, f"{element}.", "}")
            else:
                self.scalar()


def field_positions(text: str, json_form: bool = False) -> FieldPositions:
    """The positions of the fields of a ModelConfig given as text format (or as JSON)."""
    walker = _Walker(text, json_form)
    try:
        if json_form:
            if walker.accept("{"):
                walker.message(mc.ModelConfig.DESCRIPTOR, "", "}")
        else:
            walker.message(mc.ModelConfig.DESCRIPTOR, "", None)
    except _Stop:
        pass
    return walker.found


def locate(diagnostics: list[Diagnostic], file: str, positions: FieldPositions) -> None:
    """Give each finding about ``file`` that has a field path but no line its position."""
    for index, diagnostic in enumerate(diagnostics):
        if diagnostic.file != file or not diagnostic.path or diagnostic.line:
            continue
        found = positions.find(diagnostic.path)
        if found is not None:
            diagnostics[index] = replace(diagnostic, line=found[0], column=found[1])


def locate_findings(report: RepositoryReport) -> None:
    """Positions for the findings of every model whose config file is a text-format file."""
    for model in report.models.values():
        path = model.config_file
        if path is None or not any(d.path and not d.line for d in model.diagnostics):
            continue
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        file = _relative(path, report.root)
        locate(model.diagnostics, file, field_positions(text, json_form=path.suffix == ".json"))


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
