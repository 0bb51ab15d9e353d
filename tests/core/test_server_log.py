"""The server log's lines as tritonserver 2.51 writes them, and the settings that switch them."""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Iterator

import pytest

from repokit.core import server_log
from repokit.core.log_settings import LogSettingsStore
from repokit.core.settings import LogSettings

DEFAULT_LINE = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} (\d+) ([\w.]+):(\d+)\] (.*)$")
ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [IWE] (\d+) ([\w.]+):(\d+)\] (.*)$")


@pytest.fixture
def logged() -> Iterator[tuple[LogSettings, io.StringIO]]:
    settings = LogSettings()
    stream = io.StringIO()
    handler = server_log.install(settings, stream)
    try:
        yield settings, stream
    finally:
        server_log.uninstall(handler)


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_default_format_letter_pid_file_line_and_quoted_message(
    logged: tuple[LogSettings, io.StringIO],
) -> None:
    _, stream = logged
    log = logging.getLogger("repokit.test")
    log.info('loading: "m":1')
    log.warning("two\nlines")
    log.error("bad")
    lines = _lines(stream)
    assert [line[0] for line in lines] == ["I", "W", "E"]
    match = DEFAULT_LINE.match(lines[0])
    assert match is not None, lines[0]
    assert match.group(1) == str(os.getpid())
    assert match.group(2) == "test_server_log.py"
    assert match.group(4) == r'"loading: \"m\":1"'  # quoted and escaped as Triton 2.51
    assert lines[1].endswith(r'] "two\nlines"')


def test_iso8601_format(logged: tuple[LogSettings, io.StringIO]) -> None:
    settings, stream = logged
    LogSettingsStore(settings).update({"log_format": "ISO8601"})
    logging.getLogger("repokit.test").warning("w")
    match = ISO_LINE.match(_lines(stream)[0])
    assert match is not None, stream.getvalue()
    assert " W " in _lines(stream)[0]


def test_model_records_name_the_models_file_and_line(
    logged: tuple[LogSettings, io.StringIO],
) -> None:
    _, stream = logged
    extra = {"triton_file": "model.py", "triton_line": 12}
    logging.getLogger("repokit.model").info("%s", "from the model", extra=extra)
    assert ' model.py:12] "from the model"' in stream.getvalue()


def test_tables_are_written_unquoted_after_a_line_break(
    logged: tuple[LogSettings, io.StringIO],
) -> None:
    _, stream = logged
    text = server_log.table(("Model", "Version"), [("add_sub", 1)])
    logging.getLogger("repokit.test").info(text, extra={server_log.RAW: True})
    out = stream.getvalue()
    assert out.split("] ", 1)[1] == "\n" + text + "\n\n"
    assert text.splitlines() == [
        "+---------+---------+",
        "| Model   | Version |",
        "+---------+---------+",
        "| add_sub | 1       |",
        "+---------+---------+",
    ]


def test_levels_follow_the_settings_at_run_time(logged: tuple[LogSettings, io.StringIO]) -> None:
    settings, stream = logged
    store = LogSettingsStore(settings)
    log = logging.getLogger("repokit.test")
    log.debug("verbose one")  # off: --log-verbose 0
    log.info("info on")
    store.update({"log_info": False, "log_verbose_level": 2})
    log.info("info off")
    log.debug("verbose one on")  # verbose lines print as I, as Triton's
    log.log(server_log.VERBOSE_DETAIL, "verbose two on")
    store.update({"log_verbose_level": 1, "log_warning": False, "log_error": False})
    log.log(server_log.VERBOSE_DETAIL, "verbose two off")
    log.warning("warning off")
    log.error("error off")
    text = stream.getvalue()
    assert 'verbose one"' not in text and "info off" not in text
    assert "info on" in text and "verbose one on" in text and "verbose two on" in text
    assert "off" not in text.replace("info off", "")
    assert all(line[0] == "I" for line in _lines(stream))


def test_log_file(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "server.log"
    settings = LogSettings(log_file=str(path))
    handler = server_log.install(settings)
    try:
        logging.getLogger("repokit.test").info("to the file")
    finally:
        server_log.uninstall(handler)
    assert '"to the file"' in path.read_text()


async def test_verbose_lines_of_a_request_and_of_a_batch(
    logged: tuple[LogSettings, io.StringIO],
) -> None:
    from repokit.scheduler.runtime import execute_batch
    from tests.scheduler.helpers import RecordingBackend, request

    settings, stream = logged
    store = LogSettingsStore(settings)
    backend = RecordingBackend()
    await execute_batch(backend, 0, [request(INPUT0=[1.0]), request(INPUT0=[2.0])])
    assert "executing" not in stream.getvalue()  # off at --log-verbose 0
    store.update({"log_verbose_level": 1})
    await execute_batch(backend, 0, [request(INPUT0=[1.0]), request(INPUT0=[2.0])])
    assert '"model m, instance 0, executing 2 requests"' in stream.getvalue()
