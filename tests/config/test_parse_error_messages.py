"""config-parse-error in plain words: where the file ends inside an open bracket, which token
protobuf stopped at; Triton's prefix ("failed to read text proto from <path>: ") and
protobuf's position are kept, and unrecognised messages keep protobuf's wording."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from repokit.config.parse_messages import open_brackets
from repokit.protocol.generated import model_config_pb2 as mc
from tests.config.validate_helpers import make_model, validate_one

PREFIX = "failed to read text proto from m/config.pbtxt: "


@pytest.mark.parametrize(
    ("config", "position", "message"),
    [
        pytest.param(
            # sample_repos/invalid/config-parse-error; protobuf: '': Expected ",".
            '# breaks: config-parse-error\nbackend: "python"\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }\n\n',
            (5, 1),
            "the file ends before the list opened at line 3, column 7 ('input [') is closed: "
            "expected ',' or ']'",
            id="list-open-at-end",
        ),
        pytest.param(
            # protobuf: Expected "}". (for the last token read)
            'backend: "python"\ndynamic_batching {\n  max_queue_delay_microseconds: 100\n',
            (3, 33),
            "the file ends before the message opened at line 2, column 18 "
            "('dynamic_batching {') is closed: expected '}'",
            id="message-open-at-end",
        ),
        pytest.param(
            'backend: "python"\ninput [ { name: "IN" ',
            (2, 17),
            "the file ends before the message opened at line 2, column 9 ('input [ {') is "
            "closed: expected '}' (still open around it: '[' at 2:7)",
            id="message-in-list-open-at-end",
        ),
        pytest.param(
            'backend: "python"\ndynamic_batching < max_queue_delay_microseconds: 100\n',
            (2, 50),
            "the file ends before the message opened at line 2, column 18 "
            "('dynamic_batching <') is closed: expected '>'",
            id="angle-message-open-at-end",
        ),
        pytest.param(
            # brackets inside comments and strings do not count
            '# [ {\nbackend: "python"\ninput [ { name: "a[{" } # ]\n',
            (4, 1),
            "the file ends before the list opened at line 3, column 7 ('input [') is closed: "
            "expected ',' or ']'",
            id="brackets-in-comments-and-strings",
        ),
        pytest.param(
            'backend: "python"\nmax_batch_size:',
            (2, 16),
            "the file ends too early: expected a value",
            id="value-missing-at-end",
        ),
        pytest.param(
            # protobuf: '}': Expected identifier or number, got }.
            'backend: "python"\n}\n',
            (2, 1),
            "unexpected '}' at 2:1: there is no open '{' to close",
            id="stray-closing-brace",
        ),
        pytest.param(
            'backend: "python"\ninput [ { name: "IN" ] }\n',
            (2, 22),
            "unexpected ']' at 2:22: the message opened at line 2, column 9 ('input [ {') "
            "must be closed with '}' first",
            id="closing-the-wrong-bracket",
        ),
        pytest.param(
            # protobuf: 'input [ { name: "IN" } { name: "X" } ]': Expected ",".
            'backend: "python"\ninput [ { name: "IN" } { name: "X" } ]\n',
            (2, 24),
            "unexpected '{' at 2:24 in the list opened at line 2, column 7 ('input ['): "
            "expected ',' or ']'",
            id="comma-missing-between-list-elements",
        ),
        pytest.param(
            'backend: "python"\ninput [ { name: "IN" } foo ]\n',
            (2, 24),
            "unexpected 'foo' at 2:24 in the list opened at line 2, column 7 ('input ['): "
            "expected ',' or ']'",
            id="stray-word-in-list",
        ),
        pytest.param(
            # protobuf: 'backend "python"': Expected ":".
            'backend "python"\n',
            (1, 9),
            "expected ':' after the field name 'backend' at 1:9, found '\"python\"' "
            "(a scalar field is written name: value)",
            id="colon-missing-before-scalar",
        ),
        pytest.param(
            'backend: "python"\ndynamic_batching: 3\n',
            (2, 19),
            "expected '{' at 2:19 to open a message, found '3'",
            id="scalar-for-message",
        ),
        pytest.param(
            # protobuf: 'backend: "python': String missing ending quote: '"python'
            'backend: "python\nmax_batch_size: 0\n',
            (1, 10),
            "the string '\"python' starting at 1:10 is never closed: add the closing '\"' "
            "(a string must end on the line it starts)",
            id="unterminated-string",
        ),
    ],
)
def test_syntax_errors_in_plain_words(
    tmp_path: Path, config: str, position: tuple[int, int], message: str
) -> None:
    make_model(tmp_path, config=config)
    [diagnostic] = validate_one(tmp_path).diagnostics
    assert diagnostic.rule == "config-parse-error"
    assert diagnostic.file == "m/config.pbtxt"
    assert diagnostic.message == PREFIX + message
    assert (diagnostic.line, diagnostic.column) == position
    try:  # the position is protobuf's own
        text_format.Parse(config, mc.ModelConfig())
    except text_format.ParseError as exc:
        assert (exc.GetLine(), exc.GetColumn()) == position
    else:
        raise AssertionError("protobuf parsed it")


@pytest.mark.parametrize(
    ("config", "position", "message"),
    [
        pytest.param(
            'backend: "python"\nbogus: 3\n',
            (2, 1),
            'Message type "inference.ModelConfig" has no field named "bogus".',
            id="unknown-field",
        ),
        pytest.param(
            'backend: "python"\nmax_batch_szie: 3\n',
            (2, 1),
            'Message type "inference.ModelConfig" has no field named "max_batch_szie". '
            '(did you mean "max_batch_size"?)',
            id="unknown-field-suggestion",
        ),
        pytest.param(
            'backend: "python"\ninput [ { data_type: TYPE_FP3 } ]\n',
            (2, 22),
            "'input [ { data_type: TYPE_FP3 } ]': Enum type \"inference.DataType\" has no value "
            "named TYPE_FP3. (did you mean 'TYPE_FP32'?)",
            id="enum-value-suggestion",
        ),
        pytest.param(
            "backend: 8\n",
            (1, 10),
            "'backend: 8': Expected string but found: '8'",
            id="wrong-value-type",
        ),
    ],
)
def test_other_errors_keep_protobufs_wording(
    tmp_path: Path, config: str, position: tuple[int, int], message: str
) -> None:
    make_model(tmp_path, config=config)
    [diagnostic] = validate_one(tmp_path).diagnostics
    assert diagnostic.message == PREFIX + message
    assert (diagnostic.line, diagnostic.column) == position


def test_open_brackets_skip_strings_comments_and_escapes() -> None:
    text = 'a [ { s: "x\\" ] }" t: \'}\' # ] }\n'
    assert [(o.bracket, o.line, o.column, o.snippet) for o in open_brackets(text)] == [
        ("[", 1, 3, "a ["),
        ("{", 1, 5, "a [ {"),
    ]
    assert open_brackets("a [ ]") == []
    assert [o.bracket for o in open_brackets("a [ { } ]", end=7)] == ["["]
    long = "x" * 60 + " ["
    [opened] = open_brackets(long)
    assert opened.snippet.startswith("...") and opened.snippet.endswith(" [")
    assert len(opened.snippet) == 40
