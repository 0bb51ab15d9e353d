"""Result conversion on the server side: what an instance process answered becomes the
``BackendResult`` of each request.

- packed results (:data:`~repokit.backends.python.messages.PackedResult`): execute replies,
  decoupled responses and answers sent through response senders all come through
  :meth:`ResultUnpacker.unpack`; :func:`answers_later` waits for the answers a model sends
  after its ``execute`` returned;
- requests released for rescheduling (:func:`rescheduled`, below);
- requests whose instance died (:func:`dead`) or is no longer restarted (:func:`gone`);
- a wire request the instance failed (:func:`wire_failure`).

Rescheduling
------------
A model may release a request with ``set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``
in ``execute`` (Triton's iterative sequences). The instance process lists such requests in the
batch's reply; the backend hands each one to :attr:`Backend.on_reschedule` (the iterative
sequence batcher's ``reschedule``) before ``execute`` returns, so the request runs again in a
later batch instead of being answered (a decoupled model's responses so far already went to
the client; the next execution gets a new request key). When the model's scheduler cannot
reschedule (no ``sequence_batching { iterative_sequence: true }``), the request gets UNSUPPORTED
:data:`NOT_ITERATIVE` and the server log says ``Failed to release request: ...``. Triton 2.51
only logs that line and never answers the request (the client waits until its deadline);
answering it with the error is deliberate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from repokit.backends.base import WIRE_FALLBACK, BackendRequest, BackendResult
from repokit.backends.python import ipc
from repokit.backends.python.messages import (
    BODY,
    ERROR,
    FALLBACK,
    RESCHEDULED,
    SENT_LATER,
    PackedResult,
    RequestBatch,
)
from repokit.backends.python.restarts import not_healthy
from repokit.errors import Code, RepokitError
from repokit.protocol import datatypes
from repokit.protocol.types import InferTensor, ParamValue

if TYPE_CHECKING:
    from repokit.backends.python.processes import Instance
    from repokit.backends.server_api import RequestControl, ServerApi

NOT_ITERATIVE = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


class ResultUnpacker:
    """Unpacks the results of one model's instances (caching the numpy dtype and the protocol
    datatype of each dtype string a tensor travels with)."""

    def __init__(self) -> None:
        self._dtypes: dict[str, np.dtype[Any]] = {}
        self._datatypes: dict[np.dtype[Any], str] = {}
        # dtype string -> (numpy dtype, protocol datatype), for numeric outputs
        self._kinds: dict[str, tuple[np.dtype[Any], str]] = {}

    def datatype(self, dtype: np.dtype[Any]) -> str:
        """The protocol datatype of an output's numpy dtype (BYTES for the others)."""
        name = self._datatypes.get(dtype)
        if name is None:
            found = datatypes.from_numpy(dtype)
            name = self._datatypes[dtype] = found.protocol if found is not None else "BYTES"
        return name

    def _kind(self, dtype_text: str) -> tuple[np.dtype[Any], str]:
        dtype = np.dtype(dtype_text)
        kind = self._kinds[dtype_text] = (dtype, self.datatype(dtype))
        return kind

    def unpack(self, item: PackedResult | None) -> BackendResult:
        """The result of one request; an empty one when its response comes (or came) another
        way (None, :data:`~repokit.backends.python.messages.SENT_LATER`)."""
        if item is None or item == SENT_LATER:
            return BackendResult()
        tag = item[0]
        if tag == ERROR:
            _, code_name, message = item
            code = Code.__members__.get(code_name, Code.INTERNAL)
            return BackendResult(error=RepokitError(code, message))
        if tag == BODY:  # a wire entry's response, encoded by the instance
            return BackendResult(encoded=item[1])
        if tag == FALLBACK:  # a wire entry the instance did not take
            return WIRE_FALLBACK
        _, outputs, parameters = item
        tensors = []
        kinds = self._kinds
        for name, packed in outputs:
            dtype_text, shape, data = packed
            if dtype_text is None:  # not a numeric array: it travelled as itself
                array = ipc.unpack_array(packed, self._dtypes)
                datatype = self.datatype(array.dtype)
            else:  # ipc.unpack_array written out with the datatype found in the same lookup
                kind = kinds.get(dtype_text)
                dtype, datatype = kind if kind is not None else self._kind(dtype_text)
                array = np.ndarray(shape, dtype, data)
            tensors.append(InferTensor(name, datatype, array.shape, array, {}))
        if not parameters:
            return BackendResult(tensors)
        params: dict[str, ParamValue] = {
            k: v for k, v in parameters.items() if isinstance(v, (bool, int, float, str))
        }
        return BackendResult(tensors, None, params)


async def answers_later(
    target: Instance,
    batch: RequestBatch,
    items: list[Any],
    results: list[BackendResult],
) -> list[BackendResult]:
    """Wait for the answers a non-decoupled model sends through response senders after its
    ``execute`` returned (the item :data:`~repokit.backends.python.messages.SENT_LATER`)."""
    link = target.link
    if link is None or SENT_LATER not in items:
        return results
    for index, item in enumerate(items):
        if item == SENT_LATER:
            results[index] = await link.answer(batch[index][-1])
    return results


def rescheduled(
    requests: list[BackendRequest],
    batch: RequestBatch,
    items: list[Any],
    indexes: tuple[int, ...],
    *,
    unpack: Callable[[PackedResult | None], BackendResult],
    hook: Callable[[BackendRequest], None] | None,
    streams: dict[int, RequestControl] | None,
    server: ServerApi | None,
) -> list[BackendResult]:
    """Hand the requests the model released with RESCHEDULE (at ``indexes``) to the
    scheduler's ``hook``; the others get their results. A request that cannot be rescheduled
    gets the error instead. ``streams``: a decoupled model's response sinks (the next execution
    of a rescheduled request registers a new key)."""
    results = [unpack(item) for item in items]
    for index in indexes:
        if streams is not None:
            streams.pop(batch[index][-1], None)
        try:
            if hook is None:
                raise RepokitError(Code.UNSUPPORTED, NOT_ITERATIVE)
            hook(requests[index])
        except RepokitError as exc:
            log_release_failure(server, exc)
            results[index] = BackendResult(error=exc)
    return results


def log_release_failure(server: ServerApi | None, error: RepokitError | None) -> None:
    """The model log line of a request released with RESCHEDULE that cannot run again."""
    if server is not None and error is not None:
        server.model_log.error("Failed to release request: %s", error.message)


def dead(target: Instance, requests: list[Any]) -> list[BackendResult]:
    """The results of requests that were at (or queued for) a process that died."""
    target.dead = True
    message = not_healthy(target.name)
    if target.death:
        message = f"{message} {target.death[:1].upper()}{target.death[1:]}."
    error = RepokitError(Code.INTERNAL, message)
    return [BackendResult(error=error) for _ in requests]


def gone(target: Instance, requests: list[Any], model: str, failure: str) -> list[BackendResult]:
    """The results of requests for an instance that could not be restarted (``failure``: why
    the model's instances are no longer restarted, "" when they still are)."""
    if not failure:
        return dead(target, requests)
    error = RepokitError(Code.UNAVAILABLE, f"model '{model}' is unavailable: {failure}")
    return [BackendResult(error=error) for _ in requests]


def wire_failure(kind: str, payload: Any, server: ServerApi | None) -> BackendResult:
    """A wire request that ran without a result: released with RESCHEDULE (only the sequence
    batcher can run a request again, and it does not send requests as bytes) or failed."""
    if kind == RESCHEDULED:
        result = BackendResult(error=RepokitError(Code.UNSUPPORTED, NOT_ITERATIVE))
        log_release_failure(server, result.error)
        return result
    return BackendResult(error=RepokitError(Code.INTERNAL, str(payload)))
