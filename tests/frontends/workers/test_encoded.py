"""An encoded gRPC response crosses from the scheduling process to a worker unchanged: a large
one's parts (the outputs' own memory) travel as out-of-band buffers and arrive as parts."""

from __future__ import annotations

import pickle

import numpy as np

from repokit.frontends.workers import encoded
from repokit.protocol.grpc_raw import MessageParts, raw_output_parts


def _crossed(out: object) -> object:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(encoded.response_form(out), protocol=5, buffer_callback=buffers.append)
    return encoded.response_of(pickle.loads(data, buffers=[b.raw() for b in buffers]))


def test_large_grpc_response_crosses_as_parts() -> None:
    tensor = np.arange(50_000, dtype=np.float32)
    parts = raw_output_parts(b"\x0a\x01m", [tensor.view(np.uint8)])
    form = encoded.response_form(parts)
    assert np.shares_memory(np.frombuffer(form[-1].raw(), np.uint8), tensor)  # not copied
    crossed = _crossed(parts)
    assert isinstance(crossed, MessageParts)
    assert len(crossed) == len(parts)
    assert crossed.join() == parts.join()


def test_small_grpc_response_crosses_as_bytes() -> None:
    assert _crossed(b"\x0a\x01m") == b"\x0a\x01m"
