"""Response senders of non-decoupled python models, decoupled BLS streams, async execute
concurrency and ``triton_grpc_error`` streams against real Triton 2.51: the same models
(``python_sender_models``) served by both, the same gRPC streams sent to both, the answers
compared (the scenarios are described in tests/e2e/test_python_senders.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.differential.triton_reference import running_triton
from tests.e2e.python_sender_models import MODELS, MODES, build_sender_repository
from tests.e2e.test_python_senders import (
    FINAL_ONLY_ERROR,
    _mode_input,
    _n_input,
    grpc_error_stream,
    refused_then_answered,
    stream_answers,
)
from tests.frontends.http.server_thread import Endpoints, running_server

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sender_repository(tmp_path_factory.mktemp("senders_diff") / "models")


@pytest.fixture(scope="module")
def triton(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    workdir = tmp_path_factory.mktemp("triton_senders")
    with running_triton(repository, workdir, ready=tuple(MODELS)) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def repokit(repository: Path) -> Iterator[Endpoints]:
    with running_server(repository, allow_grpc=True) as srv:
        yield srv.endpoints


@pytest.mark.parametrize("model", ["sender", "sender_async"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_sender_answers_match(triton: Endpoints, repokit: Endpoints, model: str, mode: str) -> None:
    inputs = [_mode_input(MODES[mode][0])]
    theirs = stream_answers(triton.grpc, model, inputs, 1)
    ours = stream_answers(repokit.grpc, model, inputs, 1)
    if mode == "final_only":  # the same error; the frames of the model differ in paths only
        for answers in (theirs, ours):
            ((kind, (status, message)),) = answers
            assert (kind, status) == ("error", "None")
            assert FINAL_ONLY_ERROR in message
        return
    assert ours == theirs


@pytest.mark.parametrize("model", ["sender", "sender_async"])
def test_mixed_batch_matches(triton: Endpoints, repokit: Endpoints, model: str) -> None:
    inputs = [_mode_input(m) for m in (0, 1, 2)]
    theirs = stream_answers(triton.grpc, model, inputs, 3)
    assert stream_answers(repokit.grpc, model, inputs, 3) == theirs


def test_bls_stream_counts_match(triton: Endpoints, repokit: Endpoints) -> None:
    for n in (0, 1, 3):
        counts = []
        for url in (triton.grpc, repokit.grpc):
            with grpcclient.InferenceServerClient(url) as client:
                result = client.infer("bls_counts", _n_input(n))
                counts.append(np.asarray(result.as_numpy("COUNTS")).tolist())
        assert counts[0] == counts[1] == [n + 1, n or 1]


def test_async_execute_concurrency_matches(triton: Endpoints, repokit: Endpoints) -> None:
    for url in (triton.grpc, repokit.grpc):
        answers = stream_answers(url, "async_peak", [_n_input(1) for _ in range(3)], 3)
        assert max(values[0][0] for _, (_, values) in answers) == 3


@pytest.mark.parametrize("headers", [{"triton_grpc_error": "true"}, None])
def test_grpc_error_streams_match(
    triton: Endpoints, repokit: Endpoints, headers: dict[str, str] | None
) -> None:
    theirs = grpc_error_stream(triton.grpc, headers)
    assert grpc_error_stream(repokit.grpc, headers) == theirs


def test_refused_requests_with_grpc_error_match(triton: Endpoints, repokit: Endpoints) -> None:
    assert refused_then_answered(repokit.grpc) == refused_then_answered(triton.grpc)
