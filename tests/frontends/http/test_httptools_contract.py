"""What repokit.frontends.http.protocol relies on in httptools, and the pin in pyproject.toml.

The protocol uses only httptools' public API: ``HttpRequestParser`` with its callbacks,
``get_method``/``get_http_version``, ``parse_url`` and the exception classes. These tests
state the behaviour it needs (callback order, pieces, chunked decoding, what llhttp refuses,
how a callback's exception comes back). When httptools is upgraded, run them, then move the pin.
"""

from __future__ import annotations

import re
from pathlib import Path

import httptools
import pytest
import tomllib

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []

    def on_message_begin(self) -> None:
        self.events.append(("begin", b""))

    def on_url(self, url: bytes) -> None:
        self.events.append(("url", url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.events.append(("header", name + b"=" + value))

    def on_headers_complete(self) -> None:
        self.events.append(("headers_complete", b""))

    def on_body(self, body: bytes) -> None:
        self.events.append(("body", body))

    def on_message_complete(self) -> None:
        self.events.append(("complete", b""))


def _parse(*pieces: bytes) -> tuple[Recorder, httptools.HttpRequestParser]:
    recorder = Recorder()
    parser = httptools.HttpRequestParser(recorder)
    for piece in pieces:
        parser.feed_data(piece)
    return recorder, parser


def test_the_installed_version_is_inside_the_pin() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (spec,) = [d for d in dependencies if d.startswith("httptools")]
    low, high = re.fullmatch(r"httptools>=([\d.]+),<([\d.]+)", spec).groups()  # type: ignore[union-attr]

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split(".")[:2])

    assert version(low) <= version(httptools.__version__) < version(high)


def test_callbacks_in_order_for_pipelined_requests() -> None:
    recorder, parser = _parse(
        b"POST /a?x=1 HTTP/1.1\r\nContent-Length: 3\r\nX: y\r\n\r\nabcGET /b HTTP/1.0\r\n\r\n"
    )
    assert recorder.events == [
        ("begin", b""),
        ("url", b"/a?x=1"),
        ("header", b"Content-Length=3"),
        ("header", b"X=y"),
        ("headers_complete", b""),
        ("body", b"abc"),
        ("complete", b""),
        ("begin", b""),
        ("url", b"/b"),
        ("headers_complete", b""),
        ("complete", b""),
    ]
    assert parser.get_method() == b"GET"
    assert parser.get_http_version() == "1.0"


def test_a_header_is_reported_once_whole_and_the_url_in_pieces() -> None:
    recorder, _ = _parse(b"GET /lo", b"ng HTTP/1.1\r\nNa", b"me: va", b"lue\r\n\r\n")
    urls = [value for kind, value in recorder.events if kind == "url"]
    assert b"".join(urls) == b"/long"
    assert ("header", b"Name=value") in recorder.events
    partial, _ = _parse(b"GET / HTTP/1.1\r\nName: " + b"v" * 5000)
    assert [kind for kind, _ in partial.events] == ["begin", "url"]  # nothing of the header yet


def test_message_begin_comes_with_the_first_byte() -> None:
    recorder, _ = _parse(b"G")
    assert recorder.events == [("begin", b"")]


def test_chunked_bodies_are_decoded() -> None:
    recorder, _ = _parse(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    body = b"".join(value for kind, value in recorder.events if kind == "body")
    assert body == b"abcde"
    assert recorder.events[-1] == ("complete", b"")


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_malformed_requests_raise_parser_errors(data: bytes) -> None:
    with pytest.raises(httptools.HttpParserError):
        _parse(data)


def test_chunks_frame_a_body_that_has_a_length_too_when_lenient() -> None:
    recorder = Recorder()
    parser = httptools.HttpRequestParser(recorder)
    parser.set_dangerous_leniencies(lenient_chunked_length=True)
    parser.feed_data(
        b"POST / HTTP/1.1\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\n\r\n"
    )
    assert [value for kind, value in recorder.events if kind == "body"] == [b"abc"]
    assert recorder.events[-1] == ("complete", b"")


def test_the_parser_says_what_was_malformed() -> None:
    with pytest.raises(httptools.HttpParserError, match=r"^Invalid header token$"):
        _parse(b"GET / HTTP/1.1\r\nno colon\r\n\r\n")


def test_an_unknown_method_has_its_own_error() -> None:
    with pytest.raises(httptools.HttpParserInvalidMethodError):
        _parse(b"FROB / HTTP/1.1\r\n\r\n")


def test_an_upgrade_stops_the_parser_after_the_request() -> None:
    recorder = Recorder()
    parser = httptools.HttpRequestParser(recorder)
    with pytest.raises(httptools.HttpParserUpgrade):
        parser.feed_data(b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nrest")
    assert ("complete", b"") in recorder.events


def test_an_exception_of_a_callback_comes_back_as_the_context() -> None:
    class Failing(Recorder):
        def on_header(self, name: bytes, value: bytes) -> None:
            raise LookupError("mine")

    parser = httptools.HttpRequestParser(Failing())
    with pytest.raises(httptools.HttpParserCallbackError) as caught:
        parser.feed_data(b"GET / HTTP/1.1\r\nA: b\r\n\r\n")
    assert isinstance(caught.value.__context__, LookupError)


def test_parse_url() -> None:
    url = httptools.parse_url(b"/v2/models/m%20x/infer?format=json")
    assert (url.path, url.query) == (b"/v2/models/m%20x/infer", b"format=json")  # raw path
    assert httptools.parse_url(b"/v2").query is None
    with pytest.raises(httptools.HttpParserInvalidURLError):
        httptools.parse_url(b"http://[bad")
