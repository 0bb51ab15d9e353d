"""A real repokit server (port 0 everywhere) running on its own event loop in a thread, so
blocking clients such as tritonclient can call it from the test thread; the one place tests
start an in-process repokit server, copy sample models and make tritonclient clients."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repokit.core.settings import ServerSettings
from repokit.frontends.runner import ServerHandle, ServeSettings, start_server
from repokit.paths import default_sample_repository
from tests.serve_workers import serve_workers

PYTHON_MODELS = ("add_sub", "identity")


def copy_models(dest: Path, names: tuple[str, ...] = PYTHON_MODELS) -> Path:
    """A repository with copies of the named sample models."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copytree(default_sample_repository() / name, dest / name)
    return dest


@dataclass(frozen=True)
class Endpoints:
    """Where a server answers: ``http`` and ``metrics`` as base URLs, ``grpc`` as host:port."""

    http: str
    grpc: str
    metrics: str


class ServerThread:
    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.handle: ServerHandle | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> ServerHandle:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(start_server(self.settings), self.loop)
        self.handle = future.result(timeout=120)
        return self.handle

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=timeout)

    def stop(self) -> None:
        if self.handle is not None:
            self.call(self.handle.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()

    @property
    def http_url(self) -> str:
        assert self.handle is not None and self.handle.http_port is not None
        return f"127.0.0.1:{self.handle.http_port}"

    @property
    def grpc_url(self) -> str:
        assert self.handle is not None and self.handle.grpc_port is not None
        return f"127.0.0.1:{self.handle.grpc_port}"

    @property
    def endpoints(self) -> Endpoints:
        assert self.handle is not None
        metrics = f"http://127.0.0.1:{self.handle.metrics_port}"
        return Endpoints(f"http://{self.http_url}", self.grpc_url, metrics)

    def client(self, protocol: str) -> Any:
        """A tritonclient ``InferenceServerClient`` for "http" or "grpc"."""
        if protocol == "http":
            return httpclient.InferenceServerClient(self.http_url)
        return grpcclient.InferenceServerClient(self.grpc_url)


def serve_settings(repository: Path, **overrides: Any) -> ServeSettings:
    """Settings serving ``repository`` on 127.0.0.1, every port chosen by the OS, gRPC off unless
    ``allow_grpc=True``, with the suite's ``--serve-workers``; ``overrides`` are ServerSettings
    or ServeSettings fields."""
    core_fields = {
        k: overrides.pop(k) for k in list(overrides) if k in ServerSettings.__dataclass_fields__
    }
    return ServeSettings(
        core=ServerSettings(repositories=[repository], **core_fields),
        **{
            "http_port": 0,
            "metrics_port": 0,
            "grpc_port": 0,
            "http_address": "127.0.0.1",
            "grpc_address": "127.0.0.1",
            "allow_grpc": False,
            "workers": serve_workers(),
            # tests stop servers with their clients still connected; the wait itself is
            # tested on `repokit serve` (tests/cli/test_serve_shutdown.py)
            "wait_for_http_connections": False,
            **overrides,
        },
    )


@contextmanager
def running_server(repository: Path, **overrides: Any) -> Iterator[ServerThread]:
    """A started ServerThread on ``serve_settings(repository, **overrides)``, stopped on exit."""
    server = ServerThread(serve_settings(repository, **overrides))
    server.start()
    try:
        yield server
    finally:
        server.stop()
