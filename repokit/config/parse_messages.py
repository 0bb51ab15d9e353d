"""Plain-words wording for protobuf text_format syntax errors.

text_format's messages echo the *source line* the tokenizer stands on, in quotes, before
the complaint: ``'input [ { name: "IN" } foo ]': Expected ","``. At the end of the file
that line is empty, so a list left open reads ``'': Expected ","``. ``plain_words`` rewrites
the common syntax errors: at the end of the file it names the bracket left open (found by
scanning the text, skipping strings and ``#`` comments) and where it opened; elsewhere it
names the token protobuf stopped at. Anything else keeps protobuf's wording unchanged.
The position (protobuf's) is not changed.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_CLOSERS = {"[": "]", "{": "}", "<": ">"}
_OPENERS = {v: k for k, v in _CLOSERS.items()}
_TOKEN = re.compile(r"""[A-Za-z0-9_.+-]+|"[^"\n]*"?|'[^'\n]*'?|\S""")
_FIELD_BEFORE = re.compile(r"([A-Za-z_][\w.]*)\s*$")
_EXPECTED_AT_END = {
    'Expected ",".': "',' or ']'",
    'Expected "}".': "'}'",
    'Expected ">".': "'>'",
    'Expected "{".': "'{'",
    'Expected ":".': "':'",
}
# complaints about a missing value: at the end of the file the "value" protobuf saw is empty
_VALUE_COMPLAINTS = (
    "Expected string but found",
    "Couldn't parse",
    "Enum type ",
    'Expected "true" or "false"',
    "Expected identifier",
)
_SNIPPET_MAX = 40


class _Open(NamedTuple):
    bracket: str
    line: int  # 1-based
    column: int  # 1-based
    snippet: str  # the source line up to and including the bracket

    def describe(self) -> str:
        kind = "list" if self.bracket == "[" else "message"
        return f"the {kind} opened at line {self.line}, column {self.column} ('{self.snippet}')"


def _snippet(line_text: str, column: int) -> str:
    text = line_text[:column].lstrip()
    if len(text) > _SNIPPET_MAX:
        text = "..." + text[-(_SNIPPET_MAX - 3) :]
    return text


def open_brackets(text: str, end: int | None = None) -> list[_Open]:
    """The brackets still open at offset ``end`` (the end of ``text`` when None), innermost
    last; brackets inside strings and ``#`` comments do not count."""
    stop = len(text) if end is None else min(end, len(text))
    stack: list[_Open] = []
    line, line_start, i = 1, 0, 0
    while i < stop:
        char = text[i]
        if char == "\n":
            line, line_start = line + 1, i + 1
        elif char == "#":
            newline = text.find("\n", i)
            i = stop if newline < 0 else newline
            continue
        elif char in "\"'":
            j = i + 1
            while j < len(text) and text[j] not in (char, "\n"):
                j += 2 if text[j] == "\\" else 1
            if j < len(text) and text[j] == "\n":
                j -= 1  # unterminated: the string ends with its line
            i = j + 1
            continue
        elif char in _CLOSERS:
            column = i - line_start + 1
            line_end = text.find("\n", line_start)
            line_text = text[line_start : len(text) if line_end < 0 else line_end]
            stack.append(_Open(char, line, column, _snippet(line_text, column)))
        elif char in _OPENERS and stack and stack[-1].bracket == _OPENERS[char]:
            stack.pop()
        i += 1
    return stack


def _offset(lines: list[str], line: int, column: int) -> int:
    return sum(len(text) + 1 for text in lines[: line - 1]) + column - 1


def _at_end(text: str, complaint: str) -> str:
    expected = _EXPECTED_AT_END.get(complaint)
    if expected is None:
        value = any(complaint.startswith(prefix) for prefix in _VALUE_COMPLAINTS)
        expected = "a value" if value else complaint
    stack = open_brackets(text)
    if not stack:
        return f"the file ends too early: expected {expected}"
    innermost = stack[-1]
    if complaint == 'Expected ",".' and innermost.bracket != "[":
        return f"the file ends too early: expected {expected}"
    message = f"the file ends before {innermost.describe()} is closed: expected {expected}"
    if len(stack) > 1:
        outer = ", ".join(f"'{o.bracket}' at {o.line}:{o.column}" for o in reversed(stack[:-1]))
        message += f" (still open around it: {outer})"
    return message


def _in_text(text: str, lines: list[str], complaint: str, line: int, column: int) -> str | None:
    line_text = lines[line - 1]
    match = _TOKEN.match(line_text, column - 1)
    if match is None:
        return None
    token = match.group(0)
    where = f"{line}:{column}"
    if complaint == 'Expected ",".':
        stack = open_brackets(text, _offset(lines, line, column))
        if not stack or stack[-1].bracket != "[":
            return None
        return f"unexpected {token!r} at {where} in {stack[-1].describe()}: expected ',' or ']'"
    if complaint.startswith("Expected identifier or number, got "):
        if token in _OPENERS:
            stack = open_brackets(text, _offset(lines, line, column))
            if not stack:
                opener = _OPENERS[token]
                return f"unexpected {token!r} at {where}: there is no open '{opener}' to close"
            innermost = stack[-1]
            return (
                f"unexpected {token!r} at {where}: {innermost.describe()} must be closed "
                f"with '{_CLOSERS[innermost.bracket]}' first"
            )
        return f"unexpected {token!r} at {where}: expected a field name"
    if complaint == 'Expected ":".':
        field = _FIELD_BEFORE.search(line_text[: column - 1])
        after = f" after the field name '{field.group(1)}'" if field else ""
        return (
            f"expected ':'{after} at {where}, found {token!r} "
            "(a scalar field is written name: value)"
        )
    if complaint == 'Expected "{".':
        return f"expected '{{' at {where} to open a message, found {token!r}"
    if complaint.startswith("String missing ending quote: "):
        quote = token[0] if token[:1] in "\"'" else '"'
        return (
            f"the string {token!r} starting at {where} is never closed: add the closing "
            f"{quote!r} (a string must end on the line it starts)"
        )
    return None


def plain_words(text: str, message: str, line: int, column: int) -> str | None:
    """``message`` (protobuf's, its "line:column : " prefix removed) in plain words, or None
    when it is not a syntax error this knows; ``line``/``column`` are protobuf's (1-based)."""
    if message in ('Expected "}".', 'Expected ">".'):
        # raised only at the end of the file (for the last token read, no line echo)
        return _at_end(text, message)
    # protobuf's other syntax errors echo the line the tokenizer stands on, quoted; that
    # line is empty only once the tokenizer has run past the last line
    if message.startswith("'': "):
        return _at_end(text, message[4:])
    lines = text.split("\n")  # as text_format.Parse splits it
    if not 1 <= line <= len(lines) or column < 1:
        return None
    echo = f"'{lines[line - 1]}': "
    if not message.startswith(echo):
        return None
    return _in_text(text, lines, message[len(echo) :], line, column)
