"""A stop request (what SIGINT and SIGTERM call) refuses new requests at once, as tritonserver's
models stop taking requests the moment its signal lands (L0_grpc_state_cleanup's
test_simple_infer_shutdownserver sends requests right after its SIGINT and expects them
refused); open HTTP connections are still served first, as before."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repokit.core.service import SCHEDULER_STOPPED
from repokit.errors import RepokitError
from repokit.frontends.runner import ServerHandle, run_server
from tests.frontends.http.server_thread import (
    ServerThread,
    copy_models,
    running_server,
    serve_settings,
)


def _add_sub(client: Any, module: Any) -> Any:
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [module.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0")


async def _request_stop(server: ServerThread) -> None:
    assert server.handle is not None
    server.handle.request_stop()  # nobody runs the shutdown sequence in these tests


def test_a_request_after_the_stop_request_is_refused_at_once(tmp_path: Path) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    with running_server(repo, allow_grpc=True, workers=1, wait_for_http_connections=True) as server:
        client = server.client("grpc")
        assert _add_sub(client, grpcclient)[0, 3] == 6.0
        server.call(_request_stop(server))
        with pytest.raises(InferenceServerException) as refused:
            _add_sub(client, grpcclient)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert SCHEDULER_STOPPED in str(refused.value)
        client.close()


def test_open_http_connections_keep_the_server_answering_after_the_stop_request(
    tmp_path: Path,
) -> None:
    repo = copy_models(tmp_path / "models", ("add_sub",))
    with running_server(repo, allow_grpc=True, workers=1, wait_for_http_connections=True) as server:
        http = server.client("http")  # its connection stays open between requests
        assert _add_sub(http, httpclient)[0, 3] == 6.0
        server.call(_request_stop(server))
        assert _add_sub(http, httpclient)[0, 5] == 10.0
        grpc = server.client("grpc")
        assert _add_sub(grpc, grpcclient)[0, 1] == 2.0
        http.close()
        grpc.close()


def test_a_signal_refuses_new_requests_before_the_loop_reads_it(tmp_path: Path) -> None:
    """The loop runs its signal handlers after the callbacks it already queued (requests that
    came in with the signal); the refusal itself comes at once, in the main thread."""
    repo = copy_models(tmp_path / "models", ("add_sub",))
    settings = serve_settings(repo, allow_grpc=True, workers=1, wait_for_http_connections=True)
    seen: list[str] = []

    async def ready(handle: ServerHandle) -> None:
        main = threading.main_thread().ident
        assert main is not None
        signal.pthread_kill(main, signal.SIGTERM)
        try:  # no await since the signal: the loop has not read it yet
            handle.service.server_ready()
            seen.append("still taking requests")
        except RepokitError as refused:
            seen.append(refused.message)

    assert asyncio.run(run_server(settings, ready)) is True
    assert seen == ["Server exiting"]
