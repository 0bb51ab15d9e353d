"""The parts of Sanic that are not its public API and that the HTTP frontend relies on.

:mod:`repokit.frontends.http.fast_protocol` subclasses Sanic's ``HttpProtocol`` and
:mod:`repokit.frontends.runner` starts the servers through Sanic's low-level server API; both
use attributes Sanic does not document (the inventory is in fast_protocol's docstring).
pyproject.toml pins Sanic to the release line these tests were written against. When Sanic is
upgraded, a failure here names the attribute that moved: re-read the named Sanic code, adapt
fast_protocol/runner, and update the inventory, this test and the pin together. Every test
of tests/frontends/http and tests/e2e must pass again before the new pin lands.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from importlib.metadata import requires, version

import pytest
from packaging.requirements import Requirement
from sanic import Sanic
from sanic.helpers import STATUS_CODES
from sanic.http import Http, Stage
from sanic.server.async_server import AsyncioServer
from sanic.server.protocols.base_protocol import SanicProtocol
from sanic.server.protocols.http_protocol import HttpProtocol

UPGRADE = (
    "Sanic changed what repokit's HTTP frontend relies on (see the docstring of "
    "repokit/frontends/http/fast_protocol.py): re-check fast_protocol.py and runner.py against "
    "the new Sanic before moving the pin in pyproject.toml"
)

# instance attributes of the protocol (slots of HttpProtocol or its bases) that the lane
# reads or writes: Sanic's timeout clock and connection task, the buffer Sanic's Http reads
# from, the timeout callback that close() cancels, and the connection's settings
PROTOCOL_SLOTS = (
    "_time",
    "_task",
    "_callback_check_timeouts",
    "recv_buffer",
    "transport",
    "connections",
    "conn_info",
    "loop",
    "app",
    "keep_alive_timeout",
    "request_timeout",
    "response_timeout",
    "request_max_size",
)
# methods of the protocol the lane calls or overrides
PROTOCOL_METHODS = (
    "connection_made",
    "data_received",
    "connection_lost",
    "pause_writing",
    "resume_writing",
    "check_timeouts",
    "close",
    "close_if_idle",
    "abort",
)
# the per-connection Http object's state the lane reads
HTTP_SLOTS = ("stage", "request_body")
# the low-level server handle the runner drives
SERVER_SLOTS = ("server", "connections")
SERVER_METHODS = ("startup", "before_start", "after_start", "before_stop", "after_stop")


def _slot_names(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return names


def test_installed_sanic_is_within_the_pin() -> None:
    """The pin in pyproject.toml names the release line this contract was checked against."""
    pins = {
        req.name.lower().replace("_", "-"): req
        for req in map(Requirement, requires("repokit") or [])
        if req.marker is None
    }
    for name in ("sanic", "sanic-routing"):
        assert name in pins, f"pyproject.toml must pin {name}: {UPGRADE}"
        specifier = pins[name].specifier
        assert any(s.operator == "<" for s in specifier), f"{name} needs an upper bound"
        installed = version(name)
        assert specifier.contains(installed), f"{name} {installed} is outside {specifier}"


@pytest.mark.parametrize("name", PROTOCOL_SLOTS)
def test_protocol_slot(name: str) -> None:
    assert name in _slot_names(HttpProtocol), f"HttpProtocol has no slot {name!r}: {UPGRADE}"


@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_protocol_method(name: str) -> None:
    method = inspect.getattr_static(HttpProtocol, name, None)
    assert inspect.isfunction(method), f"HttpProtocol.{name} is not a method: {UPGRADE}"


def test_protocol_connection_task_and_http() -> None:
    """The lane starts Sanic's connection task itself, and reads its Http object."""
    assert inspect.iscoroutinefunction(HttpProtocol.connection_task), UPGRADE
    assert isinstance(inspect.getattr_static(HttpProtocol, "http"), property), UPGRADE


def test_generic_connection_made_starts_no_task() -> None:
    """The lane sets a connection up with SanicProtocol.connection_made, which must leave the
    connection task and the receive buffer to the caller (HttpProtocol's own starts both)."""
    assert issubclass(HttpProtocol, SanicProtocol), UPGRADE
    generic = set(SanicProtocol.connection_made.__code__.co_names)  # names it uses
    assert not generic & {"connection_task", "recv_buffer", "_task"}, UPGRADE
    assert {"connections", "transport", "conn_info"} <= generic, UPGRADE
    http_setup = set(HttpProtocol.connection_made.__code__.co_names)
    assert {"connection_task", "recv_buffer", "_task"} <= http_setup, UPGRADE


@pytest.mark.parametrize("name", HTTP_SLOTS)
def test_http_slot(name: str) -> None:
    assert name in _slot_names(Http), f"Http has no slot {name!r}: {UPGRADE}"


def test_http_header_limit_and_stages() -> None:
    """The lane hands a head Sanic would refuse to Sanic, by Sanic's own limit."""
    assert isinstance(Http.HEADER_MAX_SIZE, int), UPGRADE
    assert "HEADER_MAX_SIZE" in Http.http1_request_header.__code__.co_names, UPGRADE
    for stage in ("IDLE", "REQUEST", "HANDLER"):
        assert isinstance(getattr(Stage, stage, None), Stage), f"Stage.{stage}: {UPGRADE}"


def test_status_codes_are_bytes() -> None:
    """The lane writes Sanic's reason phrases, so its status lines match Sanic's."""
    assert STATUS_CODES[200] == b"OK" and STATUS_CODES[408] == b"Request Timeout", UPGRADE


def test_server_handle() -> None:
    for name in SERVER_SLOTS:
        assert name in _slot_names(AsyncioServer), f"AsyncioServer.{name}: {UPGRADE}"
    for name in SERVER_METHODS:
        assert callable(getattr(AsyncioServer, name, None)), f"AsyncioServer.{name}: {UPGRADE}"
    parameters = inspect.signature(Sanic.create_server).parameters
    for name in ("sock", "return_asyncio_server", "access_log", "protocol"):
        assert name in parameters, f"Sanic.create_server({name}=...): {UPGRADE}"
    assert callable(Sanic.unregister_app), UPGRADE


def test_touchup_marks_http_once_done() -> None:
    """The runner lets only the first server of a process run TOUCHUP (a second run fails):
    it reads ``Http.__touched__``, absent until TouchUp rewrote Http, True after. Checked in
    a fresh interpreter so that this process's Sanic classes stay as the servers left them."""
    script = (
        "from sanic import Sanic\n"
        "from sanic.http import Http\n"
        "from sanic.touchup import TouchUp\n"
        "assert not getattr(Http, '__touched__', False)\n"
        "TouchUp.run(Sanic('contract'))\n"
        "assert Http.__touched__ is True\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{done.stderr}\n{UPGRADE}"
